//! The analytics replica in PostgreSQL (consumers/python/examples/postgres_replica.py and
//! consumers/go/examples/postgres-replica, docs/consumers/postgres-replica.md) against the
//! real servers, one test per language running the same scenario (the two side by side):
//! ConfigMaps churn while the
//! bridge and the replica are each SIGKILLed three times, in turns, each replica killed once
//! it wrote (the last after the churn ended, so that the last replica knows the objects from
//! its replay alone); then a third of the objects is deleted while the bridge is down, and the
//! bridge starts again with a full sync (resume off), so that only the sync's marker removes
//! them.
//! At the end the `objects` table equals the API server's ConfigMaps (missing 0, extra 0,
//! stale 0), every marker's count and digest matched the state held, and the page's SQL runs.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use deltaship::config::ResumeConfig;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams};
use support::bridge::Bridge;
use support::churn::Churn;
use support::config::{TestConfig, kafka};
use support::kube::{client, delete_namespace, namespace, until_done};
use support::postgres::{Database, Language, Replica, psql};

const OBJECTS: usize = 45;
const KILLS: usize = 3;
const RESOURCE: &str = "v1/ConfigMap";

/// key -> (uid, resourceVersion)
type State = BTreeMap<String, (String, String)>;

async fn api_state(cms: &Api<ConfigMap>, ns: &str) -> State {
    let lp = ListParams::default();
    let list = until_done("list the ConfigMaps", 0, || cms.list(&lp)).await.expect("a list never fails with code 0");
    list.items.into_iter().map(|c| (format!("{ns}/{}", c.metadata.name.unwrap()), (c.metadata.uid.unwrap(), c.metadata.resource_version.unwrap()))).collect()
}

fn table_state(db: &Database) -> State {
    db.rows(&format!("SELECT key, uid, resource_version FROM objects WHERE resource = '{RESOURCE}'"))
        .into_iter()
        .map(|r| (r[0].clone(), (r[1].clone(), r[2].clone())))
        .collect()
}

/// (missing, extra, stale): keys of the API server absent from the table, rows of objects
/// that no longer exist, rows whose uid or resourceVersion is not the API server's.
fn compare(api: &State, table: &State) -> (usize, usize, usize) {
    let missing = api.keys().filter(|k| !table.contains_key(*k)).count();
    let extra = table.keys().filter(|k| !api.contains_key(*k)).count();
    let stale = api.iter().filter(|(k, v)| table.get(*k).is_some_and(|t| t != *v)).count();
    (missing, extra, stale)
}

/// The sum of the stored positions: it grows when the replica commits a batch it applied
/// (0 before the replica made its tables).
fn committed(db: &Database) -> i64 {
    psql(&db.dsn, "SELECT coalesce(sum(next_offset), 0) FROM positions").map_or(0, |out| out.trim().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_python_replica_equals_the_api_server_after_sigkills_of_the_bridge_and_the_replica() {
    replica_survives_sigkills(Language::Python).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_go_replica_equals_the_api_server_after_sigkills_of_the_bridge_and_the_replica() {
    replica_survives_sigkills(Language::Go).await;
}

async fn replica_survives_sigkills(language: Language) {
    let began = Instant::now();
    let env = support::env();
    let kube = client().await;
    let ns = namespace(&kube, "it-pg").await;
    let cluster = support::unique("pg");
    let prefix = support::unique("it-pg");
    let topic = format!("{prefix}.configmaps");
    let checkpoints = support::unique("it-checkpoints");
    // State markers every 2 s: the replica checks its state during the churn, not only at syncs.
    let config = |resume: bool| {
        TestConfig::new()
            .cluster(&cluster)
            .configmaps(&ns)
            .kafka(kafka(&env.kafka, &format!("{prefix}.{{plural}}")))
            .with(|c| {
                c.resume = ResumeConfig { enabled: resume, kafka_topic: checkpoints.clone(), ..ResumeConfig::default() };
                c.delivery.state_marker_secs = 2;
            })
            .toml()
    };
    let db = Database::create("it_pg");
    let log = std::env::temp_dir().join(format!("{}.log", support::unique("deltaship-pg-replica")));
    let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), &ns);
    let mut churn = Churn::create(&kube, &ns, OBJECTS, 0).await;
    let mut bridge = Bridge::start(&config(true));
    bridge.wait_ready(Duration::from_secs(120));
    let mut replica = Replica::start(language, &env.kafka, &topic, &db.dsn, &cluster, log.clone());
    churn.start(3, Duration::from_millis(150), None);

    // Kill moments spread over 0 to 1.5 s: the bridge's after it is ready, the replica's after
    // it committed a batch past where it started (it is following, not replaying).
    let mut moment: u64 = 7;
    let mut next_moment = || {
        moment = (moment * 37 + 11) % 1500;
        Duration::from_millis(moment)
    };
    for round in 1..=KILLS {
        tokio::time::sleep(next_moment()).await;
        bridge.signal("KILL");
        bridge.wait_exit(Duration::from_secs(10));
        bridge = Bridge::start(&config(true));
        bridge.wait_ready(Duration::from_secs(120));

        // And the replica started by the round before has replayed up to its stored
        // positions on every partition: a batch committed past them on one partition can
        // come while another still replays.
        let before = committed(&db);
        let deadline = Instant::now() + Duration::from_secs(60);
        while committed(&db) <= before || replica.log_text().matches("replayed ").count() < round - 1 {
            assert!(replica.running(), "the replica exited:\n{}", replica.log_text());
            assert!(
                Instant::now() < deadline,
                "the replica committed nothing past where it started, or did not end its replay, in 60 s:\n{}",
                replica.log_text()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // The churn ends before the last kill: the last replica learns where the objects
        // live from its replay alone, and the removals below depend on it.
        if round == KILLS {
            churn.finish().await;
        }
        tokio::time::sleep(next_moment()).await;
        replica.kill();
        replica = Replica::start(language, &env.kafka, &topic, &db.dsn, &cluster, log.clone());
    }
    let writes = churn.writes();

    // A third deleted while the bridge is down; it starts with a full sync, whose completed
    // marker is the only news of their removal.
    bridge.signal("KILL");
    bridge.wait_exit(Duration::from_secs(10));
    let deleted: Vec<String> = (0..OBJECTS).step_by(3).map(|i| format!("obj-{i:03}")).collect();
    for name in &deleted {
        let (cms, dp) = (&cms, &DeleteParams::default());
        until_done(&format!("delete {name}"), 404, || async move { cms.delete(name, dp).await.map(|_| ()) }).await;
    }
    let restarted = Instant::now();
    let _bridge = Bridge::start(&config(false));

    let want = api_state(&cms, &ns).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let table = loop {
        let table = table_state(&db);
        if compare(&want, &table) == (0, 0, 0) {
            break table;
        }
        assert!(replica.running(), "the replica exited:\n{}", replica.log_text());
        if Instant::now() > deadline {
            let (missing, extra, stale) = compare(&want, &table);
            panic!("the objects table never equalled the API server: missing {missing}, extra {extra}, stale {stale}\n{}", replica.log_text());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let caught_up = restarted.elapsed();

    let sums = &db.rows("SELECT count(*) FILTER (WHERE ok), count(*) FILTER (WHERE NOT ok) FROM checks")[0];
    let (verified, mismatched): (u64, u64) = (sums[0].parse().unwrap(), sums[1].parse().unwrap());
    // A delete at a record that is also a checked marker: a removal by a sync.completed.
    let removed_by_marker: u64 =
        db.rows("SELECT count(*) FROM history h JOIN checks c USING (topic, partition, kafka_offset) WHERE h.change = 'delete'")[0][0].parse().unwrap();
    let history: u64 = db.rows("SELECT count(*) FROM history")[0][0].parse().unwrap();
    let text = replica.log_text();
    let replays = text.matches("replayed ").count();
    eprintln!(
        "PG-REPLICA-FIGURES language={language:?} bridge_kills={KILLS} replica_kills={KILLS} writes={writes} deleted={} rows={} api_objects={} missing=0 extra=0 stale=0 history={history} markers_verified={verified} markers_mismatched={mismatched} removed_by_marker={removed_by_marker} replica_replays={replays} catch_up_s={:.1} test_s={:.1}",
        deleted.len(),
        table.len(),
        want.len(),
        caught_up.as_secs_f64(),
        began.elapsed().as_secs_f64()
    );
    assert_eq!(mismatched, 0, "markers whose count and digest did not match:\n{text}");
    assert!(verified > 0, "no marker was checked:\n{text}");
    assert!(!text.contains("state mismatch"), "{text}");
    assert!(removed_by_marker >= deleted.len() as u64, "{removed_by_marker} removals by a marker, {} objects deleted while the bridge was down", deleted.len());
    assert_eq!(replays, KILLS, "each restarted replica replays up to its stored positions:\n{text}");

    page_sql_runs(&db, &ns, &want);
    drop(replica);
    let _ = std::fs::remove_file(&log);
    delete_namespace(&kube, &ns).await;
}

/// Every SQL block of the page runs against the replica's tables, and says what the page says.
fn page_sql_runs(db: &Database, ns: &str, want: &State) {
    let sql = |name: &str| support::docs::block(&format!("sql: {name}"), "sql");
    let names: Vec<String> = support::docs::marked("sql").into_iter().map(|(n, _)| n).collect();
    assert!(names.len() >= 4, "the page's SQL blocks: {names:?}");
    for name in &names {
        // The page's example object, made one of the test's.
        let text = sql(name).replace("'shop/settings'", &format!("'{ns}/obj-001'"));
        let rows = db.rows(&text);
        match name.as_str() {
            "objects-per-namespace" => assert_eq!(rows, vec![vec![ns.to_string(), want.len().to_string()]], "{text}"),
            "history-of-an-object" => {
                let last = rows.last().unwrap_or_else(|| panic!("no history for {ns}/obj-001:\n{text}"));
                assert_eq!(last[2], want[&format!("{ns}/obj-001")].1, "the last change of {ns}/obj-001 is not its resourceVersion: {rows:?}");
            }
            "markers-checked" => assert!(rows[0][1] == "0" && rows[0][0] != "0", "{rows:?}"),
            _ => {}
        }
    }
}
