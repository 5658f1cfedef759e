//! Leader election on a coordination.k8s.io Lease, as client-go's leaderelection does it:
//! only the leader runs the bridge. The leader renews every `retry_period`; if it cannot
//! renew for `renew_deadline` (shorter than `lease_duration`) it steps down and stops
//! publishing, before any other replica may take the lease. Others decide that a lease
//! expired by their own clock (the record unchanged for `lease_duration` since they saw it
//! change), so clock skew between nodes does not matter.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio_util::sync::CancellationToken;

use crate::config::LeaderElectionConfig;
use crate::telemetry::meters::LeaseMeters;

#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error(
        "lease {namespace}/{name}: forbidden ({message}); grant the identity get, create and update on leases (coordination.k8s.io) in namespace {namespace}"
    )]
    Forbidden { namespace: String, name: String, message: String },
    #[error("lease {namespace}/{name}: the namespace does not exist ({message}); create it or set leader_election.namespace")]
    NamespaceNotFound { namespace: String, name: String, message: String },
    #[error(
        "lease {namespace}/{name}: the API server rejected the lease ({message}); check leader_election.lease_name and leader_election.lease_duration_secs"
    )]
    Invalid { namespace: String, name: String, message: String },
    #[error("lease {namespace}/{name}: {source}; check that the identity may get, create and update leases there")]
    Api {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// What a failed Lease call means for the election.
#[derive(Debug)]
enum LeaseFailure {
    /// Another replica wrote first (409): read the lease again at the next attempt.
    Conflict,
    /// Retrying may succeed (throttling, an API server restarting, a network blip); with
    /// what went wrong.
    Transient(LeaseErrorKind, String),
    /// Retrying cannot fix it (RBAC, a missing namespace, an invalid Lease).
    Fatal(kube::Error),
}

/// The bounded `error_kind` label of `deltaship_lease_errors_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LeaseErrorKind {
    /// 429 Too Many Requests.
    Throttled,
    /// 500, 502, 503 or 504: the API server or a proxy in front of it is failing.
    ServerError,
    /// No answer within the attempt's time.
    Timeout,
    /// The connection failed or the response could not be read.
    Connection,
    /// An error retrying should not fix (e.g. 403), seen by the leader: it keeps trying
    /// until its renew deadline all the same, as client-go does.
    Rejected,
}

impl LeaseErrorKind {
    fn as_str(self) -> &'static str {
        match self {
            LeaseErrorKind::Throttled => "throttled",
            LeaseErrorKind::ServerError => "server_error",
            LeaseErrorKind::Timeout => "timeout",
            LeaseErrorKind::Connection => "connection",
            LeaseErrorKind::Rejected => "rejected",
        }
    }
}

impl LeaseFailure {
    fn of(e: kube::Error) -> LeaseFailure {
        match &e {
            kube::Error::Api(s) => match s.code {
                409 => LeaseFailure::Conflict,
                // The lease was deleted between our read and our write (a missing
                // namespace is reported with details.kind "namespaces" and is fatal).
                404 if s.details.as_ref().is_none_or(|d| d.kind != "namespaces") => LeaseFailure::Conflict,
                429 => LeaseFailure::Transient(LeaseErrorKind::Throttled, e.to_string()),
                500 | 502 | 503 | 504 => LeaseFailure::Transient(LeaseErrorKind::ServerError, e.to_string()),
                // 408 Request Timeout: the server gave up waiting; try again.
                408 => LeaseFailure::Transient(LeaseErrorKind::Timeout, e.to_string()),
                _ => LeaseFailure::Fatal(e),
            },
            // The transport: refused, reset, TLS handshake cut short, a body cut off.
            kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => {
                LeaseFailure::Transient(LeaseErrorKind::Connection, e.to_string())
            }
            _ => LeaseFailure::Fatal(e),
        }
    }
}

/// Logs a streak of transient failures once (WARN at the first, INFO when it ends) and
/// counts every failure in `deltaship_lease_errors_total`.
#[derive(Default)]
struct Streak {
    failures: u32,
}

impl Streak {
    fn failed(&mut self, identity: &str, kind: LeaseErrorKind, error: &str) {
        LeaseMeters.failed(kind.as_str());
        if self.failures == 0 {
            tracing::warn!(identity, error_kind = kind.as_str(), error, "Lease API call failed; retrying (logged once until it succeeds)");
        }
        self.failures += 1;
    }

    fn succeeded(&mut self, identity: &str) {
        if self.failures > 0 {
            tracing::info!(identity, failures = self.failures, "Lease API reachable again");
            self.failures = 0;
        }
    }
}

pub struct Elector {
    api: Api<Lease>,
    namespace: String,
    name: String,
    identity: String,
    duration: Duration,
    renew_deadline: Duration,
    retry: Duration,
}

/// The lease record as last observed, and when (by our clock).
struct LastSeen {
    holder: Option<String>,
    renew: Option<MicroTime>,
    at: Instant,
}

/// What an election round does with the lease as read.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Action {
    /// There is no lease: create it, held by this replica.
    Create,
    /// This replica holds it: write a new renew time, keeping the acquire time and the
    /// transitions.
    Renew { transitions: i32 },
    /// Nobody holds it, or its holder has not renewed it for a lease duration by our
    /// clock: take it over, one transition more.
    TakeOver { transitions: i32 },
    /// Another replica holds a lease that is still fresh (a leader that reads this lost
    /// the lease).
    StandBy { holder: String },
}

/// The decision of one election round, without I/O: `lease` is the spec as read (None:
/// there is no lease), `observed` what earlier rounds saw (updated here when the record
/// changed), `now` our clock. A lease expires when its record stayed unchanged for
/// `duration` since we saw it change, so the holder's clock never matters.
fn decide(lease: Option<&LeaseSpec>, observed: &mut Option<LastSeen>, identity: &str, duration: Duration, now: Instant) -> Action {
    let Some(spec) = lease else { return Action::Create };
    let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
    if observed.as_ref().is_none_or(|o| o.holder != holder || o.renew != spec.renew_time) {
        *observed = Some(LastSeen { holder: holder.clone(), renew: spec.renew_time.clone(), at: now });
    }
    let expired = observed.as_ref().is_some_and(|o| now.saturating_duration_since(o.at) >= duration);
    let transitions = spec.lease_transitions.unwrap_or(0);
    match holder {
        Some(holder) if holder == identity => Action::Renew { transitions },
        Some(holder) if !expired => Action::StandBy { holder },
        _ => Action::TakeOver { transitions: transitions + 1 },
    }
}

/// The lease's namespace: the configured one, else `$POD_NAMESPACE`, else `default`.
pub fn lease_namespace(cfg: &LeaderElectionConfig) -> String {
    cfg.namespace.clone().or_else(|| std::env::var("POD_NAMESPACE").ok()).unwrap_or_else(|| "default".into())
}

impl Elector {
    pub fn new(client: Client, cfg: &LeaderElectionConfig) -> Elector {
        let namespace = lease_namespace(cfg);
        let identity = cfg.identity.clone().unwrap_or_else(|| {
            let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "deltaship".into());
            format!("{host}-{}", &uuid::Uuid::new_v4().simple().to_string()[..8])
        });
        Elector {
            api: Api::namespaced(client, &namespace),
            namespace,
            name: cfg.lease_name.clone(),
            identity,
            duration: Duration::from_secs(cfg.lease_duration_secs),
            renew_deadline: Duration::from_secs(cfg.renew_deadline_secs),
            retry: Duration::from_secs(cfg.retry_period_secs),
        }
    }

    /// The lease's namespace and name, and this replica's identity in it.
    pub fn lease(&self) -> (&str, &str, &str) {
        (&self.namespace, &self.name, &self.identity)
    }

    /// The error that ends the election, by what the API server said.
    fn error(&self, source: kube::Error) -> LeaderError {
        let (namespace, name) = (self.namespace.clone(), self.name.clone());
        let (code, message) = match &source {
            kube::Error::Api(s) => (s.code, s.message.clone()),
            _ => (0, String::new()),
        };
        match code {
            403 => LeaderError::Forbidden { namespace, name, message },
            404 => LeaderError::NamespaceNotFound { namespace, name, message },
            400 | 422 => LeaderError::Invalid { namespace, name, message },
            _ => LeaderError::Api { namespace, name, source },
        }
    }

    /// One attempt to take or renew the lease, given up after `within`.
    async fn attempt(&self, observed: &mut Option<LastSeen>, within: Duration) -> Result<Action, LeaseFailure> {
        match tokio::time::timeout(within, self.try_acquire(observed)).await {
            Ok(result) => result.map_err(LeaseFailure::of),
            Err(_) => Err(LeaseFailure::Transient(LeaseErrorKind::Timeout, format!("no answer within {:.1}s", within.as_secs_f64()))),
        }
    }

    /// The wait after the `failures`-th transient failure in a row: the retry period,
    /// doubling per failure up to the lease duration, with up to 20% jitter so that
    /// standbys do not retry in step against a throttling API server.
    fn backoff(&self, failures: u32) -> Duration {
        let base = self.retry.saturating_mul(1 << failures.saturating_sub(1).min(16)).min(self.duration.max(self.retry));
        base.mul_f64(1.0 + rand::random::<f64>() * 0.2)
    }

    /// Waits until this replica holds the lease (true) or `stop` is cancelled (false).
    /// Transient failures (429, 5xx, timeouts, connection errors) are retried with
    /// backoff; errors that retrying cannot fix (403, a missing namespace, an invalid
    /// Lease) end it.
    pub async fn acquire(&self, stop: &CancellationToken) -> Result<bool, LeaderError> {
        let mut observed: Option<LastSeen> = None;
        let mut logged = false;
        let mut streak = Streak::default();
        loop {
            let mut wait = self.retry;
            match self.attempt(&mut observed, self.renew_deadline).await {
                Ok(Action::StandBy { holder }) => {
                    streak.succeeded(&self.identity);
                    if !logged {
                        tracing::info!(identity = %self.identity, holder = %holder, "Standing by: another replica leads");
                        logged = true;
                    }
                }
                Ok(_) => {
                    streak.succeeded(&self.identity);
                    tracing::info!(identity = %self.identity, lease = %self.name, "Became the leader");
                    return Ok(true);
                }
                Err(LeaseFailure::Conflict) => streak.succeeded(&self.identity), // someone else wrote first
                Err(LeaseFailure::Transient(kind, error)) => {
                    streak.failed(&self.identity, kind, &error);
                    wait = self.backoff(streak.failures);
                }
                Err(LeaseFailure::Fatal(e)) => return Err(self.error(e)),
            }
            tokio::select! {
                _ = stop.cancelled() => return Ok(false),
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// One election round: reads the lease, decides, and writes it when this replica
    /// leads; returns what it did.
    async fn try_acquire(&self, observed: &mut Option<LastSeen>) -> Result<Action, kube::Error> {
        let current = self.api.get_opt(&self.name).await?;
        let spec = current.as_ref().map(|l| l.spec.clone().unwrap_or_default());
        let action = decide(spec.as_ref(), observed, &self.identity, self.duration, Instant::now());
        let mut lease = match &action {
            Action::Create => {
                self.api.create(&PostParams::default(), &self.record(None, 0)).await?;
                return Ok(action);
            }
            Action::StandBy { .. } => return Ok(action),
            Action::Renew { transitions } => self.record(spec.as_ref(), *transitions),
            Action::TakeOver { transitions } => self.record(None, *transitions),
        };
        lease.metadata.resource_version = current.and_then(|l| l.metadata.resource_version);
        // Optimistic concurrency: the write fails with 409 if anyone changed the lease.
        self.api.replace(&self.name, &PostParams::default(), &lease).await?;
        Ok(action)
    }

    /// The lease held by this replica, renewed now; `renewed` is the spec it renews (its
    /// acquire time is kept), None when it takes the lease.
    fn record(&self, renewed: Option<&LeaseSpec>, transitions: i32) -> Lease {
        let now = MicroTime(Timestamp::now());
        let acquire = renewed.and_then(|s| s.acquire_time.clone()).unwrap_or_else(|| now.clone());
        Lease {
            metadata: ObjectMeta { name: Some(self.name.clone()), namespace: Some(self.namespace.clone()), ..Default::default() },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.identity.clone()),
                lease_duration_seconds: Some(self.duration.as_secs() as i32),
                acquire_time: Some(acquire),
                renew_time: Some(now),
                lease_transitions: Some(transitions),
                ..Default::default()
            }),
        }
    }

    /// Renews the lease until `stop` is cancelled; cancels `lost` (and returns) when the
    /// lease could not be renewed within the renew deadline or another replica took it.
    /// Any failure is retried every retry period until the deadline, as client-go does:
    /// a leader stops publishing only when the deadline passes.
    pub async fn hold(&self, stop: &CancellationToken, lost: &CancellationToken) {
        let mut renewed = Instant::now();
        let mut streak = Streak::default();
        loop {
            // Never sleep past the deadline: the leader must stop before the lease expires.
            let left = self.renew_deadline.saturating_sub(renewed.elapsed());
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(self.retry.min(left)) => {}
            }
            let mut observed = None;
            let left = self.renew_deadline.saturating_sub(renewed.elapsed());
            match self.attempt(&mut observed, left).await {
                Ok(Action::StandBy { .. }) => {
                    tracing::error!(identity = %self.identity, "Lost the lease to another replica; stopping");
                    lost.cancel();
                    return;
                }
                Ok(_) => {
                    streak.succeeded(&self.identity);
                    renewed = Instant::now();
                }
                Err(LeaseFailure::Conflict) => {} // read again at the next attempt
                Err(LeaseFailure::Transient(kind, error)) => streak.failed(&self.identity, kind, &error),
                Err(LeaseFailure::Fatal(e)) => streak.failed(&self.identity, LeaseErrorKind::Rejected, &e.to_string()),
            }
            if renewed.elapsed() >= self.renew_deadline {
                tracing::error!(identity = %self.identity, deadline_secs = self.renew_deadline.as_secs(), "Could not renew the lease in time; stopping before it expires");
                lost.cancel();
                return;
            }
        }
    }

    /// Gives the lease up (on a graceful stop), so a standby takes over at once.
    pub async fn release(&self) {
        let Ok(Some(current)) = self.api.get_opt(&self.name).await else { return };
        let spec = current.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(&self.identity) {
            return;
        }
        let mut lease = current.clone();
        lease.spec = Some(LeaseSpec { holder_identity: None, lease_duration_seconds: Some(1), ..spec });
        if let Err(e) = self.api.replace(&self.name, &PostParams::default(), &lease).await {
            tracing::warn!(error = %e, "Could not release the lease; the standby takes over when it expires");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::{Arc, Mutex};

    use axum::body::Bytes;
    use axum::http::{Method, StatusCode};
    use serde_json::{Value, json};

    use super::*;

    /// A lease spec as read: `holder` ("" for none), renewed at second `renew` by the
    /// holder's clock, with `transitions` (None: the field is absent).
    fn spec(holder: &str, renew: i64, transitions: Option<i32>) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            renew_time: Some(MicroTime(Timestamp::from_second(renew).unwrap())),
            lease_transitions: transitions,
            ..Default::default()
        }
    }

    const LEASE: Duration = Duration::from_secs(15);

    #[test]
    fn no_lease_is_created() {
        assert_eq!(decide(None, &mut None, "me", LEASE, Instant::now()), Action::Create);
    }

    #[test]
    fn an_own_lease_is_renewed_with_its_transitions() {
        let now = Instant::now();
        assert_eq!(decide(Some(&spec("me", 1, Some(4))), &mut None, "me", LEASE, now), Action::Renew { transitions: 4 });
        assert_eq!(decide(Some(&spec("me", 1, None)), &mut None, "me", LEASE, now), Action::Renew { transitions: 0 });
    }

    #[test]
    fn a_lease_without_a_holder_is_taken_over_at_once() {
        let now = Instant::now();
        assert_eq!(decide(Some(&spec("", 1, Some(2))), &mut None, "me", LEASE, now), Action::TakeOver { transitions: 3 });
        let released = LeaseSpec { holder_identity: None, ..spec("", 1, None) };
        assert_eq!(decide(Some(&released), &mut None, "me", LEASE, now), Action::TakeOver { transitions: 1 });
    }

    #[test]
    fn a_foreign_fresh_lease_means_standing_by() {
        let mut observed = None;
        let action = decide(Some(&spec("other", 1, Some(2))), &mut observed, "me", LEASE, Instant::now());
        assert_eq!(action, Action::StandBy { holder: "other".into() });
    }

    #[test]
    fn a_foreign_lease_unchanged_for_a_lease_duration_is_taken_over() {
        let (t0, mut observed) = (Instant::now(), None);
        let lease = spec("other", 1, Some(2));
        let standby = Action::StandBy { holder: "other".into() };
        assert_eq!(decide(Some(&lease), &mut observed, "me", LEASE, t0), standby);
        assert_eq!(decide(Some(&lease), &mut observed, "me", LEASE, t0 + LEASE - Duration::from_millis(1)), standby);
        assert_eq!(decide(Some(&lease), &mut observed, "me", LEASE, t0 + LEASE), Action::TakeOver { transitions: 3 }, "expired exactly at the duration");
    }

    #[test]
    fn a_renewal_or_a_new_holder_restarts_the_expiry_clock() {
        let (t0, mut observed) = (Instant::now(), None);
        decide(Some(&spec("other", 1, Some(2))), &mut observed, "me", LEASE, t0);
        let later = t0 + LEASE - Duration::from_secs(1);
        decide(Some(&spec("other", 2, Some(2))), &mut observed, "me", LEASE, later);
        let standby = Action::StandBy { holder: "other".into() };
        assert_eq!(decide(Some(&spec("other", 2, Some(2))), &mut observed, "me", LEASE, t0 + LEASE), standby, "renewed: fresh again");
        decide(Some(&spec("third", 2, Some(3))), &mut observed, "me", LEASE, later + LEASE);
        let third = Action::StandBy { holder: "third".into() };
        assert_eq!(
            decide(Some(&spec("third", 2, Some(3))), &mut observed, "me", LEASE, later + LEASE + Duration::from_secs(1)),
            third,
            "new holder: fresh again"
        );
    }

    #[test]
    fn the_holders_clock_does_not_matter_only_ours() {
        // A renew time long past (or in the future) by the holder's clock: still fresh until
        // we saw it unchanged for a lease duration.
        let (t0, mut observed) = (Instant::now(), None);
        for renew in [0, 4_000_000_000] {
            let lease = spec("other", renew, Some(2));
            assert_eq!(decide(Some(&lease), &mut observed, "me", LEASE, t0), Action::StandBy { holder: "other".into() }, "renew time {renew}");
        }
    }

    #[test]
    fn a_clock_reading_before_the_observation_counts_as_no_time_passed() {
        let (t0, mut observed) = (Instant::now() + LEASE, None);
        decide(Some(&spec("other", 1, Some(2))), &mut observed, "me", LEASE, t0);
        let earlier = t0 - LEASE;
        assert_eq!(decide(Some(&spec("other", 1, Some(2))), &mut observed, "me", LEASE, earlier), Action::StandBy { holder: "other".into() });
    }

    /// A Lease API on a local port: each call first takes the next injected status code,
    /// if any, and fails with it (unless it is `OK`); otherwise it keeps one lease as the
    /// API server would.
    #[derive(Default)]
    struct MockApi {
        inject: VecDeque<u16>,
        lease: Option<Value>,
        calls: usize,
    }

    /// An injected "answer normally".
    const OK: u16 = 0;

    fn status(code: u16, reason: &str, kind: &str) -> (StatusCode, String) {
        let body = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": format!("injected {code}"), "reason": reason, "details": {"kind": kind}, "code": code});
        (StatusCode::from_u16(code).unwrap(), body.to_string())
    }

    async fn answer(api: Arc<Mutex<MockApi>>, method: Method, body: Bytes) -> (StatusCode, String) {
        let mut api = api.lock().unwrap();
        api.calls += 1;
        if let Some(code) = api.inject.pop_front().filter(|c| *c != OK) {
            let (reason, kind) = match code {
                403 => ("Forbidden", "leases"),
                404 => ("NotFound", "namespaces"),
                429 => ("TooManyRequests", "leases"),
                _ => ("InternalError", "leases"),
            };
            return status(code, reason, kind);
        }
        match method {
            Method::GET => match &api.lease {
                Some(l) => (StatusCode::OK, l.to_string()),
                None => status(404, "NotFound", "leases"),
            },
            _ => {
                let mut lease: Value = serde_json::from_slice(&body).unwrap();
                lease["metadata"]["resourceVersion"] = json!(api.calls.to_string());
                api.lease = Some(lease.clone());
                (if method == Method::POST { StatusCode::CREATED } else { StatusCode::OK }, lease.to_string())
            }
        }
    }

    /// An elector against the mock, with short periods (lease 3 s, renew deadline 1 s,
    /// retry 100 ms).
    async fn elector(inject: &[u16]) -> (Elector, Arc<Mutex<MockApi>>) {
        let api = Arc::new(Mutex::new(MockApi { inject: inject.iter().copied().collect(), ..Default::default() }));
        let state = api.clone();
        let app = axum::Router::new().fallback(move |method: Method, body: Bytes| answer(state.clone(), method, body));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let mut config = kube::Config::new(format!("http://{addr}").parse().unwrap());
        // The client's own retries (429, 503, 504) would hide the injected failures.
        config.default_retry = false;
        let client = Client::try_from(config).unwrap();
        let elector = Elector {
            api: Api::namespaced(client, "ns"),
            namespace: "ns".into(),
            name: "lease".into(),
            identity: "me".into(),
            duration: Duration::from_secs(3),
            renew_deadline: Duration::from_secs(1),
            retry: Duration::from_millis(100),
        };
        (elector, api)
    }

    #[tokio::test]
    async fn a_standby_retries_throttling_and_server_errors_then_leads() {
        let (elector, api) = elector(&[429, 500, 503]).await;
        let acquired = tokio::time::timeout(Duration::from_secs(10), elector.acquire(&CancellationToken::new())).await.unwrap();
        assert!(acquired.unwrap(), "leads after the transient failures");
        let api = api.lock().unwrap();
        assert_eq!(api.calls, 5, "three failures, then a GET (none) and the create");
        assert_eq!(api.lease.as_ref().unwrap()["spec"]["holderIdentity"], "me");
    }

    #[tokio::test]
    async fn a_standby_stops_with_a_clear_error_when_forbidden_or_the_namespace_is_missing() {
        let (elector, api) = elector(&[403]).await;
        let e = elector.acquire(&CancellationToken::new()).await.unwrap_err();
        assert!(matches!(e, LeaderError::Forbidden { .. }), "{e:?}");
        assert!(e.to_string().contains("grant the identity get, create and update on leases"), "{e}");
        assert_eq!(api.lock().unwrap().calls, 1, "not retried");
        // The GET finds no lease; the create fails: the namespace does not exist.
        let (elector, api) = self::elector(&[OK, 404]).await;
        let e = elector.acquire(&CancellationToken::new()).await.unwrap_err();
        assert!(e.to_string().contains("the namespace does not exist"), "{e}");
        assert_eq!(api.lock().unwrap().calls, 2, "not retried");
    }

    /// The leader of a fresh mock, and the mock, with `inject` queued after it leads.
    async fn leader(inject: &[u16]) -> (Elector, Arc<Mutex<MockApi>>) {
        let (elector, api) = elector(&[]).await;
        assert!(elector.acquire(&CancellationToken::new()).await.unwrap());
        api.lock().unwrap().inject = inject.iter().copied().collect();
        (elector, api)
    }

    #[tokio::test]
    async fn a_leader_rides_out_failed_renewals_shorter_than_the_renew_deadline() {
        let (elector, api) = leader(&[429, 500, 502]).await;
        let (stop, lost) = (CancellationToken::new(), CancellationToken::new());
        let renewing = async { elector.hold(&stop, &lost).await };
        tokio::select! {
            _ = renewing => panic!("hold returned: lost = {}", lost.is_cancelled()),
            _ = tokio::time::sleep(Duration::from_millis(1500)) => {}
        }
        assert!(!lost.is_cancelled());
        let api = api.lock().unwrap();
        // 2 calls to lead, 3 failures (300 ms, under the 1 s deadline), then renewals.
        assert!(api.inject.is_empty() && api.calls >= 2 + 3 + 4, "renewed after the failures: {} calls", api.calls);
    }

    #[tokio::test]
    async fn a_leader_stops_when_the_renew_deadline_passes() {
        let (elector, _api) = leader(&[503; 100]).await;
        let (stop, lost) = (CancellationToken::new(), CancellationToken::new());
        let started = Instant::now();
        tokio::time::timeout(Duration::from_secs(5), elector.hold(&stop, &lost)).await.unwrap();
        assert!(lost.is_cancelled());
        let after = started.elapsed();
        assert!(after >= Duration::from_secs(1) && after < Duration::from_millis(1300), "stopped after {after:?}, deadline 1 s");
    }
}
