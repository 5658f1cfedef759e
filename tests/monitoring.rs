//! The monitoring assets of the chart (deploy/helm/deltaship/monitoring/): the alerts pass
//! `promtool check rules` and their unit tests (tests/monitoring/alerts_test.yaml), the
//! chart renders them and the dashboard unchanged, and every metric they name is one that
//! deltaship exports: seen on a running bridge, or, for counters that appear only once
//! something happened, declared and counted in the code.

mod support;

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use deltaship::config::LeaderElectionConfig;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use support::bridge::Bridge;
use support::chart::{one, render};
use support::config::{TestConfig, kafka};
use support::kube::{client, delete_namespace, eventually, namespace};

const ALERTS: &str = "deploy/helm/deltaship/monitoring/alerts.yaml";
const DASHBOARD: &str = "deploy/helm/deltaship/monitoring/grafana-dashboard.json";

/// Counters that have no series until what they count happens once (labels are registered
/// on the first increment, so that no series shows a count that never happened).
const COUNTED_WHEN_IT_HAPPENS: [&str; 5] = [
    "deltaship_relists_total",      // a watch that could not resume
    "deltaship_watch_errors_total", // a watch error
    "deltaship_watch_stalls_total", // a watch given up
    "deltaship_bad_objects_total",  // an object that cannot be decoded or encoded
    "deltaship_sink_errors_total",  // a failed send
];

fn promtool(args: &[&str]) -> std::process::Output {
    Command::new(support::var("DELTASHIP_TEST_PROMTOOL")).args(args).output().expect("run promtool")
}

fn alerts() -> Value {
    serde_saphyr::from_str(&std::fs::read_to_string(ALERTS).unwrap()).unwrap()
}

fn dashboard() -> Value {
    serde_json::from_str(&std::fs::read_to_string(DASHBOARD).unwrap()).unwrap()
}

/// Every expression of the rules and the dashboard.
fn expressions() -> Vec<String> {
    let (alerts, dashboard) = (alerts(), dashboard());
    let rules = alerts["groups"].as_array().unwrap().iter().flat_map(|g| g["rules"].as_array().unwrap()).map(|r| &r["expr"]);
    let panels = dashboard["panels"].as_array().unwrap().iter().flat_map(|p| p["targets"].as_array().unwrap()).map(|t| &t["expr"]);
    rules.chain(panels).map(|e| e.as_str().unwrap().to_string()).collect()
}

/// The metric names an expression names: deltaship's and the process's, without the
/// histogram suffixes.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (i, _) in expr.match_indices(['d', 'p']) {
        let rest = &expr[i..];
        let preceded = expr[..i].chars().last().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        if preceded || !(rest.starts_with("deltaship_") || rest.starts_with("process_")) {
            continue;
        }
        let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        let base = ["_bucket", "_sum", "_count"].iter().find_map(|s| name.strip_suffix(s)).unwrap_or(&name);
        names.insert(base.to_string());
    }
    names
}

#[test]
fn the_rules_pass_promtool_and_their_unit_tests() {
    let checked = promtool(&["check", "rules", ALERTS]);
    assert!(checked.status.success(), "promtool check rules:\n{}{}", String::from_utf8_lossy(&checked.stdout), String::from_utf8_lossy(&checked.stderr));
    let tested = promtool(&["test", "rules", "tests/monitoring/alerts_test.yaml"]);
    let out = format!("{}{}", String::from_utf8_lossy(&tested.stdout), String::from_utf8_lossy(&tested.stderr));
    assert!(tested.status.success(), "promtool test rules:\n{out}");
    assert!(out.contains("SUCCESS"), "{out}");
    // Every alert of the file has a unit test.
    let tests = std::fs::read_to_string("tests/monitoring/alerts_test.yaml").unwrap();
    for rule in alerts()["groups"][0]["rules"].as_array().unwrap() {
        let name = rule["alert"].as_str().unwrap();
        assert!(tests.contains(&format!("alertname: {name}\n")), "no unit test of {name}");
    }
}

#[test]
fn the_chart_renders_the_same_rules_and_dashboard_when_asked() {
    let off = render("deltaship", "ops", &[]);
    assert!(off.iter().all(|d| d["kind"] != "PrometheusRule"), "the rules are optional");
    let on = render(
        "deltaship",
        "ops",
        &["--set", "prometheusRule.enabled=true", "--set", "prometheusRule.labels.release=prometheus", "--set", "grafanaDashboard.enabled=true"],
    );
    let rule = one(&on, "PrometheusRule");
    assert_eq!(rule["metadata"]["labels"]["release"], "prometheus");
    assert_eq!(rule["spec"], serde_json::to_value(alerts()).unwrap());
    let dashboards: Vec<&Value> = on.iter().filter(|d| d["kind"] == "ConfigMap" && d["metadata"]["labels"]["grafana_dashboard"] == "1").collect();
    assert_eq!(dashboards.len(), 1, "one dashboard ConfigMap");
    let shipped: Value = serde_json::from_str(dashboards[0]["data"]["deltaship.json"].as_str().unwrap()).unwrap();
    assert_eq!(shipped, dashboard());
}

#[test]
fn every_metric_named_is_declared_by_deltaship() {
    let declared = [std::fs::read_to_string("src/telemetry/metrics.rs").unwrap(), std::fs::read_to_string("src/telemetry/process.rs").unwrap()].concat();
    let named: BTreeSet<String> = expressions().iter().flat_map(|e| metric_names(e)).collect();
    assert!(named.len() >= 20, "{named:?}");
    for name in &named {
        assert!(declared.contains(&format!("\"{name}\"")), "{name} is named by the dashboard or the rules but deltaship declares no such metric");
    }
    for name in COUNTED_WHEN_IT_HAPPENS {
        assert!(named.contains(name), "{name} is not named any more: drop it from the list");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_metric_named_is_exported_by_a_running_bridge() {
    let env = support::env();
    let kube = client().await;
    let ns = namespace(&kube, "it-monitoring").await;
    let prefix = support::unique("it");
    let election = LeaderElectionConfig { enabled: true, lease_name: "deltaship".into(), namespace: Some(ns.clone()), ..LeaderElectionConfig::default() };
    let config =
        TestConfig::new().configmaps(&ns).kafka(kafka(&env.kafka, &format!("{prefix}.{{group}}.{{plural}}"))).with(|c| c.leader_election = election).toml();
    let mut bridge = Bridge::start(&config);
    bridge.wait_ready(Duration::from_secs(90));
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "a"}, "data": {"k": "v"}})).unwrap();
    Api::<ConfigMap>::namespaced(kube.clone(), &ns).create(&PostParams::default(), &cm).await.unwrap();
    let metrics = eventually(Duration::from_secs(60), "the new object acknowledged", || {
        let text = bridge.get("/metrics").map(|r| r.1).unwrap_or_default();
        std::future::ready(text.contains("deltaship_events_total{resource=\"configmaps\",type=\"added\"").then_some(text))
    })
    .await;
    let exported: BTreeSet<String> = metrics.lines().filter(|l| !l.starts_with('#')).flat_map(metric_names).collect();
    let missing: Vec<String> =
        expressions().iter().flat_map(|e| metric_names(e)).filter(|n| !exported.contains(n) && !COUNTED_WHEN_IT_HAPPENS.contains(&n.as_str())).collect();
    drop(bridge);
    delete_namespace(&kube, &ns).await;
    assert!(missing.is_empty(), "named but not exported: {missing:?}\n{metrics}");
}
