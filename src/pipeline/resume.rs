//! Start-up from checkpoints: each route's checkpoint store opened and read, and each
//! watch's start decided: resumed from its routes' checkpoints, or a full initial sync,
//! logged and counted with the reason.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::retry::RetryPolicy;
use super::tail;
use crate::change::Entry;
use kube::Client;

use crate::checkpoint::decision::{self, Decision, Facts, Held, Proof, RouteFacts};
use crate::checkpoint::holder::{self, Claim, Holder};
use crate::checkpoint::{
    self, Destination, Hold, Learned, Loaded, Now, Parsed, Progress, Refused, Resume, Sample, Seal, Start, Store, StoreError, Timeline, Unusable, Watched,
};
use crate::config::{Config, RouteConfig};
use crate::plan::{Output, Scope};
use crate::telemetry::Health;
use crate::telemetry::meters::{ResumeMeters, held_elsewhere};
use crate::watch::position;

/// How long start-up keeps trying to read a route's checkpoint store before starting its
/// watches with full syncs.
const READ_FOR: Duration = Duration::from_secs(30);

/// Where everything starts.
#[derive(Default)]
pub struct Starts {
    /// By route position: its checkpoint, when it keeps one.
    pub routes: Vec<Option<CheckpointedRoute>>,
    /// By watch slot: where its watch starts.
    pub watches: Vec<WatchStart>,
}

/// A route that keeps a checkpoint.
pub struct CheckpointedRoute {
    /// Where its checkpoint is written: its store, open, or how to open it once it can be
    /// read.
    pub store: Destination,
    /// What its watches' workers register and its dispatcher acknowledges.
    pub progress: Arc<Progress>,
    /// Its holder record (`checkpoint::holder`) and the record's key.
    pub holder: (String, Holder),
}

/// Where a watch starts.
pub struct WatchStart {
    /// The checkpoint it resumes from; none: a full initial sync.
    pub resume: Option<Resume>,
    /// The resourceVersion its watch continues from; none: it lists (after a checkpoint,
    /// the list is shipped as a diff against it).
    pub continue_from: Option<String>,
}

impl Starts {
    /// Each route's progress, by route position.
    pub fn progress(&self) -> Vec<Option<Arc<Progress>>> {
        self.routes.iter().map(|r| r.as_ref().map(|r| r.progress.clone())).collect()
    }
}

/// A route of a watch and its checkpoint of the watch, as read.
struct RouteReading {
    /// The route's position.
    route: usize,
    /// The watch's key prefix in the route's checkpoint.
    prefix: String,
    /// The watch's configuration digest (`checkpoint::digest`).
    digest: String,
    /// The checkpoint as read, when it parsed.
    loaded: Option<Loaded>,
    /// The records of a checkpoint refused as read, which a fresh start deletes.
    refused: Vec<String>,
}

impl RouteReading {
    /// The records a fresh start of the watch deletes: the old checkpoint's objects (the
    /// new initial sync records what exists now).
    fn clearing(&self) -> Vec<String> {
        match &self.loaded {
            Some(loaded) => loaded.objects.keys().map(|k| checkpoint::object_key(&self.prefix, k)).collect(),
            None => self.refused.clone(),
        }
    }
}

/// Reads the checkpoints of every route and decides each watch's start: the facts are
/// gathered here, and `checkpoint::decision` decides on them.
pub async fn load(config: &Config, seal: &Seal, client: &Client, routes: &[RouteConfig], scopes: &[Arc<Scope>], patience: &Patience<'_>) -> Starts {
    let Patience { retry, stop, .. } = *patience;
    let mut starts = Starts::default();
    // Each route's checkpoints, or why it keeps none.
    let mut read: Vec<Result<Parsed, Unusable>> = Vec::new();
    for (r, route) in routes.iter().enumerate() {
        let prefix = checkpoint::route_prefix(&config.cluster, &route.name);
        let holder = (holder::key(&prefix), this_holder(config, scopes, r, &prefix));
        let reading = Instant::now();
        match open_led(config, route, &prefix, seal, &holder, patience).await {
            Ok(Some((store, records))) => {
                tracing::debug!(route = %route.name, records = records.len(), took_ms = reading.elapsed().as_millis() as u64, "Read the route's checkpoint");
                starts.routes.push(Some(CheckpointedRoute { store: Destination::Open(Arc::new(store)), progress: Arc::new(Progress::default()), holder }));
                read.push(Ok(checkpoint::parse(records, seal)));
            }
            Ok(None) => {
                starts.routes.push(None);
                read.push(Err(Unusable::NoStore));
            }
            Err(e) => {
                if stop.is_cancelled() {
                    tracing::debug!(route = %route.name, error = %e, "Stopped before the route's checkpoint could be read");
                } else if !config.resume.enabled {
                    tracing::warn!(route = %route.name, error = %e, "Resume is off and the route's checkpoint cannot be read to replace it; a later start with resume on may continue from it");
                } else if e.is_permanent() {
                    tracing::error!(route = %route.name, error = %e, "Cannot use the route's checkpoint; its watches start with full syncs and it keeps no checkpoint this run");
                } else {
                    tracing::error!(route = %route.name, error = %e, "Cannot read the route's checkpoint; its watches start with full syncs, and checkpointing starts once the store can be read");
                }
                // A store that may come back is opened by the writer later; one that cannot
                // be used as it is (refused) is not written this run.
                let later = config.resume.enabled && !e.is_permanent() && !stop.is_cancelled();
                starts.routes.push(later.then(|| {
                    let store =
                        Destination::Later { sink: Box::new(route.sink.clone()), resume: Box::new(config.resume.clone()), route: route.name.clone(), prefix };
                    CheckpointedRoute { store, progress: Arc::new(Progress::default()), holder }
                }));
                read.push(Err(Unusable::Unreadable));
            }
        }
    }
    // Stopped meanwhile: no watch starts (an initial list would be thrown away).
    if stop.is_cancelled() {
        return starts;
    }
    let cluster_uid = if starts.routes.iter().any(Option::is_some) { identity(client, retry).await } else { None };
    tracing::debug!(cluster_uid = ?cluster_uid, "Read the cluster's identity");
    for (slot, scope) in scopes.iter().enumerate() {
        let label = scope.resource.label();
        // Resume off: the checkpoint is read all the same, and replaced by this start's
        // full sync, so that a later start with resume on never continues from knowledge
        // older than what this run shipped.
        let enabled = config.resume.enabled && config.resources[scope.index].resume;
        let now = if enabled { Now { version: current_version(client, scope, retry).await, cluster_uid: cluster_uid.clone() } } else { Now::default() };
        tracing::debug!(watch = %scope.describe(), version = ?now.version, "Read where the API server stands");
        // Each route of the watch: what its checkpoint holds.
        let mut found = Vec::new();
        let mut facts = Facts { enabled, now, routes: Vec::new(), keeps_content: scope.keeps_content(), proof: Proof::NotGathered };
        for output in &scope.outputs {
            let prefix = checkpoint::watch_prefix(&checkpoint::route_prefix(&config.cluster, &output.route_name), &label, scope.namespace.as_deref());
            let digest = checkpoint::digest(&config.cluster, scope, output);
            let (held, loaded, refused) = match &mut read[output.route] {
                Ok(records) => match records.remove(&prefix) {
                    None => (Held::Refused(Unusable::Missing), None, Vec::new()),
                    Some(Err(Refused { why, keys })) => (Held::Refused(why), None, keys),
                    Some(Ok(loaded)) => (Held::Found(loaded.watch.clone()), Some(loaded), Vec::new()),
                },
                Err(why) => (Held::Untracked(*why), None, Vec::new()),
            };
            facts.routes.push(RouteFacts { digest: digest.clone(), held });
            found.push(RouteReading { route: output.route, prefix, digest, loaded, refused });
        }
        // The candidate's proof: what consumers received after its checkpoint, read from
        // its log, applied, and its newest objects compared with the API server's.
        let (mut learned, mut reach, mut hold) = (Learned::default(), None, None);
        if let Ok(i) = decision::candidate(&facts)
            && let RouteReading { route, loaded: Some(loaded), .. } = &mut found[i]
        {
            let route = &routes[*route];
            let watched = Watched {
                cluster: &config.cluster,
                resource: &format!("{}/{}", scope.resource.api_version(), scope.resource.kind),
                namespace: scope.namespace.as_deref(),
                current: facts.now.version.as_deref().and_then(|v| v.parse().ok()),
            };
            let read_from = loaded.watch.tail.as_ref().map(|t| t.next.clone());
            if let Some((l, ends)) = read_tail(route, &scope.outputs[i], loaded, watched, &label).await {
                // Kept as the checkpoint's tail until the watch is past all it taught.
                let until = l.delivered.values().filter_map(|v| v.parse::<u64>().ok()).max();
                hold = read_from.zip(until).map(|(next, until)| Hold { next, until });
                (learned, reach) = (l, Some(ends));
            }
            facts.proof = Proof::Judged(timeline(client, scope, loaded).await);
            tracing::debug!(watch = %scope.describe(), proof = ?facts.proof, "Looked the checkpoint's newest objects up");
        }
        let decided = decision::decide(&facts);
        let resumed = match &decided {
            Decision::Resume { route, .. } => Some(*route),
            Decision::FullSync(_) => None,
        };
        // Where each route's checkpoint of the watch starts: as read when the watch
        // resumes from it, else cleared (the initial sync records what exists now); what it
        // learned from the log's tail, and where its log ends.
        for (i, reading) in found.iter().enumerate() {
            let Some(CheckpointedRoute { progress, .. }) = &starts.routes[reading.route] else { continue };
            let log = tail::log_of(&routes[reading.route].sink, &scope.outputs[i]);
            // The route resumed from: where its tail ended; every other: where its log ends now.
            let reach = match (resumed == Some(i), &log) {
                (true, _) if reach.is_some() => reach.take().unwrap_or_default(),
                (_, Some(log)) => log_ends(&routes[reading.route], log).await,
                (_, None) => BTreeMap::new(),
            };
            let base =
                Start { prefix: reading.prefix.clone(), digest: reading.digest.clone(), cluster_uid: cluster_uid.clone(), log, reach, ..Start::default() };
            let start = match (&reading.loaded, resumed == Some(i)) {
                (Some(loaded), true) => Start {
                    objects: loaded.objects.keys().map(|k| checkpoint::key_hash(k)).collect(),
                    resource_version: loaded.watch.resource_version.clone(),
                    dirty: std::mem::take(&mut learned.records).into_iter().collect(),
                    hold: hold.take(),
                    ..base
                },
                _ => Start { clear: reading.clearing(), ..base },
            };
            progress.track(slot, start);
        }
        let resumed_from = resumed.and_then(|i| found[i].loaded.take());
        starts.watches.push(match (decided, resumed_from) {
            (Decision::Resume { continue_from, .. }, Some(loaded)) => {
                let resume = resume_from(loaded, std::mem::take(&mut learned.delivered));
                tracing::info!(watch = %scope.describe(), objects = resume.entries.len(), resource_version = %resume.resource_version, listing = continue_from.is_none(), "Resuming from the checkpoint");
                WatchStart { resume: Some(resume), continue_from }
            }
            (decided, _) => {
                let why = match decided {
                    Decision::FullSync(why) => why,
                    Decision::Resume { route, .. } => Some((route, Unusable::Missing)),
                };
                if let Some((i, why)) = why {
                    ResumeMeters::new(&label).fell_back(why.as_str());
                    let (watch, route, reason) = (scope.describe(), &routes[found[i].route].name, why.as_str());
                    if why.is_alarming() {
                        tracing::warn!(%watch, %route, reason, version = ?facts.now.version, "Starting with a full initial sync: {}", why.describe());
                    } else {
                        tracing::info!(%watch, %route, reason, "Starting with a full initial sync: {}", why.describe());
                    }
                }
                WatchStart { resume: None, continue_from: None }
            }
        });
    }
    starts
}

/// The watch's start from the checkpoint resumed from, its objects moved (not copied: at
/// 100k objects a copy is tens of MB at the peak of start-up).
fn resume_from(loaded: Loaded, delivered: HashMap<String, String>) -> Resume {
    let entries = loaded
        .objects
        .into_iter()
        .map(|(key, s)| {
            (key, Entry { uid: s.uid.as_str().into(), resource_version: s.resource_version.as_str().into(), fingerprint: s.fingerprint, content: None })
        })
        .collect();
    Resume { entries, resource_version: loaded.watch.resource_version.unwrap_or_default(), delivered }
}

/// Whether `loaded` belongs to the API server's history, judged by its newest objects as
/// the API server holds them now; `None` when they cannot be looked up (not proven: a full
/// sync, `unverified`).
async fn timeline(client: &Client, scope: &Scope, loaded: &Loaded) -> Option<Timeline> {
    let mut samples = Vec::new();
    for key in checkpoint::newest(&loaded.objects) {
        match position::object_now(client, scope, &key).await {
            Ok(current) => samples.push(Sample { saved: loaded.objects[&key].clone(), key, current }),
            Err(e) => {
                tracing::warn!(watch = %scope.describe(), error = %e, "Cannot look up the checkpoint's objects at the API server (allow `get` on the resource) to check that it belongs to the API server's history");
                return None;
            }
        }
    }
    let judged = checkpoint::judge(&samples);
    if let Timeline::Diverged { key, recorded, current } = &judged {
        tracing::warn!(watch = %scope.describe(), key, recorded, current, "An object is older at the API server than the checkpoint recorded: the API server's history was replaced (etcd restored from a backup?)");
    }
    Some(judged)
}

/// How long start-up reads a log's tail (or asks where it ends) before it gives up on it.
const TAIL_FOR: Duration = Duration::from_secs(60);

/// Reads what the route's log stored after `loaded`'s checkpoint and applies it: what
/// consumers hold, learned, and where the log ends. `None` when the checkpoint names no
/// tail (written by a version before 0.9, or for a sink that cannot be read back) or the
/// log cannot be read: the watch then resumes from the checkpoint alone, and what was
/// delivered after it is delivered again.
async fn read_tail(route: &RouteConfig, output: &Output, loaded: &mut Loaded, watched: Watched<'_>, label: &str) -> Option<(Learned, BTreeMap<i32, u64>)> {
    let log = tail::log_of(&route.sink, output)?;
    let meters = ResumeMeters::new(label);
    let Some(t) = loaded.watch.tail.as_ref().filter(|t| t.log == log) else {
        tracing::warn!(route = %route.name, resource = label, log, "The checkpoint does not say where its log's tail begins; resuming from the checkpoint alone (what was delivered after it is delivered again)");
        meters.tail("untracked");
        return None;
    };
    let started = Instant::now();
    match tokio::time::timeout(TAIL_FOR, tail::read(&route.sink, &log, &t.next)).await {
        Ok(Ok(read)) => {
            let records = read.events.len();
            let learned = checkpoint::learn(&mut loaded.objects, watched, read.events);
            if let Some(first) = &learned.first_ahead {
                meters.ignored_ahead(learned.ahead);
                tracing::warn!(route = %route.name, resource = label, log, ignored = learned.ahead, key = %first.key, resource_version = %first.resource_version, current = ?watched.current, "Ignored records of the log ahead of the API server's current resourceVersion: this cluster's bridge never wrote them (copied or forged into the log?); their objects are shipped as the API server has them");
            }
            let took_ms = started.elapsed().as_millis();
            tracing::info!(route = %route.name, resource = label, log, records, events = learned.events, changed = learned.records.len(), took_ms, "Read what was delivered after the checkpoint");
            meters.tail("read");
            Some((learned, read.ends))
        }
        failed => {
            let error = match failed {
                Ok(Err(e)) => e.to_string(),
                _ => format!("no end within {TAIL_FOR:?}"),
            };
            tracing::warn!(route = %route.name, resource = label, log, error, "Cannot read what was delivered after the checkpoint; resuming from the checkpoint alone (what was delivered after it is delivered again)");
            meters.tail("failed");
            None
        }
    }
}

/// Where `log` ends now; nothing known when it cannot be read (a log not created yet):
/// the checkpoint then learns each partition's reach from the first acknowledgement there.
async fn log_ends(route: &RouteConfig, log: &str) -> BTreeMap<i32, u64> {
    match tokio::time::timeout(TAIL_FOR, tail::ends(&route.sink, log)).await {
        Ok(Ok(ends)) => ends,
        Ok(Err(e)) => {
            tracing::debug!(route = %route.name, log, error = %e, "Cannot read where the log ends");
            BTreeMap::new()
        }
        Err(_) => BTreeMap::new(),
    }
}

/// How many times start-up asks the API server where it stands before it gives up on
/// checking (and resuming from) a checkpoint.
const ASK: u32 = 3;

/// The API server's current resourceVersion for `scope`, asked a few times; `None` when it
/// does not answer (the watch's checkpoint is then not resumed from: `unverified`).
async fn current_version(client: &Client, scope: &Scope, retry: RetryPolicy) -> Option<String> {
    for attempt in 0..ASK {
        match position::current_version(client, scope).await {
            Ok(v) => return Some(v),
            Err(e) if attempt + 1 == ASK => tracing::warn!(watch = %scope.describe(), error = %e, "Cannot read the API server's current resourceVersion"),
            Err(_) => tokio::time::sleep(retry.delay(attempt)).await,
        }
    }
    None
}

/// The cluster's identity, asked a few times; `None` when it cannot be read (RBAC, or the
/// API server does not answer): checkpoints are then not checked against it.
async fn identity(client: &Client, retry: RetryPolicy) -> Option<String> {
    for attempt in 0..ASK {
        match position::cluster_uid(client).await {
            Ok(None) => {
                tracing::info!("Cannot read the kube-system namespace (allow `get` on it to check checkpoints against the cluster's identity)");
                return None;
            }
            Ok(uid) => return uid,
            Err(e) if attempt + 1 == ASK => tracing::warn!(error = %e, "Cannot read the cluster's identity (the kube-system namespace's uid)"),
            Err(_) => tokio::time::sleep(retry.delay(attempt)).await,
        }
    }
    None
}

/// How often a start refused a route (`checkpoint::holder`) reads its holder record again,
/// and how often it says so.
const REFUSED_RETRY: Duration = Duration::from_secs(5);
const REFUSED_SAY_EVERY: Duration = Duration::from_secs(60);

/// This deployment as the holder of route `r` (whose keys start with `route_prefix`): its
/// configuration and watches (every watch of the route), its lease and its name.
fn this_holder(config: &Config, scopes: &[Arc<Scope>], r: usize, route_prefix: &str) -> Holder {
    let of_route = || scopes.iter().flat_map(|s| s.outputs.iter().filter(|o| o.route == r).map(move |o| (s, o)));
    let digests: Vec<String> = of_route().map(|(s, o)| checkpoint::digest(&config.cluster, s, o)).collect();
    let mut watches: Vec<String> = of_route().map(|(s, _)| checkpoint::watch_prefix(route_prefix, &s.resource.label(), s.namespace.as_deref())).collect();
    watches.sort_unstable();
    watches.dedup();
    let election = &config.leader_election;
    let lease = election.enabled.then(|| format!("{}/{}", crate::leader::lease_namespace(election), election.lease_name));
    let instance = election.identity.clone().or_else(|| std::env::var("HOSTNAME").ok()).unwrap_or_else(|| "deltaship".into());
    Holder {
        configuration: holder::configuration(digests.iter().map(String::as_str)),
        watches,
        lease,
        instance,
        written_ms: 0,
        renew_ms: (config.resume.interval_ms).max(holder::RENEW_EVERY.as_millis() as u64),
        released: false,
    }
}

/// How start-up waits: its retries, when it gives up, and where it says it stands by.
#[derive(Clone, Copy)]
pub struct Patience<'a> {
    pub retry: RetryPolicy,
    pub stop: &'a CancellationToken,
    pub health: &'a Health,
}

/// The route's store and records (`open`), once this deployment may lead the route: while
/// another deployment holds it (`holder::judge`), read again every REFUSED_RETRY, said at
/// ERROR every REFUSED_SAY_EVERY and by `deltaship_route_held_elsewhere`, standing by,
/// until it is free or `stop`.
async fn open_led(
    config: &Config,
    route: &RouteConfig,
    prefix: &str,
    seal: &Seal,
    (key, mine): &(String, Holder),
    &Patience { retry, stop, health }: &Patience<'_>,
) -> Result<Option<(Store, HashMap<String, Vec<u8>>)>, StoreError> {
    let mut said: Option<Instant> = None;
    // While refused, the start stands by (ready, not leading), as a standby replica does:
    // a rolling update whose new pod waited for the old one to leave would never end.
    let leave = |said: Option<Instant>| {
        held_elsewhere(&route.name, false);
        if said.is_some() {
            health.set_standby(false);
        }
    };
    loop {
        let Some((store, mut records)) = open(config, route, prefix, retry, stop).await? else { return Ok(None) };
        let found = records.remove(key).and_then(|v| seal.open(key, &v).and_then(|v| serde_json::from_slice::<Holder>(v).ok()));
        let other = match holder::judge(mine, found.as_ref(), holder::now_ms()) {
            Claim::Lead => {
                leave(said);
                return Ok(Some((store, records)));
            }
            Claim::TakeOver { other } => {
                leave(said);
                tracing::warn!(route = %route.name, other = %other.describe(), this = %mine.describe(), "Taking over a route last held by another deployment, which stopped without releasing it");
                return Ok(Some((store, records)));
            }
            Claim::Refuse { other } => other,
        };
        if said.is_none() {
            held_elsewhere(&route.name, true);
            health.set_standby(true);
        }
        if said.is_none_or(|at| at.elapsed() >= REFUSED_SAY_EVERY) {
            said = Some(Instant::now());
            tracing::error!(
                route = %route.name,
                other = %other.describe(),
                this = %mine.describe(),
                "Not leading the route: another deployment with another configuration ships it now (the same cluster name, sink and checkpoint, and some of the same watches); both would overwrite each other's checkpoint and consumers would lose what one does not select. Give each deployment its own `cluster` name or topic and checkpoint, or stop one; waiting"
            );
        }
        tokio::select! {
            _ = tokio::time::sleep(REFUSED_RETRY) => {}
            _ = stop.cancelled() => return Ok(None),
        }
    }
}

/// The route's store and its records, read with retries for a while; `None` when the
/// route keeps no checkpoint. Read with resume off too: that start replaces them.
async fn open(
    config: &Config,
    route: &RouteConfig,
    prefix: &str,
    retry: RetryPolicy,
    stop: &CancellationToken,
) -> Result<Option<(Store, HashMap<String, Vec<u8>>)>, StoreError> {
    let started = Instant::now();
    let mut attempt = 0;
    loop {
        let result: Result<_, StoreError> = async {
            let Some(store) = Store::open(&route.sink, &config.resume, &route.name).await? else { return Ok(None) };
            let records = store.load(prefix).await?;
            Ok(Some((store, records)))
        }
        .await;
        match result {
            Err(e) if !e.is_permanent() && started.elapsed() < READ_FOR && !stop.is_cancelled() => {
                if attempt == 0 {
                    tracing::warn!(route = %route.name, error = %e, "Cannot read the route's checkpoint yet; retrying");
                }
                tokio::select! {
                    _ = tokio::time::sleep(retry.delay(attempt)) => {}
                    _ = stop.cancelled() => {}
                }
                attempt += 1;
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::checkpoint::{Saved, WatchRecord};

    fn loaded(objects: &[&str]) -> Loaded {
        let objects: HashMap<String, Saved> =
            objects.iter().map(|k| (k.to_string(), Saved { uid: format!("uid-{k}"), resource_version: "1".into(), fingerprint: 1 })).collect();
        let watch =
            WatchRecord { format: 1, digest: "d".into(), resource_version: Some("9".into()), objects: objects.len() as u64, cluster_uid: None, tail: None };
        Loaded { watch, objects }
    }

    #[test]
    fn a_fresh_start_deletes_the_objects_of_the_checkpoint_it_does_not_resume_from() {
        let reading = |loaded, refused: &[&str]| RouteReading {
            route: 0,
            prefix: "p".into(),
            digest: "d".into(),
            loaded,
            refused: refused.iter().map(|k| k.to_string()).collect(),
        };
        assert_eq!(reading(Some(loaded(&["ns/a"])), &[]).clearing(), ["p.o.ns/a"]);
        assert_eq!(reading(None, &["p.o.ns/b"]).clearing(), ["p.o.ns/b"], "a corrupt checkpoint's records");
        assert!(reading(None, &[]).clearing().is_empty());
    }

    #[test]
    fn a_resume_loads_the_checkpoints_objects_at_its_position() {
        let resume = resume_from(loaded(&["ns/a", "ns/b"]), HashMap::from([("uid-ns/a".to_string(), "12".to_string())]));
        assert_eq!((resume.resource_version.as_str(), resume.entries.len(), resume.delivered.len()), ("9", 2, 1));
    }
}
