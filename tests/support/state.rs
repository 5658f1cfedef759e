//! Cluster state two ways, for the rebuild guarantee: the API server's own list, and what
//! `deltaship rebuild` makes of a stream. Both as key (`namespace/name`) to resourceVersion.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, ListParams};
use serde_json::Value;

use super::kube::until_done;

/// The API server's ConfigMaps in `namespaces`.
pub async fn api_configmaps(client: &Client, namespaces: &[String]) -> BTreeMap<String, String> {
    api_configmaps_selected(client, namespaces, None).await
}

/// The API server's ConfigMaps in `namespaces` that `selector` (a label selector) selects.
pub async fn api_configmaps_selected(client: &Client, namespaces: &[String], selector: Option<&str>) -> BTreeMap<String, String> {
    let mut state = BTreeMap::new();
    for ns in namespaces {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        let lp = selector.map_or_else(ListParams::default, |s| ListParams::default().labels(s));
        let list = until_done(&format!("listing ConfigMaps in {ns}"), 0, || api.list(&lp)).await;
        for cm in list.expect("a list never fails with code 0") {
            let m = cm.metadata;
            state.insert(format!("{ns}/{}", m.name.unwrap()), m.resource_version.unwrap());
        }
    }
    state
}

/// A consumer that rebuilds the state from a log: the product's own `deltaship rebuild`, or
/// the Python library of consumers/ (its command takes the same flags), which shares no code
/// with the bridge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Consumer {
    Rebuild,
    Python,
}

impl Consumer {
    fn command(self) -> Command {
        match self {
            Consumer::Rebuild => {
                let mut cmd = Command::new(env!("CARGO_BIN_EXE_deltaship"));
                cmd.arg("rebuild");
                cmd
            }
            Consumer::Python => super::consumers::python_rebuild(),
        }
    }
}

/// `deltaship rebuild ARGS` (e.g. `--kafka B --topic T`): the rebuilt ConfigMaps of
/// `namespaces`, and the summary.
pub async fn rebuilt_configmaps(args: Vec<String>, namespaces: &[String]) -> Result<(BTreeMap<String, String>, Value), String> {
    consumer_configmaps(Consumer::Rebuild, args, namespaces).await
}

/// `consumer`'s command with `args`: the rebuilt ConfigMaps of `namespaces`, and the summary
/// (`rebuild`'s; null for the Python command, whose output is the state alone).
pub async fn consumer_configmaps(consumer: Consumer, args: Vec<String>, namespaces: &[String]) -> Result<(BTreeMap<String, String>, Value), String> {
    let mut cmd = consumer.command();
    cmd.args(args);
    if consumer == Consumer::Rebuild {
        cmd.args(["--out", "-"]);
    }
    let out = tokio::task::spawn_blocking(move || cmd.output()).await.unwrap().map_err(|e| format!("cannot run the {consumer:?} consumer: {e}"))?;
    if !out.status.success() {
        return Err(format!("the {consumer:?} consumer failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr)));
    }
    let doc: Value = serde_json::from_slice(&out.stdout).map_err(|e| format!("the {consumer:?} consumer's output is not JSON: {e}"))?;
    let (resources, summary) = match consumer {
        Consumer::Rebuild => (&doc["resources"], doc["summary"].clone()),
        Consumer::Python => (&doc, Value::Null),
    };
    let objects = resources["v1/ConfigMap"].as_object().cloned().unwrap_or_default();
    let state = objects
        .into_iter()
        .filter(|(key, _)| key.split_once('/').is_some_and(|(ns, _)| namespaces.iter().any(|n| n == ns)))
        .map(|(key, o)| (key, o["metadata"]["resourceVersion"].as_str().unwrap_or("<none>").to_string()))
        .collect();
    Ok((state, summary))
}

/// Polls until the rebuilt state equals the API server's, or panics after `timeout`
/// showing the differences.
pub async fn assert_rebuild_matches(client: &Client, rebuild_args: Vec<String>, namespaces: &[String], timeout: Duration) {
    if let Err(problem) = rebuild_matches(client, rebuild_args, namespaces, timeout).await {
        panic!("the rebuilt state never matched the API server:\n{problem}");
    }
}

/// Polls until the rebuilt state equals the API server's; after `timeout`, the differences.
pub async fn rebuild_matches(client: &Client, rebuild_args: Vec<String>, namespaces: &[String], timeout: Duration) -> Result<(), String> {
    consumer_matches(client, Consumer::Rebuild, rebuild_args, namespaces, None, timeout).await
}

/// Polls until the state `consumer` rebuilds with `args` equals the API server's ConfigMaps
/// that `selector` selects; after `timeout`, the differences.
pub async fn consumer_matches(
    client: &Client,
    consumer: Consumer,
    args: Vec<String>,
    namespaces: &[String],
    selector: Option<&str>,
    timeout: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    loop {
        let want = api_configmaps_selected(client, namespaces, selector).await;
        let problem = match consumer_configmaps(consumer, args.clone(), namespaces).await {
            Ok((got, _)) if got == want => return Ok(()),
            Ok((got, summary)) => differences(&want, &got, &summary),
            Err(e) => e,
        };
        if Instant::now() >= deadline {
            return Err(format!("{consumer:?}: {problem}"));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

pub fn differences(api: &BTreeMap<String, String>, rebuilt: &BTreeMap<String, String>, summary: &Value) -> String {
    let missing: Vec<&String> = api.keys().filter(|k| !rebuilt.contains_key(*k)).collect();
    let extra: Vec<&String> = rebuilt.keys().filter(|k| !api.contains_key(*k)).collect();
    let stale: Vec<_> = api.iter().filter_map(|(k, v)| rebuilt.get(k).filter(|r| *r != v).map(|r| (k, v, r))).collect();
    format!(
        "missing from the rebuilt state: {missing:?}\nextra in the rebuilt state: {extra:?}\ndiffering resourceVersions (key, api, rebuilt): {stale:#?}\nrebuild summary: {summary}"
    )
}
