//! What an operator alerts on, exported by a running bridge: the build, each watch's
//! freshness (last event, last sync), the lag from a watch event to its acknowledgement, the
//! API client's requests by verb and code, and the process's CPU, memory, fds and threads.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::json;
use support::bridge::Bridge;
use support::config::TestConfig;
use support::kube::{client, delete_namespace, eventually, namespace};

fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

/// Every sample of the Prometheus text: `name{labels}` as it is written, to its value.
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.rsplit_once(' ').and_then(|(series, value)| Some((series.to_string(), value.parse().ok()?))))
        .collect()
}

/// The value of the one series of `name` whose labels include every `label="value"` of `labels`.
fn value(samples: &BTreeMap<String, f64>, name: &str, labels: &[&str]) -> Option<f64> {
    samples
        .iter()
        .find(|(series, _)| {
            let (n, rest) = series.split_once('{').unwrap_or((series, ""));
            n == name && labels.iter().all(|l| rest.contains(l))
        })
        .map(|(_, v)| *v)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_running_bridge_exports_its_build_freshness_lag_api_requests_and_process() {
    let kube = client().await;
    let ns = namespace(&kube, "it-operate").await;
    let started = unix_now();
    let mut bridge = Bridge::start(&TestConfig::new().configmaps(&ns).toml());
    bridge.wait_ready(Duration::from_secs(60));
    let scrape = |bridge: &Bridge| samples(&bridge.get("/metrics").expect("/metrics answers").1);
    let synced = scrape(&bridge);
    let resource = "resource=\"configmaps\"";
    let first_sync = value(&synced, "deltaship_watch_last_sync_timestamp_seconds", &[resource]).expect("a sync time once synced");
    let before = value(&synced, "deltaship_watch_last_event_timestamp_seconds", &[resource]).expect("an event time once synced");
    assert!(first_sync >= started - 1.0 && first_sync <= unix_now(), "{first_sync} not since {started}");

    let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), &ns);
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "a"}, "data": {"k": "v"}})).unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    // The two markers of the initial sync and the new object: at least three
    // acknowledgements (kube-root-ca.crt, which the controller manager creates in a new
    // namespace, may come too, before or after the list), and a newer event.
    let after = eventually(Duration::from_secs(30), "the new object's acknowledgement", || {
        let s = scrape(&bridge);
        let acked = value(&s, "deltaship_event_lag_seconds_count", &["route=\"default\""]).unwrap_or(0.0);
        let seen = value(&s, "deltaship_watch_last_event_timestamp_seconds", &[resource]).unwrap_or(0.0);
        std::future::ready((acked >= 3.0 && seen > before).then_some(s))
    })
    .await;

    // The build the bridge reports is the one its `--version` names.
    let version = std::process::Command::new(env!("CARGO_BIN_EXE_deltaship")).arg("--version").output().unwrap();
    let version = String::from_utf8(version.stdout).unwrap();
    let revision = version.trim().rsplit_once('(').and_then(|(_, r)| r.strip_suffix(')')).unwrap_or_else(|| panic!("--version: {version}"));
    let build: Vec<_> = after.iter().filter(|(series, _)| series.starts_with("deltaship_build_info")).collect();
    assert_eq!(
        value(&after, "deltaship_build_info", &[concat!("version=\"", env!("CARGO_PKG_VERSION"), "\""), &format!("revision=\"{revision}\"")]),
        Some(1.0),
        "--version says {version}, /metrics has {build:?}"
    );
    let last_event = value(&after, "deltaship_watch_last_event_timestamp_seconds", &[resource]).unwrap();
    assert!(last_event > before && last_event <= unix_now(), "the change moved the watch's last event time: {before} -> {last_event}");
    assert_eq!(value(&after, "deltaship_watch_last_sync_timestamp_seconds", &[resource]), Some(first_sync), "no sync since");
    let lag_sum = value(&after, "deltaship_event_lag_seconds_sum", &["route=\"default\""]).unwrap();
    assert!(lag_sum > 0.0 && lag_sum < 30.0, "lag of three events: {lag_sum} s");
    assert!(value(&after, "deltaship_event_lag_seconds_bucket", &["route=\"default\"", "le=\"300\""]).unwrap() >= 3.0);

    for verb in ["discovery", "list", "watch", "create"] {
        let n = value(&after, "deltaship_kube_requests_total", &[&format!("verb=\"{verb}\""), "code=\"20"]).unwrap_or(0.0);
        assert!(n >= 1.0, "no successful {verb} request counted: {after:?}");
    }
    let rss = value(&after, "process_resident_memory_bytes", &[]).unwrap();
    assert!(rss > 1e6 && rss < 1e9, "RSS {rss}");
    assert!(value(&after, "process_open_fds", &[]).unwrap() >= 3.0);
    assert!(value(&after, "process_max_fds", &[]).unwrap() >= value(&after, "process_open_fds", &[]).unwrap());
    assert!(value(&after, "process_threads", &[]).unwrap() >= 2.0);
    assert!(value(&after, "process_cpu_seconds_total", &[]).unwrap() >= 0.0);
    let start = value(&after, "process_start_time_seconds", &[]).unwrap();
    assert!((started - 5.0..=unix_now()).contains(&start), "process start {start}, test start {started}");

    drop(bridge);
    delete_namespace(&kube, &ns).await;
}
