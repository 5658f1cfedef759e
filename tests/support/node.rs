//! The test node (tests/env/node) and deltaship installed on it from the test registry:
//! kubectl, deploy/release, `helm install` of the published chart, the pods' leader.

use std::path::Path;
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::Client;
use kube::api::Api;
use serde_json::{Value, json};

use super::chart::helm;
use super::churn::Churn;
use super::kube::{delete_namespace, eventually, namespace};

/// `kubectl ARGS` (the one built with the test API server), against KUBECONFIG.
pub fn kubectl(args: &[&str]) -> Output {
    let bin = super::var("DELTASHIP_TEST_KUBECTL");
    Command::new(&bin).args(args).output().unwrap_or_else(|e| panic!("run {bin}: {e}"))
}

/// `kubectl ARGS`, which must succeed; its stdout.
pub fn kubectl_ok(args: &[&str]) -> String {
    let out = kubectl(args);
    assert!(out.status.success(), "kubectl {args:?} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// A client of the test API server, after checking tests/env/up started the node (the
/// brokers are not needed here).
pub async fn node_client() -> Client {
    assert_eq!(super::var("DELTASHIP_TEST_NODE"), "localhost", "tests/env/up node names its node localhost (the kubelet refuses a loopback node IP)");
    super::var("KUBECONFIG");
    Client::try_default().await.expect("a client for the test API server (KUBECONFIG)")
}

pub fn container_status(pod: &Pod) -> Option<&ContainerStatus> {
    pod.status.as_ref()?.container_statuses.as_ref()?.first()
}

/// What deploy/release pushed to the test registry.
pub struct Release {
    /// The release's version: the image's tag, the chart's version and appVersion.
    pub version: String,
    /// `REGISTRY/deltaship`, as pods name the image.
    pub repository: String,
    /// The image manifest's digest, `sha256:...`.
    pub image_digest: String,
    /// `oci://REGISTRY/charts/deltaship`.
    pub chart: String,
}

/// deploy/release of this test build's binary to the test registry (plain HTTP), once per
/// test binary.
pub fn release() -> &'static Release {
    static RELEASE: OnceLock<Release> = OnceLock::new();
    RELEASE.get_or_init(publish)
}

/// deploy/release of this test build's binary to the test registry (plain HTTP), as version
/// `<crate version>-<unique>`: a version no node has pulled before.
pub fn publish() -> Release {
    let registry = super::var("DELTASHIP_TEST_REGISTRY");
    let version = format!("{}-{}", env!("CARGO_PKG_VERSION"), super::unique("node"));
    let out = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/release"))
        .args([&registry, "--version", &version, "--binary", env!("CARGO_BIN_EXE_deltaship"), "--plain-http"])
        .env("HELM", super::var("DELTASHIP_TEST_HELM"))
        .output()
        .unwrap();
    assert!(out.status.success(), "deploy/release failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let said = String::from_utf8(out.stdout).unwrap();
    let repository = format!("{registry}/deltaship");
    let image = said.lines().find_map(|l| l.strip_prefix("image ")).unwrap_or_else(|| panic!("no image line in {said:?}"));
    let image_digest = image.strip_prefix(&format!("{repository}:{version}@")).unwrap_or_else(|| panic!("{image}")).to_owned();
    let chart = format!("oci://{registry}/charts/deltaship");
    assert!(said.lines().any(|l| l.starts_with(&format!("chart {chart} {version}@sha256:"))), "{said}");
    let dist = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/dist").join(&version);
    let _ = std::fs::remove_dir_all(dist);
    Release { version, repository, image_digest, chart }
}

/// `helm install --wait` of the release into `ns`, as README's "Install in a cluster" says,
/// plus --plain-http for the test registry and `extra`; the two pods it brings up. The Helm
/// release is named `ns` (the chart's ClusterRole is named after it, and tests run side by
/// side).
pub fn install(release: &Release, ns: &str, extra: &[&str]) -> Vec<Pod> {
    let mut args = vec!["install", ns, &release.chart, "--version", &release.version, "--plain-http", "--namespace", ns, "--wait", "--timeout", "5m"];
    args.extend_from_slice(extra);
    let out = helm(&args);
    assert!(out.status.success(), "helm install --wait failed:\n{}\n{}", String::from_utf8_lossy(&out.stderr), report(ns));
    let pods: Vec<Pod> = serde_json::from_str::<Value>(&kubectl_ok(&["get", "pods", "-n", ns, "-l", "app.kubernetes.io/name=deltaship", "-o", "json"]))
        .unwrap()["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| serde_json::from_value(p.clone()).unwrap())
        .collect();
    assert_eq!(pods.len(), 2, "two replicas: {:?}", pods.iter().map(|p| &p.metadata.name).collect::<Vec<_>>());
    pods
}

/// What explains pods in `ns` that do not run: their descriptions (with their events), the
/// node's (conditions, taints, allocations), and the last lines of the kubelet's, the
/// scheduler's and containerd's logs.
pub fn report(ns: &str) -> String {
    let mut text = String::new();
    for args in [&["describe", "pods", "-n", ns][..], &["describe", "nodes"][..]] {
        let out = kubectl(args);
        text += &format!("--- kubectl {}\n{}{}\n", args.join(" "), String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    }
    let logs = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/env/.state/logs");
    for daemon in ["kubelet", "kube-scheduler", "containerd"] {
        let log = std::fs::read_to_string(logs.join(format!("{daemon}.log"))).unwrap_or_else(|e| format!("({e})"));
        let tail: Vec<&str> = log.lines().rev().take(30).collect();
        text += &format!("--- the last lines of {daemon}.log\n{}\n", tail.into_iter().rev().collect::<Vec<_>>().join("\n"));
    }
    text
}

/// The pod of `names` that the Lease `deltaship` in `ns` names (identity: pod name plus a
/// suffix), once it names one of them.
pub async fn leader_among(client: &Client, ns: &str, names: &[String], timeout: Duration) -> String {
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    eventually(timeout, &format!("the Lease naming one of {names:?}"), || async {
        let holder = leases.get("deltaship").await.ok()?.spec?.holder_identity?;
        names.iter().find(|n| holder.strip_prefix(n.as_str()).is_some_and(|s| s.starts_with('-'))).cloned()
    })
    .await
}

pub fn names(pods: &[Pod]) -> Vec<String> {
    pods.iter().map(|p| p.metadata.name.clone().unwrap()).collect()
}

/// deltaship's /metrics of a pod, through the API server's pod proxy; None until the proxy
/// answers (it refuses a pod whose status has no IP yet: "address not allowed").
pub fn metrics(ns: &str, pod: &str) -> Option<String> {
    let out = kubectl(&["get", "--raw", &format!("/api/v1/namespaces/{ns}/pods/{pod}:9090/proxy/metrics")]);
    out.status.success().then(|| String::from_utf8(out.stdout).unwrap())
}

/// The release installed in a namespace of its own, shipping the ConfigMaps of another
/// namespace (`watched`, churned by the test) to a JetStream stream of its own on the test
/// NATS server, which the pods reach at the node's host address (tests/env/node's DNAT to
/// 127.0.0.1, same port).
pub struct NatsInstall {
    pub ns: String,
    pub watched: String,
    pub stream: String,
    pub churn: Churn,
    /// The pods `helm install` brought up.
    pub pods: Vec<String>,
}

impl NatsInstall {
    pub async fn start(client: &Client, release: &Release, prefix: &str) -> NatsInstall {
        let ns = namespace(client, prefix).await;
        let watched = namespace(client, &format!("{prefix}-watched")).await;
        let cluster = super::unique("c");
        let stream = cluster.to_uppercase().replace('-', "_");
        let nats = super::var("DELTASHIP_TEST_NATS");
        let values = json!({"config": {
            "cluster": cluster,
            "resources": [{"group": "", "version": "v1", "kind": "ConfigMap", "namespaces": [watched]}],
            "sink": {
                "type": "nats",
                "url": format!("nats://{}:{}", super::var("DELTASHIP_TEST_NODE_HOST_IP"), nats.rsplit(':').next().unwrap()),
                "subject_template": format!("{cluster}.{{group}}.{{kind}}.{{namespace}}.{{name}}"),
                "marker_subject_template": format!("{cluster}.{{group}}.{{kind}}._sync"),
                "jetstream": {"stream": stream, "subjects": [format!("{cluster}.>")]},
            },
        }});
        let values_file = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{cluster}.json"));
        std::fs::write(&values_file, values.to_string()).unwrap();
        let churn = Churn::create(client, &watched, 20, 0).await;
        let pods = names(&install(release, &ns, &["--values", values_file.to_str().unwrap()]));
        NatsInstall { ns, watched, stream, churn, pods }
    }

    /// `deltaship rebuild` of the stream, for support::state.
    pub fn rebuild_args(&self) -> Vec<String> {
        vec!["--nats".into(), super::var("DELTASHIP_TEST_NATS"), "--stream".into(), self.stream.clone()]
    }

    /// `helm uninstall`, then the stream and the namespaces go.
    pub async fn remove(self, client: &Client) {
        let out = helm(&["uninstall", &self.ns, "--namespace", &self.ns, "--wait", "--timeout", "2m"]);
        assert!(out.status.success(), "helm uninstall failed:\n{}", String::from_utf8_lossy(&out.stderr));
        super::nats::jetstream().await.delete_stream(&self.stream).await.unwrap();
        delete_namespace(client, &self.ns).await;
        delete_namespace(client, &self.watched).await;
    }
}
