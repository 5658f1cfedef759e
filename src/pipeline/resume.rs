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

use crate::checkpoint::{
    self, Destination, Hold, Learned, Loaded, Now, Parsed, Progress, Refused, Resume, Sample, Seal, Start, Store, StoreError, Timeline, Unusable, Watched,
};
use crate::config::{Config, RouteConfig};
use crate::plan::{Output, Scope};
use crate::telemetry::meters::ResumeMeters;
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

/// One route's checkpoint of one watch, as read.
enum CheckpointRead {
    /// The route keeps no checkpoint (stdout without `resume.directory`, or its store
    /// could not be read).
    Untracked(Unusable),
    Unusable(Unusable, Vec<String>),
    Usable(Loaded),
}

/// A route of a watch and its checkpoint of the watch, as read: what the watch may resume
/// from.
struct RouteReading {
    /// The route's position.
    route: usize,
    /// The watch's key prefix in the route's checkpoint.
    prefix: String,
    /// The watch's configuration digest (`checkpoint::digest`).
    digest: String,
    /// What the route's checkpoint holds of the watch.
    held: CheckpointRead,
}

/// Reads the checkpoints of every route and decides each watch's start: a checkpoint is
/// resumed from only once it is shown to belong to this cluster's timeline (`WatchRecord::belongs_to`).
pub async fn load(
    config: &Config,
    seal: &Seal,
    client: &Client,
    routes: &[RouteConfig],
    scopes: &[Arc<Scope>],
    retry: RetryPolicy,
    stop: &CancellationToken,
) -> Starts {
    let mut starts = Starts::default();
    // Each route's checkpoints, or why it keeps none.
    let mut read: Vec<Result<Parsed, Unusable>> = Vec::new();
    for route in routes {
        let prefix = checkpoint::route_prefix(&config.cluster, &route.name);
        match open(config, route, &prefix, retry, stop).await {
            Ok(Some((store, records))) => {
                starts.routes.push(Some(CheckpointedRoute { store: Destination::Open(Arc::new(store)), progress: Arc::new(Progress::default()) }));
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
                    CheckpointedRoute { store, progress: Arc::new(Progress::default()) }
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
    for (slot, scope) in scopes.iter().enumerate() {
        let label = scope.resource.label();
        let enabled = config.resume.enabled && config.resources[scope.index].resume;
        let now = if enabled { Now { version: current_version(client, scope, retry).await, cluster_uid: cluster_uid.clone() } } else { Now::default() };
        // Each route of the watch: what its checkpoint holds.
        let mut found = Vec::new();
        for output in &scope.outputs {
            let prefix = checkpoint::watch_prefix(&checkpoint::route_prefix(&config.cluster, &output.route_name), &label, scope.namespace.as_deref());
            let digest = checkpoint::digest(&config.cluster, scope, output);
            let held = match &mut read[output.route] {
                Ok(records) => classify(records.remove(&prefix), &prefix, &digest, &now),
                Err(why) => CheckpointRead::Untracked(*why),
            };
            found.push(RouteReading { route: output.route, prefix, digest, held });
        }
        // Resume off: the checkpoint is read all the same, and replaced by this start's
        // full sync, so that a later start with resume on never continues from knowledge
        // older than what this run shipped.
        let mut resumed = if enabled { decide(&found) } else { Err(found.first().map(|r| (r.route, Unusable::Disabled))) };
        // What consumers received after the checkpoint resumed from, read from its log.
        let (mut learned, mut reach, mut hold, mut refused) = (Learned::default(), None, None, None);
        if let Ok(i) = resumed
            && let RouteReading { route, held: CheckpointRead::Usable(loaded), .. } = &mut found[i]
        {
            let route = &routes[*route];
            let watched = Watched {
                cluster: &config.cluster,
                resource: &format!("{}/{}", scope.resource.api_version(), scope.resource.kind),
                namespace: scope.namespace.as_deref(),
                current: now.version.as_deref().and_then(|v| v.parse().ok()),
            };
            let read_from = loaded.watch.tail.as_ref().map(|t| t.next.clone());
            if let Some((l, ends)) = read_tail(route, &scope.outputs[i], loaded, watched, &label).await {
                // Kept as the checkpoint's tail until the watch is past all it taught.
                let until = l.delivered.values().filter_map(|v| v.parse::<u64>().ok()).max();
                hold = read_from.zip(until).map(|(next, until)| Hold { next, until });
                (learned, reach) = (l, Some(ends));
            }
            // The checkpoint, with what its tail taught, must show it belongs to the API
            // server's history before the watch continues from it.
            refused = timeline(client, scope, loaded).await.and_then(|t| t.refusal());
        }
        if let (Ok(i), Some(why)) = (resumed, refused) {
            let keys = clearing(&found[i].held, &found[i].prefix);
            (learned, reach, hold) = (Learned::default(), None, None);
            found[i].held = CheckpointRead::Unusable(why, keys);
            resumed = Err(Some((found[i].route, why)));
        }
        // Where each route's checkpoint of the watch starts: as read when the watch
        // resumes, else cleared (the initial sync records what exists now); what it learned
        // from the log's tail, and where its log ends.
        for (i, RouteReading { route, prefix, digest, held }) in found.iter().enumerate() {
            let Some(CheckpointedRoute { progress, .. }) = &starts.routes[*route] else { continue };
            let log = tail::log_of(&routes[*route].sink, &scope.outputs[i]);
            // The route resumed from: where its tail ended; every other: where its log ends now.
            let reach = match (resumed == Ok(i), &log) {
                (true, _) if reach.is_some() => reach.take().unwrap_or_default(),
                (_, Some(log)) => log_ends(&routes[*route], log).await,
                (_, None) => BTreeMap::new(),
            };
            let start = match (&resumed, held) {
                (Ok(_), CheckpointRead::Usable(loaded)) => Start {
                    prefix: prefix.clone(),
                    digest: digest.clone(),
                    objects: loaded.objects.keys().map(|k| checkpoint::key_hash(k)).collect(),
                    resource_version: loaded.watch.resource_version.clone(),
                    clear: Vec::new(),
                    cluster_uid: cluster_uid.clone(),
                    log,
                    reach,
                    dirty: if resumed == Ok(i) { std::mem::take(&mut learned.records).into_iter().collect() } else { Vec::new() },
                    hold: if resumed == Ok(i) { hold.take() } else { None },
                },
                _ => Start {
                    prefix: prefix.clone(),
                    digest: digest.clone(),
                    clear: clearing(held, prefix),
                    cluster_uid: cluster_uid.clone(),
                    log,
                    reach,
                    ..Start::default()
                },
            };
            progress.track(slot, start);
        }
        let start = resumed.and_then(|i| resume_from(&mut found[i].held, std::mem::take(&mut learned.delivered)).ok_or(None));
        starts.watches.push(match start {
            Ok(resume) => {
                // Without a position (a first sync cut short), or keeping content the
                // checkpoint has not, the watch lists and ships the list as a diff.
                let continue_from = (!scope.keeps_content() && !resume.resource_version.is_empty()).then(|| resume.resource_version.clone());
                tracing::info!(watch = %scope.describe(), objects = resume.entries.len(), resource_version = %resume.resource_version, listing = continue_from.is_none(), "Resuming from the checkpoint");
                WatchStart { resume: Some(resume), continue_from }
            }
            Err(why) => {
                if let Some((route, why)) = why {
                    ResumeMeters::new(&label).fell_back(why.as_str());
                    let (watch, route, reason) = (scope.describe(), &routes[route].name, why.as_str());
                    if why.is_alarming() {
                        tracing::warn!(%watch, %route, reason, version = ?now.version, "Starting with a full initial sync: {}", why.describe());
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

/// The route's checkpoint of a watch: usable when its digest is the watch's, and it belongs
/// to the cluster's timeline as it stands `now` with its first sync acknowledged whole, or
/// names where its log's tail begins.
fn classify(records: Option<Result<Loaded, Refused>>, prefix: &str, digest: &str, now: &Now) -> CheckpointRead {
    match records {
        None => CheckpointRead::Unusable(Unusable::Missing, Vec::new()),
        Some(Err(Refused { why, keys })) => CheckpointRead::Unusable(why, keys),
        Some(Ok(loaded)) => {
            let why = match loaded.watch.belongs_to(now) {
                _ if loaded.watch.digest != digest => Unusable::Foreign,
                // A first sync cut short, whose events the log holds: what consumers
                // received of it is read back, and a list is shipped as a diff against it.
                Err(Unusable::Incomplete) if loaded.watch.tail.is_some() => return CheckpointRead::Usable(loaded),
                Err(why) => why,
                Ok(()) => return CheckpointRead::Usable(loaded),
            };
            let keys = loaded.objects.keys().map(|k| checkpoint::object_key(prefix, k)).collect();
            CheckpointRead::Unusable(why, keys)
        }
    }
}

/// The records a fresh start of the watch deletes: the old checkpoint's objects (the new
/// initial sync records what exists now).
fn clearing(found: &CheckpointRead, prefix: &str) -> Vec<String> {
    match found {
        CheckpointRead::Untracked(_) => Vec::new(),
        CheckpointRead::Unusable(_, keys) => keys.clone(),
        CheckpointRead::Usable(loaded) => loaded.objects.keys().map(|k| checkpoint::object_key(prefix, k)).collect(),
    }
}

/// Which route's checkpoint the watch resumes from (its place in `found`): its only
/// route's, when usable; otherwise the first route's reason not to (`None` when no route
/// keeps a checkpoint at all). A watch of several routes starts with a full sync: each
/// route acknowledges on its own, so after a crash their consumers hold different states
/// (one route's log has an update the other's lacks), and one index and one resume diff
/// cannot describe them all (skipping what one route delivered lost it on the other, and
/// the resume marker's state was the first route's).
fn decide(found: &[RouteReading]) -> Result<usize, Option<(usize, Unusable)>> {
    if let Some((route, why)) = found.iter().find_map(|r| match &r.held {
        CheckpointRead::Untracked(why) | CheckpointRead::Unusable(why, _) => Some((r.route, *why)),
        CheckpointRead::Usable(_) => None,
    }) {
        return Err(Some((route, why)));
    }
    match found {
        [] => Err(None),
        [_] => Ok(0),
        [first, ..] => Err(Some((first.route, Unusable::SeveralRoutes))),
    }
}

/// The watch's start from a usable checkpoint, its objects moved out (not copied: at 100k
/// objects a copy is tens of MB at the peak of start-up).
fn resume_from(found: &mut CheckpointRead, delivered: HashMap<String, String>) -> Option<Resume> {
    let CheckpointRead::Usable(loaded) = found else { return None };
    let entries = std::mem::take(&mut loaded.objects)
        .into_iter()
        .map(|(key, s)| {
            (key, Entry { uid: s.uid.as_str().into(), resource_version: s.resource_version.as_str().into(), fingerprint: s.fingerprint, content: None })
        })
        .collect();
    Some(Resume { entries, resource_version: loaded.watch.resource_version.clone().unwrap_or_default(), delivered })
}

/// Whether `loaded` belongs to the API server's history, judged by its newest objects as
/// the API server holds them now; `None` when they cannot be looked up (the checkpoint is
/// then not checked this way, as the cluster's identity is not without access to it).
async fn timeline(client: &Client, scope: &Scope, loaded: &Loaded) -> Option<Timeline> {
    let mut samples = Vec::new();
    for key in checkpoint::newest(&loaded.objects) {
        match position::object_now(client, scope, &key).await {
            Ok(current) => samples.push(Sample { saved: loaded.objects[&key].clone(), key, current }),
            Err(e) => {
                tracing::warn!(watch = %scope.describe(), error = %e, "Cannot look up the checkpoint's objects at the API server (allow `get` on the resource) to check that it belongs to the API server's history; resuming without that check");
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

    fn loaded(digest: &str, rv: Option<&str>, objects: &[&str]) -> Loaded {
        let objects: HashMap<String, Saved> =
            objects.iter().map(|k| (k.to_string(), Saved { uid: format!("uid-{k}"), resource_version: "1".into(), fingerprint: 1 })).collect();
        Loaded {
            watch: WatchRecord {
                format: 1,
                digest: digest.into(),
                resource_version: rv.map(str::to_string),
                objects: objects.len() as u64,
                cluster_uid: None,
                tail: None,
            },
            objects,
        }
    }

    fn found(route: usize, held: CheckpointRead) -> RouteReading {
        RouteReading { route, prefix: format!("p{route}"), digest: "d".into(), held }
    }

    #[test]
    fn a_checkpoint_is_usable_only_under_the_same_digest_once_synced_and_not_ahead() {
        let now = Now { version: Some("7".into()), cluster_uid: None };
        assert!(matches!(classify(None, "p", "d", &now), CheckpointRead::Unusable(Unusable::Missing, _)));
        let CheckpointRead::Unusable(why, clear) = classify(Some(Ok(loaded("other", Some("5"), &["ns/a"]))), "p", "d", &now) else { panic!("foreign") };
        assert_eq!((why, clear), (Unusable::Foreign, vec!["p.o.ns/a".to_string()]), "a foreign checkpoint is cleared");
        assert!(matches!(classify(Some(Ok(loaded("d", None, &[]))), "p", "d", &now), CheckpointRead::Unusable(Unusable::Incomplete, _)));
        let mut cut_short = loaded("d", None, &["ns/a"]);
        cut_short.watch.tail = Some(checkpoint::Tail { log: "t".into(), next: BTreeMap::new() });
        assert!(matches!(classify(Some(Ok(cut_short)), "p", "d", &now), CheckpointRead::Usable(_)), "a first sync cut short, its log's tail known");
        assert!(matches!(classify(Some(Ok(loaded("d", Some("5"), &[]))), "p", "d", &now), CheckpointRead::Usable(_)));
        let CheckpointRead::Unusable(why, clear) = classify(Some(Ok(loaded("d", Some("8"), &["ns/a"]))), "p", "d", &now) else { panic!("ahead") };
        assert_eq!((why, clear), (Unusable::Ahead, vec!["p.o.ns/a".to_string()]), "a checkpoint ahead of the API server is cleared");
    }

    #[test]
    fn a_watch_resumes_only_from_its_one_route_and_several_routes_sync_in_full() {
        let mut one = [found(0, CheckpointRead::Usable(loaded("d", Some("9"), &["ns/a"])))];
        let i = decide(&one).unwrap();
        let resume = resume_from(&mut one[i].held, HashMap::new()).unwrap();
        assert_eq!((resume.resource_version.as_str(), resume.entries.len()), ("9", 1));
        let both =
            [found(0, CheckpointRead::Usable(loaded("d", Some("90"), &["ns/a", "ns/b"]))), found(1, CheckpointRead::Usable(loaded("d", Some("9"), &["ns/a"])))];
        assert!(matches!(decide(&both), Err(Some((0, Unusable::SeveralRoutes)))), "two routes' consumers may hold different states");
        let one_missing = [found(0, CheckpointRead::Usable(loaded("d", Some("9"), &[]))), found(1, CheckpointRead::Unusable(Unusable::Missing, Vec::new()))];
        assert!(matches!(decide(&one_missing), Err(Some((1, Unusable::Missing)))));
        assert!(matches!(decide(&[found(0, CheckpointRead::Untracked(Unusable::NoStore))]), Err(Some((0, Unusable::NoStore)))));
    }
}
