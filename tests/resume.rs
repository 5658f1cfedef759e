//! Resume against the real servers: a bridge killed (SIGKILL) and started again ships
//! exactly the changes made while it was down, between `resume` markers, on Kafka and NATS;
//! also when the API server no longer has the checkpoint's version (410: the list is
//! shipped as a diff), and a corrupt checkpoint falls back to a full initial sync. In every
//! case the state rebuilt from the stream equals the API server's.
//!
//! The tests of this file run one at a time: one of them restarts the API server.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use deltaship::config::ResumeConfig;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use rdkafka::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use serde_json::json;
use support::bridge::Bridge;
use support::config::{TestConfig, kafka, nats_stream};
use support::kube::{client, delete_namespace, namespace};
use support::state::assert_rebuild_matches;
use tokio::sync::Mutex;

/// One test at a time (the 410 test restarts the API server under the others).
static SERIAL: Mutex<()> = Mutex::const_new(());

/// ConfigMaps the tests create; the namespace also holds `kube-root-ca.crt` (made by the
/// controller manager), so a full sync ships one more.
const OBJECTS: usize = 20;
const LISTED: usize = OBJECTS + 1;

/// One event as a test compares them: type (without `dev.deltaship.`), partition key, and
/// for markers the sync's reason.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Ev {
    /// Where the event is in the stream: (partition, offset) on Kafka, (0, sequence) on NATS.
    pos: (i32, i64),
    ty: String,
    key: String,
    reason: String,
}

#[derive(Clone)]
enum Sink {
    Kafka {
        brokers: String,
        topic: String,
        checkpoints: String,
    },
    /// The test's own stream, holding the subjects that start with the cluster's name.
    Nats {
        stream: String,
    },
}

impl Sink {
    /// Every event of the test so far, once there are at least `at_least`, read again after
    /// a pause so that any extra event is seen too.
    async fn events(&self, at_least: usize) -> Vec<Ev> {
        let first = self.read(at_least, Duration::from_secs(90)).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let again = self.read(first.len(), Duration::from_secs(30)).await;
        assert!(again.len() >= first.len());
        again
    }

    async fn read(&self, at_least: usize, timeout: Duration) -> Vec<Ev> {
        match self {
            Sink::Kafka { brokers, topic, .. } => {
                // Read to the end (by position: a leader's transaction markers take offsets),
                // again until at least `at_least` are there.
                let (brokers, topic) = (brokers.clone(), topic.clone());
                let records = tokio::task::spawn_blocking(move || {
                    let deadline = std::time::Instant::now() + timeout;
                    loop {
                        let records = support::kafka::read_to_end(&brokers, &topic, timeout);
                        if records.len() >= at_least || std::time::Instant::now() >= deadline {
                            return records;
                        }
                        std::thread::sleep(Duration::from_millis(200));
                    }
                })
                .await
                .unwrap();
                records
                    .iter()
                    .map(|r| Ev {
                        pos: (r.partition, r.offset),
                        ty: short(r.event_type()),
                        key: object_key(r.header("ce_partitionkey")),
                        reason: r.json()["reason"].as_str().unwrap_or_default().to_string(),
                    })
                    .collect()
            }
            Sink::Nats { stream } => {
                let js = support::nats::jetstream().await;
                let msgs = support::nats::read_until(&js, stream, timeout, |m| m.len() >= at_least).await;
                msgs.iter()
                    .map(|m| Ev {
                        pos: (0, m.sequence as i64),
                        ty: short(m.event_type()),
                        key: object_key(m.header("ce-partitionkey")),
                        reason: m.json()["reason"].as_str().unwrap_or_default().to_string(),
                    })
                    .collect()
            }
        }
    }

    fn rebuild_args(&self) -> Vec<String> {
        match self {
            Sink::Kafka { brokers, topic, .. } => vec!["--kafka".into(), brokers.clone(), "--topic".into(), topic.clone()],
            Sink::Nats { stream } => vec!["--nats".into(), support::env().nats, "--stream".into(), stream.clone()],
        }
    }

    /// Markers per sync: one per partition on Kafka (3), one on NATS.
    fn markers(&self) -> usize {
        match self {
            Sink::Kafka { .. } => 3,
            Sink::Nats { .. } => 1,
        }
    }
}

/// A ConfigMap setup of `OBJECTS`, a bridge started on it, its initial sync delivered and
/// checkpointed.
struct Setup {
    kube: kube::Client,
    ns: String,
    cms: Api<ConfigMap>,
    sink: Sink,
    config: String,
}

impl Setup {
    /// `extra` sets more options.
    async fn new(nats_sink: bool, extra: impl FnOnce(&mut deltaship::config::Config)) -> Setup {
        let env = support::env();
        let kube = client().await;
        let ns = namespace(&kube, "it-resume").await;
        let cluster = support::unique("resume");
        let resume = ResumeConfig { interval_ms: 200, kafka_topic: support::unique("it-checkpoints"), ..ResumeConfig::default() };
        let (sink, config) = if nats_sink {
            let stream = support::unique("RESUME").to_uppercase().replace('-', "_");
            let sink = nats_stream(&env.nats, &cluster, &stream);
            let config = TestConfig::new()
                .cluster(&cluster)
                .configmaps(&ns)
                .nats(sink)
                .with(|c| {
                    c.resume = resume;
                    extra(c);
                })
                .toml();
            (Sink::Nats { stream }, config)
        } else {
            let prefix = support::unique("it");
            let config = TestConfig::new()
                .cluster(&cluster)
                .configmaps(&ns)
                .kafka(kafka(&env.kafka, &format!("{prefix}.{{plural}}")))
                .with(|c| {
                    c.resume = resume.clone();
                    extra(c);
                })
                .toml();
            (Sink::Kafka { brokers: env.kafka.clone(), topic: format!("{prefix}.configmaps"), checkpoints: resume.kafka_topic }, config)
        };
        let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), &ns);
        for i in 0..OBJECTS {
            cms.create(&PostParams::default(), &cm(&format!("cm-{i}"), "0")).await.unwrap();
        }
        // The controller manager's ConfigMap is part of the namespace's state: wait for it,
        // so that the initial sync holds it rather than a later event.
        support::kube::eventually(Duration::from_secs(60), "kube-root-ca.crt", || {
            let cms = cms.clone();
            async move { cms.get_opt("kube-root-ca.crt").await.ok().flatten() }
        })
        .await;
        Setup { kube, ns, cms, sink, config }
    }

    fn start(&self) -> Bridge {
        let mut b = Bridge::start(&self.config);
        b.wait_ready(Duration::from_secs(90));
        b
    }

    /// Waits until the bridge's checkpoint holds everything it shipped: nothing pending,
    /// nothing unwritten, for a second (the writer reports on every interval of 200 ms).
    fn wait_checkpointed(&self, bridge: &Bridge) {
        let caught_up = |b: &Bridge| {
            b.get("/metrics").is_some_and(|(_, m)| {
                series(&m, "deltaship_checkpoint_pending_events{route=\"default\"}") == Some(0.0)
                    && series(&m, "deltaship_checkpoint_unwritten_records{route=\"default\"}") == Some(0.0)
            })
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let mut since = None;
        loop {
            let now = std::time::Instant::now();
            since = if caught_up(bridge) { since.or(Some(now)) } else { None };
            if since.is_some_and(|t| now - t >= Duration::from_secs(1)) {
                return;
            }
            assert!(now < deadline, "the checkpoint never caught up:\n{}", bridge.log_text());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Starts a bridge, waits for its initial sync and its checkpoint, kills it (SIGKILL)
    /// and makes `change_while_down`'s changes: the events of the initial sync.
    async fn synced_then_killed_and_changed(&self) -> Vec<Ev> {
        let bridge = self.start();
        let initial = self.sink.events(LISTED + 2 * self.sink.markers()).await;
        assert_eq!(initial.len(), LISTED + 2 * self.sink.markers(), "the initial sync: {:?}", counted(&initial));
        self.wait_checkpointed(&bridge);
        bridge.signal("KILL");
        drop(bridge);
        self.change_while_down().await;
        initial
    }

    /// Changes while the bridge is down: 3 created, 2 updated, 2 deleted.
    async fn change_while_down(&self) {
        for i in OBJECTS..OBJECTS + 3 {
            self.cms.create(&PostParams::default(), &cm(&format!("cm-{i}"), "0")).await.unwrap();
        }
        for i in 0..2 {
            let name = format!("cm-{i}");
            self.cms.patch(&name, &PatchParams::apply("it").force(), &Patch::Apply(&cm(&name, "1"))).await.unwrap();
        }
        for i in 2..4 {
            self.cms.delete(&format!("cm-{i}"), &DeleteParams::default()).await.unwrap();
        }
    }

    async fn assert_rebuilt(&self) {
        assert_rebuild_matches(&self.kube, self.sink.rebuild_args(), std::slice::from_ref(&self.ns), Duration::from_secs(60)).await;
    }
}

/// `namespace/name` of a partition key (`<plural>/<namespace>/<name>` on Kafka and NATS).
fn object_key(partition_key: &str) -> String {
    let parts: Vec<&str> = partition_key.rsplitn(3, '/').collect();
    match parts.as_slice() {
        [name, ns, ..] => format!("{ns}/{name}"),
        _ => partition_key.to_string(),
    }
}

/// The events of `all` that are not in `before` (by their place in the stream).
fn after(all: &[Ev], before: &[Ev]) -> Vec<Ev> {
    let seen: std::collections::HashSet<_> = before.iter().map(|e| e.pos).collect();
    all.iter().filter(|e| !seen.contains(&e.pos)).cloned().collect()
}

/// `added`, `sync.started`, ...: the type without its common prefixes.
fn short(ty: &str) -> String {
    ty.trim_start_matches("dev.deltaship.").trim_start_matches("object.").to_string()
}

/// The value of one series (name and labels as rendered) in a /metrics text.
fn series(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

fn cm(name: &str, v: &str) -> ConfigMap {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"v": v}})).unwrap()
}

/// `type reason` (markers) or `type key` (objects) per event, counted.
fn counted(events: &[Ev]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for e in events {
        let what = if e.ty.starts_with("sync.") { format!("{} {}", e.ty, e.reason) } else { format!("{} {}", e.ty, e.key) };
        *out.entry(what).or_default() += 1;
    }
    out
}

/// What a restart after `change_while_down` must ship: the resume markers and the seven
/// changes, nothing else.
fn expected_after_changes(ns: &str, markers: usize) -> BTreeMap<String, usize> {
    let mut want = BTreeMap::from([("sync.started resume".to_string(), markers), ("sync.completed resume".to_string(), markers)]);
    for (ty, i) in [("added", 20), ("added", 21), ("added", 22), ("updated", 0), ("updated", 1), ("deleted", 2), ("deleted", 3)] {
        want.insert(format!("{ty} {ns}/cm-{i}"), 1);
    }
    want
}

async fn killed_and_restarted(nats_sink: bool) {
    let s = Setup::new(nats_sink, |_| {}).await;
    let initial = s.synced_then_killed_and_changed().await;

    let started = std::time::Instant::now();
    let bridge = s.start();
    let ready_after = started.elapsed();
    let want = expected_after_changes(&s.ns, s.sink.markers());
    let events = s.sink.events(initial.len() + want.values().sum::<usize>()).await;
    assert_eq!(counted(&after(&events, &initial)), want, "shipped after the restart");
    s.assert_rebuilt().await;
    eprintln!("RESUME-FIGURES sink={} ready after restart {ready_after:?}", if nats_sink { "nats" } else { "kafka" });

    // A graceful restart with nothing changed ships the markers alone.
    s.wait_checkpointed(&bridge);
    bridge.stop(Duration::from_secs(30));
    let before = events;
    let bridge = s.start();
    let markers = 2 * s.sink.markers();
    let events = s.sink.events(before.len() + markers).await;
    let want = BTreeMap::from([("sync.started resume".to_string(), s.sink.markers()), ("sync.completed resume".to_string(), s.sink.markers())]);
    assert_eq!(counted(&after(&events, &before)), want, "nothing changed: markers only");
    bridge.stop(Duration::from_secs(30));
    delete_namespace(&s.kube, &s.ns).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_bridge_ships_only_what_changed_while_down_kafka() {
    let _serial = SERIAL.lock().await;
    killed_and_restarted(false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_bridge_ships_only_what_changed_while_down_nats() {
    let _serial = SERIAL.lock().await;
    killed_and_restarted(true).await;
}

/// The API server lost the checkpoint's version while the bridge was down (etcd compacted,
/// API server restarted): the list is shipped as a diff against the checkpoint, between
/// `resume` markers: the same seven changes, deletes inferred.
#[tokio::test(flavor = "multi_thread")]
async fn a_version_gone_while_down_ships_the_list_as_a_diff() {
    let _serial = SERIAL.lock().await;
    let s = Setup::new(false, |_| {}).await;
    let initial = s.synced_then_killed_and_changed().await;
    support::churn::ctl("kube", "expire-watches");

    let bridge = s.start();
    let want = expected_after_changes(&s.ns, s.sink.markers());
    let events = s.sink.events(initial.len() + want.values().sum::<usize>()).await;
    assert_eq!(counted(&after(&events, &initial)), want, "shipped after the restart");
    assert!(bridge.log_text().contains("no longer has this version"), "the watch could not continue:\n{}", bridge.log_text());
    s.assert_rebuilt().await;
    bridge.stop(Duration::from_secs(30));
    delete_namespace(&s.kube, &s.ns).await;
}

/// A quiet watch's checkpoint stands at its list's own version, not at its newest object's:
/// the API server moved on (a write in another namespace) before the bridge listed, so a
/// restart continues from a version the API server keeps longest. (Bookmarks move it on
/// while the namespace stays quiet: src/watch/stream.rs's tests.)
#[tokio::test(flavor = "multi_thread")]
async fn a_quiet_watch_is_checkpointed_at_its_lists_version() {
    let _serial = SERIAL.lock().await;
    let s = Setup::new(false, |_| {}).await;
    let version = |cm: &ConfigMap| cm.metadata.resource_version.as_deref().and_then(|v| v.parse::<u64>().ok()).expect("a numeric resourceVersion");
    let newest = s.cms.list(&Default::default()).await.unwrap().items.iter().map(version).max().unwrap();
    let other = namespace(&s.kube, "it-resume-other").await;
    let elsewhere = Api::<ConfigMap>::namespaced(s.kube.clone(), &other).create(&PostParams::default(), &cm("elsewhere", "0")).await.unwrap();
    assert!(version(&elsewhere) > newest);

    let bridge = s.start();
    s.wait_checkpointed(&bridge);
    let path = std::env::temp_dir().join(format!("{}.toml", support::unique("resume-config")));
    std::fs::write(&path, &s.config).unwrap();
    let config = deltaship::config::load(&path).expect("the test's config loads");
    let route = &config.effective_routes()[0];
    let store = deltaship::checkpoint::Store::open(&route.sink, &config.resume, &route.name).await.unwrap().expect("a Kafka route keeps a checkpoint");
    let records = store.load(&deltaship::checkpoint::route_prefix(&config.cluster, &route.name)).await.unwrap();
    let loaded =
        deltaship::checkpoint::parse(records, &deltaship::checkpoint::Seal::default()).into_values().next().expect("the watch's checkpoint").expect("usable");
    let at: u64 = loaded.watch.resource_version.as_deref().and_then(|v| v.parse().ok()).expect("a position");
    assert!(at >= version(&elsewhere), "checkpointed at {at}: the list's version is at least {}, its newest object's {newest}", version(&elsewhere));
    bridge.stop(Duration::from_secs(30));
    std::fs::remove_file(&path).ok();
    delete_namespace(&s.kube, &other).await;
    delete_namespace(&s.kube, &s.ns).await;
}

/// A checkpoint that does not parse: a full initial sync, counted with its reason, and the
/// state still exact.
#[tokio::test(flavor = "multi_thread")]
async fn a_corrupt_checkpoint_falls_back_to_a_full_sync() {
    let _serial = SERIAL.lock().await;
    let s = Setup::new(false, |_| {}).await;
    let initial = s.synced_then_killed_and_changed().await;
    let Sink::Kafka { brokers, checkpoints, .. } = &s.sink else { unreachable!() };
    // Garbage over every watch record of the checkpoint topic.
    let records =
        support::kafka::read_until(brokers, checkpoints, Duration::from_secs(30), |r| r.iter().any(|r| r.key.as_deref().is_some_and(|k| k.ends_with(".w"))));
    let producer: BaseProducer = ClientConfig::new().set("bootstrap.servers", brokers).create().unwrap();
    for key in records.iter().filter_map(|r| r.key.as_deref()).filter(|k| k.ends_with(".w")) {
        producer.send(BaseRecord::to(checkpoints).key(key).payload("{not json")).unwrap();
    }
    producer.flush(Duration::from_secs(10)).unwrap();

    let bridge = s.start();
    let objects = LISTED + 3 - 2;
    let events = s.sink.events(initial.len() + objects + 2 * s.sink.markers()).await;
    let shipped = counted(&after(&events, &initial));
    assert_eq!(shipped.get("sync.started initial"), Some(&s.sink.markers()), "a full initial sync: {shipped:?}");
    assert_eq!(shipped.keys().filter(|k| k.starts_with("synced ")).count(), objects, "{shipped:?}");
    let metrics = bridge.get("/metrics").unwrap().1;
    assert_eq!(series(&metrics, "deltaship_resume_fallbacks_total{resource=\"configmaps\",reason=\"corrupt\"}"), Some(1.0), "{metrics}");
    s.assert_rebuilt().await;
    bridge.stop(Duration::from_secs(30));
    delete_namespace(&s.kube, &s.ns).await;
}

/// A start with resume off ships a full sync and replaces the checkpoint with it: the next
/// start with resume on continues from what that run shipped, not from the older
/// checkpoint before it (which would replay the changes of the resume-off run: steps back
/// in time, resurrections).
#[tokio::test(flavor = "multi_thread")]
async fn a_start_with_resume_off_replaces_the_checkpoint() {
    let _serial = SERIAL.lock().await;
    let s = Setup::new(false, |_| {}).await;
    let bridge = s.start();
    let initial = s.sink.events(LISTED + 2 * s.sink.markers()).await;
    s.wait_checkpointed(&bridge);
    bridge.stop(Duration::from_secs(30));

    let mut off = Bridge::start_with_env(&s.config, &[("DELTASHIP_RESUME__ENABLED", "false")]);
    off.wait_ready(Duration::from_secs(90));
    let full = s.sink.events(initial.len() + LISTED + 2 * s.sink.markers()).await;
    assert_eq!(counted(&after(&full, &initial)).get("sync.started initial"), Some(&s.sink.markers()), "resume off: a full sync");
    let metrics = off.get("/metrics").unwrap().1;
    assert_eq!(series(&metrics, "deltaship_resume_fallbacks_total{resource=\"configmaps\",reason=\"disabled\"}"), Some(1.0), "{metrics}");
    // Changes the resume-off run ships live.
    s.cms.create(&PostParams::default(), &cm("made-while-off", "0")).await.unwrap();
    s.cms.delete("cm-5", &DeleteParams::default()).await.unwrap();
    let live = s.sink.events(full.len() + 2).await;
    s.wait_checkpointed(&off);
    off.stop(Duration::from_secs(30));

    let bridge = s.start();
    let events = s.sink.events(live.len() + 2 * s.sink.markers()).await;
    let want = BTreeMap::from([("sync.started resume".to_string(), s.sink.markers()), ("sync.completed resume".to_string(), s.sink.markers())]);
    assert_eq!(counted(&after(&events, &live)), want, "resumed from what the resume-off run shipped: markers only");
    s.assert_rebuilt().await;
    bridge.stop(Duration::from_secs(30));
    delete_namespace(&s.kube, &s.ns).await;
}

/// Rewrites the watch record of every watch in the Kafka route's checkpoint topic with
/// `edit`, as someone with write access to the topic (or a restored backup) would; the
/// digest stays valid.
fn edit_watch_records(sink: &Sink, edit: impl Fn(&mut serde_json::Value)) {
    let Sink::Kafka { brokers, checkpoints, .. } = sink else { unreachable!("a Kafka route") };
    // The whole topic: an older watch record would not match the object records' count.
    let total = support::kafka::total(brokers, checkpoints) as usize;
    let records = support::kafka::read_until(brokers, checkpoints, Duration::from_secs(30), |r| r.len() >= total);
    // The latest value per key.
    let mut latest = BTreeMap::new();
    for r in &records {
        if let (Some(k), Some(v)) = (r.key.as_deref(), r.value.as_ref())
            && k.ends_with(".w")
        {
            latest.insert(k.to_string(), v.clone());
        }
    }
    let producer: BaseProducer = ClientConfig::new().set("bootstrap.servers", brokers).create().unwrap();
    for (key, value) in latest {
        // A sealed record's JSON, then its seal (kept as it was: without the key it cannot
        // be made anew).
        let value = String::from_utf8(value).unwrap();
        let (json, seal) = value.split_once('\n').map_or((value.as_str(), None), |(j, s)| (j, Some(s)));
        let mut record: serde_json::Value = serde_json::from_str(json).unwrap();
        edit(&mut record);
        let forged = match seal {
            Some(seal) => format!("{record}\n{seal}"),
            None => record.to_string(),
        };
        producer.send(BaseRecord::to(checkpoints).key(&key).payload(&forged)).unwrap();
    }
    producer.flush(Duration::from_secs(10)).unwrap();
}

/// A checkpoint that does not belong to the cluster's timeline (ahead of the API server: a
/// restored etcd or a re-created cluster; another cluster's; a version the API server never
/// issues) is not resumed from: a full sync, counted and logged with its reason, and live
/// changes after it are shipped. Before, a checkpoint ahead of the API server shipped
/// nothing while the bridge looked healthy.
#[tokio::test(flavor = "multi_thread")]
async fn a_checkpoint_outside_the_clusters_timeline_falls_back_to_a_full_sync() {
    let _serial = SERIAL.lock().await;
    let s = Setup::new(false, |_| {}).await;
    let bridge = s.start();
    let mut seen = s.sink.events(LISTED + 2 * s.sink.markers()).await;
    s.wait_checkpointed(&bridge);
    bridge.stop(Duration::from_secs(30));
    type Edit = Box<dyn Fn(&mut serde_json::Value)>;
    let cases: [(&str, Edit); 4] = [
        (
            "ahead",
            Box::new(|r| {
                let at: u64 = r["resource_version"].as_str().unwrap().parse().unwrap();
                r["resource_version"] = json!((at + 1_000_000).to_string());
            }),
        ),
        ("bad_version", Box::new(|r| r["resource_version"] = json!("abc"))),
        ("bad_version", Box::new(|r| r["resource_version"] = json!(""))),
        ("other_cluster", Box::new(|r| r["cluster_uid"] = json!("4a1f5b5e-0000-4000-8000-000000000000"))),
    ];
    for (i, (reason, edit)) in cases.iter().enumerate() {
        edit_watch_records(&s.sink, edit);
        let bridge = s.start();
        let listed = LISTED + i;
        let events = s.sink.events(seen.len() + listed + 2 * s.sink.markers()).await;
        let shipped = counted(&after(&events, &seen));
        assert_eq!(shipped.get("sync.started initial"), Some(&s.sink.markers()), "{reason}: a full initial sync: {shipped:?}");
        assert_eq!(shipped.keys().filter(|k| k.starts_with("synced ")).count(), listed, "{reason}: {shipped:?}");
        let metrics = bridge.get("/metrics").unwrap().1;
        let series_name = format!("deltaship_resume_fallbacks_total{{resource=\"configmaps\",reason=\"{reason}\"}}");
        assert_eq!(series(&metrics, &series_name), Some(1.0), "{reason}: {metrics}");
        assert!(
            bridge.log_text().contains(&format!("reason=\"{reason}\"")) || bridge.log_text().contains(&format!("reason={reason}")),
            "{reason}: logged:\n{}",
            bridge.log_text()
        );
        // Live changes after the fallback are shipped.
        let name = format!("made-after-{i}");
        s.cms.create(&PostParams::default(), &cm(&name, "0")).await.unwrap();
        let live = s.sink.events(events.len() + 1).await;
        assert_eq!(counted(&after(&live, &events)), BTreeMap::from([(format!("added {}/{name}", s.ns), 1)]), "{reason}: the live create");
        s.wait_checkpointed(&bridge);
        bridge.stop(Duration::from_secs(30));
        seen = live;
    }
    s.assert_rebuilt().await;
    delete_namespace(&s.kube, &s.ns).await;
}

/// Write access to the checkpoint topic is the power to skip changes: a watch record whose
/// position is moved forward makes a start continue after the changes made while the bridge
/// was down. With `resume.key_file`, records are sealed: the forged one is refused as
/// `corrupt`, and the full sync ships the current state, those changes included.
#[tokio::test(flavor = "multi_thread")]
async fn with_a_key_a_forged_checkpoint_is_refused_and_no_change_is_skipped() {
    let _serial = SERIAL.lock().await;
    let key = std::env::temp_dir().join(support::unique("checkpoint-key"));
    std::fs::write(&key, "0f1e2d3c4b5a69788796a5b4c3d2e1f0\n").unwrap();
    let s = Setup::new(false, |c| c.resume.key_file = Some(key.clone())).await;
    let initial = s.synced_then_killed_and_changed().await;
    let version = |cm: &ConfigMap| cm.metadata.resource_version.as_deref().and_then(|v| v.parse::<u64>().ok()).expect("a numeric resourceVersion");
    let newest = s.cms.list(&Default::default()).await.unwrap().items.iter().map(version).max().unwrap();
    edit_watch_records(&s.sink, |r| r["resource_version"] = json!(newest.to_string()));

    let bridge = s.start();
    let objects = LISTED + 3 - 2;
    let events = s.sink.events(initial.len() + objects + 2 * s.sink.markers()).await;
    let shipped = counted(&after(&events, &initial));
    assert_eq!(shipped.get("sync.started initial"), Some(&s.sink.markers()), "a full initial sync: {shipped:?}");
    assert_eq!(shipped.keys().filter(|k| k.starts_with("synced ")).count(), objects, "{shipped:?}");
    for i in [20, 21, 22] {
        assert!(shipped.contains_key(&format!("synced {}/cm-{i}", s.ns)), "created while down: cm-{i} in {shipped:?}");
    }
    let metrics = bridge.get("/metrics").unwrap().1;
    assert_eq!(series(&metrics, "deltaship_resume_fallbacks_total{resource=\"configmaps\",reason=\"corrupt\"}"), Some(1.0), "{metrics}");
    s.assert_rebuilt().await;
    bridge.stop(Duration::from_secs(30));
    delete_namespace(&s.kube, &s.ns).await;
    std::fs::remove_file(key).ok();
}

/// A rolling handover between two replicas: the leader drains, writes its checkpoint and
/// releases the lease; the standby resumes from it and ships nothing the leader delivered.
#[tokio::test(flavor = "multi_thread")]
async fn a_graceful_handover_ships_nothing_the_old_leader_delivered() {
    let _serial = SERIAL.lock().await;
    let kube = client().await;
    let lease_ns = namespace(&kube, "it-lease").await;
    let election = support::config::election(&lease_ns, "deltaship-resume");
    let s = Setup::new(false, |c| c.leader_election = election).await;
    let mut a = Bridge::start(&s.config);
    a.wait_leading(Duration::from_secs(90));
    let b = Bridge::start(&s.config);
    let initial = s.sink.events(LISTED + 2 * s.sink.markers()).await;
    assert!(!b.leads(), "one leader");

    a.stop(Duration::from_secs(30));
    let mut b = b;
    b.wait_leading(Duration::from_secs(30));
    let events = s.sink.events(initial.len() + 2 * s.sink.markers()).await;
    let want = BTreeMap::from([("sync.started resume".to_string(), s.sink.markers()), ("sync.completed resume".to_string(), s.sink.markers())]);
    assert_eq!(counted(&after(&events, &initial)), want, "the new leader resumed: markers only");

    s.cms.patch("cm-5", &PatchParams::apply("it").force(), &Patch::Apply(&cm("cm-5", "2"))).await.unwrap();
    let more = s.sink.events(events.len() + 1).await;
    assert_eq!(counted(&after(&more, &events)), BTreeMap::from([(format!("updated {}/cm-5", s.ns), 1)]));
    s.assert_rebuilt().await;
    b.stop(Duration::from_secs(30));
    delete_namespace(&s.kube, &s.ns).await;
    delete_namespace(&s.kube, &lease_ns).await;
}

/// The stdout sink keeps its checkpoint in a file under `resume.directory`.
#[tokio::test(flavor = "multi_thread")]
async fn a_killed_bridge_ships_only_what_changed_while_down_stdout() {
    let _serial = SERIAL.lock().await;
    let directory = std::env::temp_dir().join(support::unique("deltaship-checkpoints"));
    let s = Setup::new(false, |c| {
        c.sink = None;
        c.resume.directory = Some(directory.clone());
    })
    .await;
    let bridge = s.start();
    let initial = stdout_events(&bridge, LISTED + 2);
    assert_eq!(initial.len(), LISTED + 2, "{:?}", counted(&initial));
    s.wait_checkpointed(&bridge);
    bridge.signal("KILL");
    drop(bridge);
    s.change_while_down().await;

    let bridge = s.start();
    let want = expected_after_changes(&s.ns, 1);
    let events = stdout_events(&bridge, want.values().sum());
    assert_eq!(counted(&events), want, "shipped after the restart");
    bridge.stop(Duration::from_secs(30));
    delete_namespace(&s.kube, &s.ns).await;
    std::fs::remove_dir_all(directory).unwrap();
}

/// A checkpoint store that cannot be read at start-up (here: a directory where the file
/// should be) delays the watches by the read's bound, then they start with full syncs; once
/// the store can be read the checkpoint is written after all, so a later restart resumes.
#[tokio::test(flavor = "multi_thread")]
async fn a_store_down_at_start_up_is_checkpointed_once_it_comes_back() {
    let _serial = SERIAL.lock().await;
    let directory = std::env::temp_dir().join(support::unique("deltaship-checkpoints"));
    let in_the_way = directory.join("default.checkpoint");
    std::fs::create_dir_all(in_the_way.join("x")).unwrap();
    let s = Setup::new(false, |c| {
        c.sink = None;
        c.resume.directory = Some(directory.clone());
    })
    .await;
    let bridge = s.start();
    let initial = stdout_events(&bridge, LISTED + 2);
    assert_eq!(initial.len(), LISTED + 2, "{:?}", counted(&initial));
    std::fs::remove_dir_all(&in_the_way).unwrap();
    s.wait_checkpointed(&bridge);
    assert!(bridge.log_text().contains("can be read again"), "{}", bridge.log_text());
    bridge.signal("KILL");
    drop(bridge);
    s.change_while_down().await;

    let bridge = s.start();
    let want = expected_after_changes(&s.ns, 1);
    let events = stdout_events(&bridge, want.values().sum());
    assert_eq!(counted(&events), want, "resumed from the checkpoint written once the store came back");
    bridge.stop(Duration::from_secs(30));
    delete_namespace(&s.kube, &s.ns).await;
    std::fs::remove_dir_all(directory).unwrap();
}

/// The events a bridge wrote to stdout, once there are at least `at_least`, and after a
/// pause for any extra one.
fn stdout_events(bridge: &Bridge, at_least: usize) -> Vec<Ev> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while bridge.lines().len() < at_least {
        assert!(std::time::Instant::now() < deadline, "{} of {at_least} events:\n{:?}", bridge.lines().len(), bridge.lines());
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(3));
    bridge
        .lines()
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let e: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|err| panic!("not an event ({err}): {l}"));
            Ev {
                pos: (0, i as i64),
                ty: short(e["type"].as_str().unwrap()),
                key: object_key(e["partitionkey"].as_str().unwrap_or_default()),
                reason: e["data"]["reason"].as_str().unwrap_or_default().to_string(),
            }
        })
        .collect()
}

/// A record copied into the route's topic after the checkpoint, with a resourceVersion the
/// API server has not reached: the next start does not take it as delivered (counted,
/// logged at WARN), and the next real change of its object ships. Before, the object was
/// frozen: every later change skipped as already delivered, for good.
#[tokio::test(flavor = "multi_thread")]
async fn a_record_ahead_of_the_api_server_in_the_log_never_suppresses_a_change() {
    let _serial = SERIAL.lock().await;
    let s = Setup::new(false, |_| {}).await;
    let initial = s.synced_then_killed_and_changed().await;
    let Sink::Kafka { brokers, topic, .. } = &s.sink else { unreachable!("a Kafka route") };
    let records = support::kafka::read_to_end(brokers, topic, Duration::from_secs(60));
    let victim = format!("{}/cm-9", s.ns);
    let original = records.iter().find(|r| r.headers.get("ce_subject") == Some(&victim)).expect("cm-9's event of the initial sync");
    let mut headers = rdkafka::message::OwnedHeaders::new();
    for (name, value) in &original.headers {
        let value = match name.as_str() {
            "ce_resourceversion" => "999999999".to_string(),
            "ce_id" => format!("{value}-copy"),
            _ => value.clone(),
        };
        headers = headers.insert(rdkafka::message::Header { key: name, value: Some(&value) });
    }
    let producer: BaseProducer = ClientConfig::new().set("bootstrap.servers", brokers.as_str()).create().unwrap();
    let key = original.key.clone().unwrap_or_default();
    let payload = original.value.clone().unwrap_or_default();
    producer.send(BaseRecord::to(topic).partition(original.partition).key(&key).payload(&payload).headers(headers)).unwrap();
    producer.flush(Duration::from_secs(10)).unwrap();

    let bridge = s.start();
    s.cms.patch("cm-9", &PatchParams::apply("it").force(), &Patch::Apply(&cm("cm-9", "after-the-copy"))).await.unwrap();
    let want = expected_after_changes(&s.ns, s.sink.markers());
    let events = s.sink.events(initial.len() + 1 + want.values().sum::<usize>() + 1).await;
    let shipped = counted(&after(&events, &initial));
    assert_eq!(shipped.get(&format!("updated {victim}")), Some(&1), "the real change of cm-9 shipped: {shipped:?}\n{}", bridge.log_text());
    let metrics = bridge.get("/metrics").unwrap().1;
    let ignored = "deltaship_resume_tail_records_ignored_total{resource=\"configmaps\",reason=\"ahead\"}";
    assert_eq!(series(&metrics, ignored), Some(1.0), "{metrics}");
    assert!(bridge.log_text().contains("Ignored records of the log ahead of the API server"), "{}", bridge.log_text());
    s.assert_rebuilt().await;
    bridge.stop(Duration::from_secs(30));
    delete_namespace(&s.kube, &s.ns).await;
}

/// A second deployment given the same cluster name, sink and checkpoint as a running one,
/// with another configuration (a label selector) and no shared lease, does not lead the
/// route while the first runs: it says so at ERROR naming both and stands by (ready, as a
/// standby replica is, so that a rolling update ends) shipping nothing; once the first stops
/// (and releases the route), it leads.
#[tokio::test(flavor = "multi_thread")]
async fn a_second_deployment_with_another_configuration_on_a_route_does_not_lead_it_while_the_first_runs() {
    let _serial = SERIAL.lock().await;
    let s = Setup::new(false, |_| {}).await;
    let first = s.start();
    let initial = s.sink.events(LISTED + 2 * s.sink.markers()).await;
    s.wait_checkpointed(&first);

    let mut other: toml::Value = toml::from_str(&s.config).unwrap();
    let resource = other["resources"][0].as_table_mut().expect("the resource's table");
    resource.insert("label_selector".into(), toml::Value::String("selected=yes".into()));
    let mut second = Bridge::start(&toml::to_string(&other).unwrap());
    let refused = "Not leading the route: another deployment with another configuration ships it now";
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !second.log_text().contains(refused) {
        assert!(std::time::Instant::now() < deadline, "the second deployment never said it does not lead:\n{}", second.log_text());
        std::thread::sleep(Duration::from_millis(200));
    }
    let log = second.log_text();
    assert!(log.contains("without leader election (instance"), "both deployments named: {log}");
    // Ten seconds more: standing by, and nothing shipped by it.
    std::thread::sleep(Duration::from_secs(10));
    let metrics = second.get("/metrics").unwrap().1;
    assert_eq!(series(&metrics, "deltaship_route_held_elsewhere{route=\"default\"}"), Some(1.0), "{metrics}");
    assert!(!second.leads(), "{metrics}");
    s.cms.patch("cm-5", &PatchParams::apply("it").force(), &Patch::Apply(&cm("cm-5", "while-both-run"))).await.unwrap();
    let events = s.sink.events(initial.len() + 1).await;
    assert_eq!(counted(&after(&events, &initial)), BTreeMap::from([(format!("updated {}/cm-5", s.ns), 1)]), "only the first deployment ships");

    // The first stops and releases the route: the second leads (a full sync of its own
    // configuration, as a changed configuration does).
    first.stop(Duration::from_secs(30));
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !second.leads() {
        assert!(std::time::Instant::now() < deadline, "the second deployment never led:\n{}", second.log_text());
        std::thread::sleep(Duration::from_millis(200));
    }
    second.wait_ready(Duration::from_secs(60));
    let metrics = second.get("/metrics").unwrap().1;
    assert_eq!(series(&metrics, "deltaship_route_held_elsewhere{route=\"default\"}"), Some(0.0), "{metrics}");
    let log = second.log_text();
    assert!(log.contains("reason=\"foreign\"") || log.contains("reason=foreign"), "{log}");
    second.stop(Duration::from_secs(30));
    delete_namespace(&s.kube, &s.ns).await;
}
