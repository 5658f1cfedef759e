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

#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error("lease {namespace}/{name}: {source}; check that the identity may get, create and update leases there")]
    Api {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
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
struct Observed {
    holder: Option<String>,
    renew: Option<MicroTime>,
    at: Instant,
}

impl Elector {
    pub fn new(client: Client, cfg: &LeaderElectionConfig) -> Elector {
        let namespace = cfg.namespace.clone().or_else(|| std::env::var("POD_NAMESPACE").ok()).unwrap_or_else(|| "default".into());
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

    fn error(&self, source: kube::Error) -> LeaderError {
        LeaderError::Api {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            source,
        }
    }

    /// Waits until this replica holds the lease (true) or `stop` is cancelled (false).
    pub async fn acquire(&self, stop: &CancellationToken) -> Result<bool, LeaderError> {
        let mut observed: Option<Observed> = None;
        let mut logged = false;
        loop {
            match self.try_acquire(&mut observed).await {
                Ok(true) => {
                    tracing::info!(identity = %self.identity, lease = %self.name, "Became the leader");
                    return Ok(true);
                }
                Ok(false) => {
                    if !logged {
                        let holder = observed.as_ref().and_then(|o| o.holder.clone()).unwrap_or_default();
                        tracing::info!(identity = %self.identity, holder = %holder, "Standing by: another replica leads");
                        logged = true;
                    }
                }
                Err(kube::Error::Api(e)) if e.code == 409 => {} // someone else wrote first
                Err(e @ kube::Error::Api(_)) => return Err(self.error(e)),
                Err(e) => tracing::warn!(error = %e, "Lease unreachable; retrying"),
            }
            tokio::select! {
                _ = stop.cancelled() => return Ok(false),
                _ = tokio::time::sleep(self.retry) => {}
            }
        }
    }

    async fn try_acquire(&self, observed: &mut Option<Observed>) -> Result<bool, kube::Error> {
        let current = match self.api.get_opt(&self.name).await? {
            None => {
                let lease = self.record(None, 0);
                self.api.create(&PostParams::default(), &lease).await?;
                return Ok(true);
            }
            Some(l) => l,
        };
        let spec = current.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let changed = observed.as_ref().is_none_or(|o| o.holder != holder || o.renew != spec.renew_time);
        if changed {
            *observed = Some(Observed {
                holder: holder.clone(),
                renew: spec.renew_time.clone(),
                at: Instant::now(),
            });
        }
        let expired = observed.as_ref().is_some_and(|o| o.at.elapsed() >= self.duration);
        let free = holder.is_none() || holder.as_deref() == Some(&self.identity) || expired;
        if !free {
            return Ok(false);
        }
        let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(holder.as_deref() != Some(&self.identity));
        let mut lease = self.record(Some(&current), transitions);
        lease.metadata.resource_version = current.metadata.resource_version.clone();
        // Optimistic concurrency: the write fails with 409 if anyone changed the lease.
        self.api.replace(&self.name, &PostParams::default(), &lease).await?;
        Ok(true)
    }

    fn record(&self, current: Option<&Lease>, transitions: i32) -> Lease {
        let now = MicroTime(Timestamp::now());
        let acquire = current
            .and_then(|l| l.spec.as_ref())
            .filter(|s| s.holder_identity.as_deref() == Some(&self.identity))
            .and_then(|s| s.acquire_time.clone())
            .unwrap_or_else(|| now.clone());
        Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(self.namespace.clone()),
                ..Default::default()
            },
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
    pub async fn hold(&self, stop: &CancellationToken, lost: &CancellationToken) {
        let mut renewed = Instant::now();
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(self.retry) => {}
            }
            let mut observed = None;
            match self.try_acquire(&mut observed).await {
                Ok(true) => renewed = Instant::now(),
                Ok(false) => {
                    tracing::error!(identity = %self.identity, "Lost the lease to another replica; stopping");
                    lost.cancel();
                    return;
                }
                Err(e) => tracing::warn!(identity = %self.identity, error = %e, "Lease renewal failed; retrying"),
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
        lease.spec = Some(LeaseSpec {
            holder_identity: None,
            lease_duration_seconds: Some(1),
            ..spec
        });
        if let Err(e) = self.api.replace(&self.name, &PostParams::default(), &lease).await {
            tracing::warn!(error = %e, "Could not release the lease; the standby takes over when it expires");
        }
    }
}
