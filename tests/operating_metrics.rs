//! What an operator alerts on, exported by a running bridge: the build, each watch's
//! freshness (last event, last sync) and index size, per namespace, the lag from a watch
//! event to its acknowledgement, the API client's requests by verb and code, and the
//! process's CPU, memory, fds and threads.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use support::bridge::Bridge;
use support::chart::service_account_kubeconfig_from;
use support::config::{TestConfig, resource};
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
    // The binary links glibc here: its allocations (a few hundred KB for this small watch)
    // hold part of what is resident.
    let heap = value(&after, "deltaship_heap_allocated_bytes", &[]).unwrap();
    assert!(heap > 1e5 && heap < rss, "heap allocated {heap}, RSS {rss}");
    assert!(value(&after, "process_open_fds", &[]).unwrap() >= 3.0);
    assert!(value(&after, "process_max_fds", &[]).unwrap() >= value(&after, "process_open_fds", &[]).unwrap());
    assert!(value(&after, "process_threads", &[]).unwrap() >= 2.0);
    assert!(value(&after, "process_cpu_seconds_total", &[]).unwrap() >= 0.0);
    let start = value(&after, "process_start_time_seconds", &[]).unwrap();
    assert!((started - 5.0..=unix_now()).contains(&start), "process start {start}, test start {started}");

    drop(bridge);
    delete_namespace(&kube, &ns).await;
}

/// With `namespaces = [a, b]`, each namespace's watch has its own freshness and index gauges
/// (label watch_namespace). The bridge runs as a ServiceAccount that may read ConfigMaps in
/// both, through the HA control plane's load balancer; then its Role in b is revoked and the
/// load balancer cuts every connection: the watch of a reconnects and goes on, the watch of b
/// is refused (403) at every retry. b's last event time stands still while a's moves on,
/// which is what the silent-watch alert looks for; with one series per resource, a's watch
/// would have kept it fresh.
#[tokio::test(flavor = "multi_thread")]
async fn a_stalled_namespace_is_not_hidden_by_a_healthy_one() {
    let kube = client().await;
    let (a, b) = (namespace(&kube, "it-watch-a").await, namespace(&kube, "it-watch-b").await);
    let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "watcher"}})).unwrap();
    Api::<ServiceAccount>::namespaced(kube.clone(), &a).create(&PostParams::default(), &sa).await.unwrap();
    for ns in [&a, &b] {
        let role: Role = serde_json::from_value(json!({
            "metadata": {"name": "read-configmaps"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}],
        }))
        .unwrap();
        Api::<Role>::namespaced(kube.clone(), ns).create(&PostParams::default(), &role).await.unwrap();
        let binding: RoleBinding = serde_json::from_value(json!({
            "metadata": {"name": "read-configmaps"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "read-configmaps"},
            "subjects": [{"kind": "ServiceAccount", "name": "watcher", "namespace": &a}],
        }))
        .unwrap();
        Api::<RoleBinding>::namespaced(kube.clone(), ns).create(&PostParams::default(), &binding).await.unwrap();
    }
    let (kubeconfig, _) = service_account_kubeconfig_from(&kube, &a, "watcher", &support::var("DELTASHIP_TEST_HA_KUBECONFIG")).await;
    let config = TestConfig::new().resource(resource("", "ConfigMap", &[&a, &b])).toml();
    let mut bridge = Bridge::start_with_env(&config, &[("KUBECONFIG", &kubeconfig.display().to_string())]);
    bridge.wait_ready(Duration::from_secs(60));
    let scrape = |bridge: &Bridge| samples(&bridge.get("/metrics").expect("/metrics answers").1);
    let in_ns = |ns: &str| format!("watch_namespace=\"{ns}\"");
    let (in_a, in_b) = (in_ns(&a), in_ns(&b));
    let of = |s: &BTreeMap<String, f64>, name: &str, ns: &str| value(s, name, &["resource=\"configmaps\"", ns]);
    let synced = scrape(&bridge);
    for ns in [&in_a, &in_b] {
        assert!(of(&synced, "deltaship_watch_last_sync_timestamp_seconds", ns).is_some(), "{ns} synced: {synced:?}");
        assert!(of(&synced, "deltaship_watch_last_event_timestamp_seconds", ns).is_some(), "{ns}: {synced:?}");
    }

    // Two ConfigMaps in b, one in a (besides kube-root-ca.crt in each): each watch's index.
    let cm = |name: &str| serde_json::from_value::<ConfigMap>(json!({"metadata": {"name": name}, "data": {"k": "v"}})).unwrap();
    let (cms_a, cms_b) = (Api::<ConfigMap>::namespaced(kube.clone(), &a), Api::<ConfigMap>::namespaced(kube.clone(), &b));
    cms_b.create(&PostParams::default(), &cm("b1")).await.unwrap();
    cms_b.create(&PostParams::default(), &cm("b2")).await.unwrap();
    cms_a.create(&PostParams::default(), &cm("a1")).await.unwrap();
    eventually(Duration::from_secs(30), "each namespace's index gauge", || {
        let s = scrape(&bridge);
        let (ia, ib) = (of(&s, "deltaship_indexed_objects", &in_a), of(&s, "deltaship_indexed_objects", &in_b));
        std::future::ready((ia == Some(2.0) && ib == Some(3.0)).then_some(()))
    })
    .await;

    // b's Role revoked, every connection cut: b's watch is refused from now on.
    Api::<RoleBinding>::namespaced(kube.clone(), &b).delete("read-configmaps", &DeleteParams::default()).await.unwrap();
    let before = scrape(&bridge);
    let b_heard = of(&before, "deltaship_watch_last_event_timestamp_seconds", &in_b).unwrap();
    let cut = std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/env/ha/ctl")).arg("cut").output().unwrap();
    assert!(cut.status.success(), "ha/ctl cut: {}", String::from_utf8_lossy(&cut.stderr));
    let cut_at = unix_now();
    let forbidden =
        |s: &BTreeMap<String, f64>| value(s, "deltaship_watch_errors_total", &["resource=\"configmaps\"", "error_kind=\"forbidden\""]).unwrap_or(0.0);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut n = 0;
    let after = loop {
        n += 1;
        cms_a.create(&PostParams::default(), &cm(&format!("a-after-{n}"))).await.unwrap();
        let s = scrape(&bridge);
        if of(&s, "deltaship_watch_last_event_timestamp_seconds", &in_a).is_some_and(|t| t > cut_at) && forbidden(&s) >= 2.0 {
            break s;
        }
        assert!(Instant::now() < deadline, "a's watch heard no change after the cut, or b's was not refused twice, within 60 s: {s:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(of(&after, "deltaship_watch_last_event_timestamp_seconds", &in_b), Some(b_heard), "b's watch heard nothing since the cut: {after:?}");
    assert_eq!(of(&after, "deltaship_indexed_objects", &in_b), Some(3.0), "b's index as it was");

    drop(bridge);
    delete_namespace(&kube, &a).await;
    delete_namespace(&kube, &b).await;
}
