//! The test node (tests/env/node) and deltaship installed on it from the test registry:
//! kubectl, deploy/release, `helm install` of the published chart, the pods' leader.

use std::path::Path;
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ContainerStatus, Node, Pod};
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
/// brokers are not needed here) and that it takes pods: should one of its daemons have
/// stopped, or the node be unready or tainted, what was found is printed and
/// `tests/env/node/ctl start` (idempotent: it starts what does not run and waits until the
/// node is Ready) runs; a node still unusable after it fails the test with the report.
pub async fn node_client() -> Client {
    assert_eq!(super::var("DELTASHIP_TEST_NODE"), "localhost", "tests/env/up node names its node localhost (the kubelet refuses a loopback node IP)");
    super::var("KUBECONFIG");
    let client = Client::try_default().await.expect("a client for the test API server (KUBECONFIG)");
    // Tests of a binary run side by side: one of them starts what stopped, the others wait.
    static STARTING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _one = STARTING.lock().await;
    if let Err(found) = usable(&client).await {
        eprintln!("the test node does not take pods ({found}); starting what stopped:\n{}", report("default"));
        let ctl = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/env/node/ctl");
        let out = Command::new(ctl).arg("start").output().unwrap_or_else(|e| panic!("run {ctl}: {e}"));
        eprintln!("{ctl} start: {}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
        if let Err(found) = usable(&client).await {
            panic!("the test node does not take pods ({found}), even after {ctl} start:\n{}", report("default"));
        }
    }
    client
}

/// The daemons of tests/env/node, by their pid files.
const NODE_DAEMONS: [&str; 4] = ["containerd", "kubelet", "kube-scheduler", "kube-proxy"];

/// Ok when every daemon of the node runs and the Node is Ready without taints; else what is not so.
async fn usable(client: &Client) -> Result<(), String> {
    let pids = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/env/.state/pids");
    let mut found: Vec<String> = NODE_DAEMONS
        .iter()
        .filter(|d| {
            let pid = std::fs::read_to_string(pids.join(format!("{d}.pid"))).unwrap_or_default();
            let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).unwrap_or_default();
            // The state follows the parenthesised command name; Z is a zombie.
            stat.rsplit_once(") ").is_none_or(|(_, rest)| rest.starts_with('Z'))
        })
        .map(|d| format!("{d} is not running"))
        .collect();
    match Api::<Node>::all(client.clone()).get("localhost").await {
        Ok(node) => {
            let conditions = node.status.and_then(|s| s.conditions).unwrap_or_default();
            if !conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True") {
                found.push("the Node is not Ready".into());
            }
            for t in node.spec.and_then(|s| s.taints).unwrap_or_default() {
                found.push(format!("the Node is tainted {}:{}", t.key, t.effect));
            }
        }
        Err(e) => found.push(format!("no Node localhost: {e}")),
    }
    if found.is_empty() { Ok(()) } else { Err(found.join("; ")) }
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
/// What the registry serves is checked: the image's digest, and its labels naming the binary;
/// and the SBOM deploy/release wrote names the image by that digest.
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
    // The SBOM written beside the image names it by the digest the registry serves it by.
    let sbom = said.lines().find_map(|l| l.strip_prefix("sbom ")).unwrap_or_else(|| panic!("no sbom line in {said:?}"));
    let sbom: Value = serde_json::from_slice(&std::fs::read(sbom).unwrap()).unwrap();
    let image_package = sbom["packages"].as_array().unwrap().iter().find(|p| p["primaryPackagePurpose"] == "CONTAINER").unwrap();
    assert_eq!(format!("sha256:{}", image_package["checksums"][0]["checksumValue"].as_str().unwrap()), image_digest, "the SBOM's image digest");
    // As the registry serves the pushed image: its digest, and the labels naming the binary.
    let inspect = Command::new("skopeo").args(["inspect", "--tls-verify=false", &format!("docker://{repository}:{version}")]).output().unwrap();
    assert!(inspect.status.success(), "skopeo inspect: {}", String::from_utf8_lossy(&inspect.stderr));
    let served: Value = serde_json::from_slice(&inspect.stdout).unwrap();
    assert_eq!(served["Digest"], image_digest.as_str(), "the registry's digest of {repository}:{version}");
    let labels = &served["Labels"];
    let binary = Command::new(env!("CARGO_BIN_EXE_deltaship")).arg("--version").output().unwrap();
    assert_eq!(
        format!(
            "deltaship {} ({})\n",
            labels["org.opencontainers.image.version"].as_str().unwrap(),
            labels["org.opencontainers.image.revision"].as_str().unwrap()
        ),
        String::from_utf8_lossy(&binary.stdout),
        "the pushed image's labels"
    );
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

/// A process of a container the kubelet runs.
#[derive(Debug)]
pub struct PodProcess {
    pub pid: u32,
    /// /proc/PID/status.
    pub status: String,
    /// The memory limit of its cgroup (v1), in bytes.
    pub memory_limit: u64,
}

/// The processes named `comm` whose memory cgroup is one of `pods`' (the kubelet's cgroups
/// are `/kubepods/<class>/pod<uid>/<container>`).
pub fn pod_processes(comm: &str, pods: &[Pod]) -> Vec<PodProcess> {
    let cgroups: Vec<String> = pods.iter().map(|p| format!("/pod{}/", p.metadata.uid.as_ref().unwrap())).collect();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let dir = entry.path();
        let (Ok(name), Ok(cgroup), Ok(status)) =
            (std::fs::read_to_string(dir.join("comm")), std::fs::read_to_string(dir.join("cgroup")), std::fs::read_to_string(dir.join("status")))
        else {
            continue;
        };
        let Some(memory) = cgroup.lines().find_map(|l| l.split_once(":memory:").map(|(_, path)| path.to_owned())) else { continue };
        if name.trim() == comm && memory.starts_with("/kubepods") && cgroups.iter().any(|c| memory.contains(c.as_str())) {
            let limit = std::fs::read_to_string(format!("/sys/fs/cgroup/memory{memory}/memory.limit_in_bytes")).unwrap();
            found.push(PodProcess { pid, status, memory_limit: limit.trim().parse().unwrap() });
        }
    }
    found
}

/// What explains pods in `ns` that do not run: their descriptions (with their events), the
/// node's (conditions, taints, allocations), and the last lines of the node's daemons' logs.
pub fn report(ns: &str) -> String {
    let mut text = String::new();
    for args in [&["describe", "pods", "-n", ns][..], &["describe", "nodes"][..]] {
        let out = kubectl(args);
        text += &format!("--- kubectl {}\n{}{}\n", args.join(" "), String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    }
    let state = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/env/.state");
    // A node under disk pressure: how much is left, and what of the test servers' takes it.
    let disk = Command::new("sh").arg("-c").arg("df -h . && du -sh * | sort -h").current_dir(&state).output();
    text += &format!("--- the disk of {}\n{}\n", state.display(), disk.map_or_else(|e| e.to_string(), |o| String::from_utf8_lossy(&o.stdout).into_owned()));
    let logs = state.join("logs");
    for daemon in NODE_DAEMONS {
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
/// namespace (`watched`, churned by the test) to a JetStream stream of its own on a NATS
/// server of the host's 127.0.0.1, which the pods reach at the node's host address
/// (tests/env/node's DNAT to 127.0.0.1, same port).
pub struct NatsInstall {
    pub ns: String,
    pub watched: String,
    pub stream: String,
    pub churn: Churn,
    /// The pods `helm install` brought up.
    pub pods: Vec<String>,
    /// The NATS server's URL on the host, `nats://127.0.0.1:PORT`.
    pub nats: String,
    /// `config.cluster`: the first token of every subject.
    pub cluster: String,
}

impl NatsInstall {
    /// On the test NATS server, with the chart's defaults.
    pub async fn start(client: &Client, release: &Release, prefix: &str) -> NatsInstall {
        NatsInstall::start_with(client, release, prefix, &super::var("DELTASHIP_TEST_NATS"), |_, _| ()).await
    }

    /// On the NATS server at `nats` (`nats://127.0.0.1:PORT`), with the chart's values
    /// (`{"config": ...}`) changed by `edit`, which is given the watched namespace too.
    pub async fn start_with(client: &Client, release: &Release, prefix: &str, nats: &str, edit: impl FnOnce(&str, &mut Value)) -> NatsInstall {
        let ns = namespace(client, prefix).await;
        let watched = namespace(client, &format!("{prefix}-watched")).await;
        let cluster = super::unique("c");
        let stream = cluster.to_uppercase().replace('-', "_");
        let mut values = json!({"config": {
            "cluster": cluster,
            "resources": [{"group": "", "version": "v1", "kind": "ConfigMap", "namespaces": [watched]}],
            "sink": {
                "type": "nats",
                "url": format!("nats://{}:{}", super::var("DELTASHIP_TEST_NODE_HOST_IP"), nats.rsplit(':').next().unwrap()),
                "subject_template": format!("{cluster}.{{group}}.{{kind}}.{{namespace}}.{{name}}"),
                "marker_subject_template": format!("{cluster}.{{group}}.{{kind}}._sync"),
                "jetstream": {"stream": stream, "subjects": [format!("{cluster}.>")], "fence_subject": format!("{cluster}._fence")},
            },
        }});
        edit(&watched, &mut values);
        let values_file = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{cluster}.json"));
        std::fs::write(&values_file, values.to_string()).unwrap();
        let churn = Churn::create(client, &watched, 20, 0).await;
        let pods = names(&install(release, &ns, &["--values", values_file.to_str().unwrap()]));
        NatsInstall { ns, watched, stream, churn, pods, nats: nats.to_owned(), cluster }
    }

    /// `deltaship rebuild` of the stream, for support::state.
    pub fn rebuild_args(&self) -> Vec<String> {
        vec!["--nats".into(), self.nats.clone(), "--stream".into(), self.stream.clone()]
    }

    /// `helm test` (deltaship check from a pod: the sink answers it), `helm uninstall`,
    /// which leaves what the README says; then the stream and the namespaces go.
    pub async fn remove(self, client: &Client) {
        helm_test(&self.ns);
        uninstall(&self.ns).await;
        let nats = async_nats::connect(&self.nats).await.unwrap_or_else(|e| panic!("connect to {}: {e}", self.nats));
        async_nats::jetstream::new(nats).delete_stream(&self.stream).await.unwrap();
        delete_namespace(client, &self.ns).await;
        delete_namespace(client, &self.watched).await;
    }
}

/// `helm test` of release `ns` (its pod runs `deltaship check` as the release's
/// ServiceAccount), which must pass; its output. (Not `--logs`: Helm 3.19 deletes a
/// succeeded test pod before it reads the logs; a failed one is kept for them.)
pub fn helm_test(ns: &str) -> String {
    let out = helm(&["test", ns, "--namespace", ns, "--timeout", "3m"]);
    assert!(out.status.success(), "helm test failed:\n{}\n{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr), report(ns));
    String::from_utf8(out.stdout).unwrap()
}

/// What README's "Uninstall" says `helm uninstall` leaves in the cluster: the Lease of
/// leader election, which deltaship itself creates.
pub const LEFT_BY_UNINSTALL: [&str; 1] = ["lease.coordination.k8s.io/deltaship"];

/// `helm uninstall --wait` of release `ns`; then, once its pods are gone, exactly
/// `LEFT_BY_UNINSTALL` is left of it in its namespace and the cluster.
pub async fn uninstall(ns: &str) {
    let out = helm(&["uninstall", ns, "--namespace", ns, "--wait", "--timeout", "2m"]);
    assert!(out.status.success(), "helm uninstall failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let kinds = "pods,services,deployments,replicasets,configmaps,secrets,serviceaccounts,roles,rolebindings,leases,poddisruptionbudgets,networkpolicies";
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let mut left: Vec<String> = kubectl_ok(&["get", kinds, "-n", ns, "-o", "name"])
            .lines()
            .filter(|l| !["configmap/kube-root-ca.crt", "serviceaccount/default"].contains(l))
            .map(str::to_owned)
            .collect();
        // The chart's cluster-wide objects are named after the release.
        let cluster = kubectl_ok(&["get", "clusterroles,clusterrolebindings", "-o", "name"]);
        left.extend(cluster.lines().filter(|l| l.contains(ns)).map(str::to_owned));
        if left == LEFT_BY_UNINSTALL {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "90 s after helm uninstall of {ns}, left: {left:?}; README says {LEFT_BY_UNINSTALL:?}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
