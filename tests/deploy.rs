//! The deployment artifacts: the Helm chart (deploy/helm/deltaship), the plain manifest
//! rendered from it (deploy/kubernetes/deltaship.yaml), the image (deploy/Dockerfile) and
//! the compose file (docker-compose.yml).
//!
//! The chart lints and renders with the pinned helm (tests/env/helm), every rendered object
//! passes the real API server's validation and admission (server-side dry run), its RBAC is
//! no more than the config needs (the rendered rules) and no less (deltaship runs as the
//! chart's ServiceAccount until it leads and is ready). No image is built and no container
//! runs here (there is no Docker engine): the Dockerfile and the compose file are checked
//! for their structure and for agreeing with the chart and config/compose.toml.

mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use deltaship::config::{self, SinkConfig};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, DeleteParams};
use serde_json::{Value, json};
use support::bridge::Bridge;
use support::chart::{
    allowed, chart, create, docs, dry_run_all, helm, kinds, one, read_grants, render, render_text, rendered_config, root, service_account_kubeconfig, strings,
    template,
};

const MANIFEST: &str = "deploy/kubernetes/deltaship.yaml";
const REGENERATE: &str = "{ sed '/^---$/,$d' deploy/kubernetes/deltaship.yaml; \
    helm template deltaship deploy/helm/deltaship --namespace deltaship --skip-tests; } > /tmp/deltaship.yaml \
    && mv /tmp/deltaship.yaml deploy/kubernetes/deltaship.yaml";
/// The config of the extended renders: ConfigMaps and Deployments, with matching RBAC.
const TWO_RESOURCES: [&str; 4] = [
    "--set-json",
    r#"config.resources=[{"version":"v1","kind":"ConfigMap"},{"group":"apps","version":"v1","kind":"Deployment","ignore_fields":["/status"]}]"#,
    "--set-json",
    r#"rbac.resources=[{"group":"","resource":"configmaps"},{"group":"apps","resource":"deployments"}]"#,
];

// ---------------------------------------------------------------------------------------
// helpers

fn set<const N: usize>(items: [&str; N]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// `labels` ⊇ `selector` (a matchLabels map).
fn selects(selector: &Value, labels: &Value) -> bool {
    let sel = selector.as_object().expect("a label map");
    !sel.is_empty() && sel.iter().all(|(k, v)| labels.get(k) == Some(v))
}

fn yaml_file(path: &str) -> Value {
    let text = std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// {(group, plural)} of values.yaml's rbac.resources.
fn default_rbac_resources() -> BTreeSet<(String, String)> {
    let values = yaml_file("deploy/helm/deltaship/values.yaml");
    values["rbac"]["resources"]
        .as_array()
        .expect("rbac.resources in values.yaml")
        .iter()
        .map(|r| (r["group"].as_str().unwrap_or("").to_owned(), r["resource"].as_str().unwrap().to_owned()))
        .collect()
}

/// Asserts that the ClusterRole grants get/list/watch on exactly `expected` and nothing
/// else but `create` on selfsubjectaccessreviews and `get` on the kube-system namespace.
fn assert_cluster_role(docs: &[Value], expected: &BTreeSet<(String, String)>) {
    let role = one(docs, "ClusterRole");
    let (fixed, rules): (Vec<Value>, Vec<Value>) = role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .cloned()
        .partition(|r| r["resources"] == json!(["selfsubjectaccessreviews"]) || r["resourceNames"] == json!(["kube-system"]));
    assert_eq!(
        fixed,
        [
            json!({"apiGroups": ["authorization.k8s.io"], "resources": ["selfsubjectaccessreviews"], "verbs": ["create"]}),
            json!({"apiGroups": [""], "resources": ["namespaces"], "resourceNames": ["kube-system"], "verbs": ["get"]})
        ],
        "create on selfsubjectaccessreviews (deltaship checks its access at start-up) and get on the kube-system namespace (the cluster's identity) only: {role}"
    );
    assert_eq!(&read_grants(&rules), expected, "the ClusterRole's resources are not those of rbac.resources");
}

// ---------------------------------------------------------------------------------------
// the chart

/// values.schema.json: a mistyped key or a value of the wrong type fails lint and template,
/// naming it, instead of being ignored.
#[test]
fn a_mistyped_or_wrongly_typed_value_is_refused_by_the_chart_schema() {
    let chart = chart();
    for (set, named) in [
        ("replica=3", "additional properties 'replica' not allowed"),
        ("networkPolicy.dsn=false", "additional properties 'dsn' not allowed"),
        ("replicas=two", "at '/replicas': got string, want integer"),
        ("rbac.scope=cluster-wide", "at '/rbac/scope'"),
        ("serviceMonitor.interval=30", "at '/serviceMonitor/interval'"),
        // `config` is checked with deltaship's own schema (tests/config_schema.rs).
        ("config.resorces=x", "additional properties 'resorces' not allowed"),
        ("config.kubernetes.page_size=many", "at '/config/kubernetes/page_size'"),
        ("config.sink.type=kafak", "at '/config/sink'"),
    ] {
        let lint = helm(&["lint", &chart, "--set", set]);
        let out = format!("{}{}", String::from_utf8_lossy(&lint.stdout), String::from_utf8_lossy(&lint.stderr));
        assert!(!lint.status.success() && out.contains(named), "helm lint --set {set}:\n{out}");
        let rendered = template("deltaship", "deltaship", &["--set", set]);
        assert!(!rendered.status.success() && String::from_utf8_lossy(&rendered.stderr).contains(named), "helm template --set {set}");
    }
}

/// `helm package` makes the chart archive that `helm push` publishes; the archive lints,
/// carries the README, the schema and the monitoring files, and installs the same objects.
#[test]
fn the_packaged_chart_lints_and_carries_its_readme_schema_and_monitoring() {
    let out_dir = std::env::temp_dir().join(support::unique("deltaship-chart"));
    std::fs::create_dir_all(&out_dir).unwrap();
    let packaged = helm(&["package", &chart(), "--destination", out_dir.to_str().unwrap()]);
    assert!(packaged.status.success(), "{}", String::from_utf8_lossy(&packaged.stderr));
    let archive = out_dir.join("deltaship-0.1.0.tgz");
    let archive = archive.to_str().unwrap();
    let lint = helm(&["lint", "--strict", archive]);
    assert!(lint.status.success(), "{}", String::from_utf8_lossy(&lint.stdout));
    let readme = helm(&["show", "readme", archive]);
    assert_eq!(String::from_utf8_lossy(&readme.stdout).trim_end(), std::fs::read_to_string(root().join("deploy/helm/deltaship/README.md")).unwrap().trim_end());
    let listing = std::process::Command::new("tar").args(["tzf", archive]).output().unwrap();
    let files = String::from_utf8_lossy(&listing.stdout);
    for f in ["deltaship/values.schema.json", "deltaship/monitoring/alerts.yaml", "deltaship/monitoring/grafana-dashboard.json"] {
        assert!(files.lines().any(|l| l == f), "{f} not in the package:\n{files}");
    }
    let from_archive = helm(&["template", "deltaship", archive, "--namespace", "deltaship", "--skip-tests"]);
    assert_eq!(String::from_utf8_lossy(&from_archive.stdout), render_text("deltaship", "deltaship", &[]));
    std::fs::remove_dir_all(&out_dir).unwrap();
}

#[test]
fn helm_lint_passes() {
    let chart = chart();
    for extra in [&[][..], &["--set", "serviceMonitor.enabled=true"], &TWO_RESOURCES, &HARDENED] {
        let mut args = vec!["lint", "--strict", &chart];
        args.extend_from_slice(extra);
        let out = helm(&args);
        assert!(out.status.success(), "helm {args:?} failed:\n{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    }
}

#[test]
fn the_default_render_has_every_object() {
    let docs = render("deltaship", "deltaship", &[]);
    let mut found = kinds(&docs);
    found.sort();
    assert_eq!(
        found,
        ["ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment", "PodDisruptionBudget", "Role", "RoleBinding", "Service", "ServiceAccount"],
        "a ServiceMonitor only when serviceMonitor.enabled"
    );
    // The config in the ConfigMap is one deltaship accepts, with the documented defaults.
    let (_, cfg) = rendered_config(&docs);
    assert!(cfg.leader_election.enabled);
    assert_eq!(cfg.http.listen.to_string(), "0.0.0.0:9090");
    assert!(matches!(cfg.effective_routes()[0].sink, SinkConfig::Stdout {}));
    assert_eq!(cfg.resources.len(), 1);
    assert_eq!((cfg.resources[0].group.as_str(), cfg.resources[0].kind.as_str()), ("", "ConfigMap"));
}

#[test]
fn the_committed_manifest_is_a_fresh_render() {
    let committed = std::fs::read_to_string(root().join(MANIFEST)).expect("deploy/kubernetes/deltaship.yaml");
    let (header, body) = committed.split_once("\n---\n").map(|(h, b)| (h, format!("---\n{b}"))).expect("a header comment, then the rendered documents");
    assert!(header.lines().all(|l| l.starts_with('#')), "the header is comments only:\n{header}");
    assert!(
        header.contains("helm template deltaship deploy/helm/deltaship --namespace deltaship --skip-tests"),
        "the header says how the file was generated:\n{header}"
    );
    let fresh = render_text("deltaship", "deltaship", &[]);
    assert!(body == fresh, "{MANIFEST} is stale (it differs from a fresh render of the chart); regenerate it with:\n  {REGENERATE}");
}

/// The hardening options: a NetworkPolicy (API server CIDRs, DNS, the brokers, the metrics
/// port from the monitoring namespace), zone spread, a priority class.
const HARDENED: [&str; 12] = [
    "--set",
    "networkPolicy.enabled=true",
    "--set",
    "networkPolicy.apiServer.cidrs={10.0.0.1/32}",
    "--set-json",
    r#"networkPolicy.brokers=[{"to":[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"kafka"}}}],"ports":[{"port":9092,"protocol":"TCP"}]}]"#,
    "--set-json",
    r#"networkPolicy.metricsFrom=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}]"#,
    "--set-json",
    r#"topologySpreadConstraints=[{"maxSkew":1,"topologyKey":"topology.kubernetes.io/zone","whenUnsatisfiable":"ScheduleAnyway","labelSelector":{"matchLabels":{"app.kubernetes.io/name":"deltaship"}}}]"#,
    "--set",
    "priorityClassName=",
];

#[test]
fn the_hardening_options_render_a_network_policy_spread_and_priority() {
    let off = render("deltaship", "deltaship", &[]);
    assert!(off.iter().all(|d| d["kind"] != "NetworkPolicy"), "no NetworkPolicy by default");
    let pod = &one(&off, "Deployment")["spec"]["template"]["spec"];
    assert!(pod.get("priorityClassName").is_none() && pod.get("topologySpreadConstraints").is_none());

    let mut args = HARDENED.to_vec();
    args.extend(["--set", "priorityClassName=deltaship-critical"]);
    let on = render("deltaship", "deltaship", &args);
    let pod = &one(&on, "Deployment")["spec"]["template"]["spec"];
    assert_eq!(pod["priorityClassName"], "deltaship-critical");
    assert_eq!(pod["topologySpreadConstraints"][0]["topologyKey"], "topology.kubernetes.io/zone");
    let policy = &one(&on, "NetworkPolicy")["spec"];
    assert_eq!(policy["podSelector"]["matchLabels"], one(&on, "Deployment")["spec"]["selector"]["matchLabels"]);
    assert_eq!(policy["policyTypes"], json!(["Ingress", "Egress"]));
    // In: only the metrics port, only from the monitoring namespace.
    assert_eq!(
        policy["ingress"],
        json!([{"ports": [{"port": 9090, "protocol": "TCP"}], "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]}])
    );
    // Out: the API server, DNS, the brokers, nothing else.
    let egress = policy["egress"].as_array().unwrap();
    assert_eq!(egress.len(), 3, "{egress:?}");
    assert_eq!(
        egress[0],
        json!({"ports": [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}], "to": [{"ipBlock": {"cidr": "10.0.0.1/32"}}]})
    );
    assert_eq!(egress[1]["ports"], json!([{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]));
    assert_eq!(egress[2]["ports"], json!([{"port": 9092, "protocol": "TCP"}]));
}

/// The chart states the Kubernetes versions it supports: rendering for 1.32 fails naming
/// the constraint; for the tested 1.34.4 it renders.
#[test]
fn the_chart_refuses_a_kubernetes_older_than_its_client() {
    let old = template("deltaship", "deltaship", &["--kube-version", "1.32.9"]);
    let err = String::from_utf8_lossy(&old.stderr);
    assert!(!old.status.success() && err.contains(">=1.33.0-0"), "{err}");
    assert!(template("deltaship", "deltaship", &["--kube-version", "1.34.4"]).status.success());
}

/// `helm test`'s pod (rendered on its own: the other renders leave it out) runs `deltaship
/// check` on the release's config like the Deployment's pods run deltaship: same image,
/// ServiceAccount, environment, mounts, volumes and security contexts; and neither the
/// Service nor the PodDisruptionBudget selects it.
#[test]
fn the_helm_test_pod_checks_the_release_as_its_pods_run() {
    for extra in [&[][..], &["--set", "digestKeySecret.name=keys", "--set-json", r#"extraEnv=[{"name":"A","value":"b"}]"#][..]] {
        let chart_dir = chart();
        let mut args = vec!["template", "deltaship", &chart_dir, "--namespace", "deltaship", "--show-only", "templates/tests/check.yaml"];
        args.extend_from_slice(extra);
        let out = helm(&args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let test = &docs(&String::from_utf8(out.stdout).unwrap())[0];
        assert_eq!(test["metadata"]["annotations"]["helm.sh/hook"], "test");
        let deploy = one(&render("deltaship", "deltaship", extra), "Deployment")["spec"]["template"].clone();
        let (pod, runs) = (&test["spec"], &deploy["spec"]);
        let (check, container) = (&pod["containers"][0], &runs["containers"][0]);
        assert_eq!(check["args"], json!(["check", "--config", "/etc/deltaship/deltaship.yaml"]));
        for key in ["image", "imagePullPolicy", "env", "volumeMounts", "securityContext", "resources"] {
            assert_eq!(check[key], container[key], "{key} of the test pod's container ({extra:?})");
        }
        for key in ["serviceAccountName", "securityContext", "volumes", "enableServiceLinks"] {
            assert_eq!(pod[key], runs[key], "{key} of the test pod ({extra:?})");
        }
        assert_eq!(pod["restartPolicy"], "Never");
        let selector = deploy["metadata"]["labels"].as_object().unwrap();
        assert!(selector.iter().any(|(k, v)| test["metadata"]["labels"][k] != *v), "the Service would select the test pod: {}", test["metadata"]["labels"]);
    }
}

#[test]
fn the_deployment_is_hardened_and_probed() {
    let docs = render("deltaship", "deltaship", &[]);
    let deploy = one(&docs, "Deployment");
    assert_eq!(deploy["spec"]["replicas"], 2);
    let pod = &deploy["spec"]["template"]["spec"];
    // Service links would inject DELTASHIP_PORT & co., which deltaship rejects as config.
    assert_eq!(pod["enableServiceLinks"], false);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["securityContext"]["runAsUser"], 65532);
    let containers = pod["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1);
    let c = &containers[0];
    let sc = &c["securityContext"];
    assert_eq!(sc["runAsNonRoot"], true);
    assert_eq!(sc["runAsUser"], 65532);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
    assert_eq!(c["args"], json!(["run", "--config", "/etc/deltaship/deltaship.yaml"]));
    assert_eq!(c["ports"], json!([{"name": "http", "containerPort": 9090, "protocol": "TCP"}]));
    assert_eq!(c["livenessProbe"]["httpGet"], json!({"path": "/healthz", "port": "http"}));
    assert_eq!(c["readinessProbe"]["httpGet"], json!({"path": "/readyz", "port": "http"}));
    assert!(c["resources"]["requests"].is_object() && c["resources"]["limits"].is_object(), "{}", c["resources"]);
    let env = c["env"].as_array().unwrap();
    assert!(env.contains(&json!({"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}})), "{env:?}");
    // The config: the ConfigMap's deltaship.yaml at /etc/deltaship/deltaship.yaml.
    let mount = c["volumeMounts"].as_array().unwrap().iter().find(|m| m["mountPath"] == "/etc/deltaship").expect("config mount");
    let volume = pod["volumes"].as_array().unwrap().iter().find(|v| v["name"] == mount["name"]).unwrap();
    assert_eq!(volume["configMap"]["name"], one(&docs, "ConfigMap")["metadata"]["name"]);
    assert_eq!(pod["serviceAccountName"], one(&docs, "ServiceAccount")["metadata"]["name"]);
    // A changed config rolls the pods.
    let checksum = |docs: &[Value]| one(docs, "Deployment")["spec"]["template"]["metadata"]["annotations"]["checksum/config"].clone();
    assert!(checksum(&docs).as_str().is_some_and(|s| s.len() == 64), "{}", checksum(&docs));
    assert_ne!(checksum(&docs), checksum(&render("deltaship", "deltaship", &["--set", "config.cluster=prod"])));
    // The Service and the PodDisruptionBudget select these pods.
    let pod_labels = &deploy["spec"]["template"]["metadata"]["labels"];
    assert!(selects(&deploy["spec"]["selector"]["matchLabels"], pod_labels));
    let svc = one(&docs, "Service");
    assert!(selects(&svc["spec"]["selector"], pod_labels), "{svc}");
    assert_eq!(svc["spec"]["ports"], json!([{"name": "http", "port": 9090, "targetPort": "http", "protocol": "TCP"}]));
    let pdb = one(&docs, "PodDisruptionBudget");
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    assert!(selects(&pdb["spec"]["selector"]["matchLabels"], pod_labels), "{pdb}");
    // The port follows config.http.listen.
    let moved = render("deltaship", "deltaship", &["--set", "config.http.listen=0.0.0.0:8080"]);
    assert_eq!(one(&moved, "Deployment")["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"], 8080);
}

#[test]
fn the_service_monitor_selects_the_metrics_service() {
    let docs = render("deltaship", "deltaship", &["--set", "serviceMonitor.enabled=true"]);
    let sm = one(&docs, "ServiceMonitor");
    assert_eq!(sm["apiVersion"], "monitoring.coreos.com/v1");
    let svc = one(&docs, "Service");
    assert!(selects(&sm["spec"]["selector"]["matchLabels"], &svc["metadata"]["labels"]), "{sm}\n{svc}");
    assert_eq!(sm["spec"]["namespaceSelector"]["matchNames"], json!(["deltaship"]));
    let endpoints = sm["spec"]["endpoints"].as_array().unwrap();
    assert_eq!(endpoints.len(), 1);
    assert_eq!(endpoints[0]["port"], svc["spec"]["ports"][0]["name"]);
    assert_eq!(endpoints[0]["path"], "/metrics");
}

#[test]
fn the_rbac_grants_no_more_than_the_config_needs() {
    // Defaults: ConfigMaps, as values.yaml's rbac.resources.
    let docs = render("deltaship", "deltaship", &[]);
    let expected = default_rbac_resources();
    assert_eq!(expected, BTreeSet::from([(String::new(), "configmaps".to_owned())]));
    assert_cluster_role(&docs, &expected);
    let binding = one(&docs, "ClusterRoleBinding");
    assert_eq!(binding["roleRef"]["name"], one(&docs, "ClusterRole")["metadata"]["name"]);
    assert_eq!(binding["subjects"], json!([{"kind": "ServiceAccount", "name": one(&docs, "ServiceAccount")["metadata"]["name"], "namespace": "deltaship"}]));

    // Leader election: the Lease only, in the release namespace.
    let role = one(&docs, "Role");
    assert_eq!(role["metadata"]["namespace"], "deltaship");
    let mut verbs = BTreeSet::new();
    for rule in role["rules"].as_array().unwrap() {
        assert_eq!(strings(&rule["apiGroups"]), ["coordination.k8s.io"], "{rule}");
        assert_eq!(strings(&rule["resources"]), ["leases"], "{rule}");
        if rule.get("resourceNames").is_some() {
            assert_eq!(strings(&rule["resourceNames"]), ["deltaship"], "{rule}");
        }
        verbs.extend(strings(&rule["verbs"]));
    }
    assert_eq!(verbs, set(["create", "get", "update"]));
    assert_eq!(one(&docs, "RoleBinding")["roleRef"]["name"], role["metadata"]["name"]);
    let single = render("deltaship", "deltaship", &["--set", "config.leader_election.enabled=false"]);
    assert!(!kinds(&single).iter().any(|k| *k == "Role" || *k == "RoleBinding"), "{:?}", kinds(&single));

    // ConfigMaps and Deployments.
    let docs = render("deltaship", "deltaship", &TWO_RESOURCES);
    assert_cluster_role(&docs, &BTreeSet::from([(String::new(), "configmaps".to_owned()), ("apps".to_owned(), "deployments".to_owned())]));
    let (_, cfg) = rendered_config(&docs);
    assert_eq!(cfg.resources.len(), 2);

    // A watched group without RBAC does not render.
    let out = helm(&[
        "template",
        "deltaship",
        &chart(),
        "--set-json",
        r#"config.resources=[{"version":"v1","kind":"ConfigMap"},{"group":"apps","version":"v1","kind":"Deployment"}]"#,
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "rendered although rbac.resources lacks apps");
    assert!(err.contains("rbac.resources grants nothing in that group") && err.contains("Deployment"), "{err}");
}

// ---------------------------------------------------------------------------------------
// against the real API server

/// Every rendered object passes the API server's validation and admission (dryRun=All,
/// strict field validation): the defaults, the two-resource config, the hardening options
/// (NetworkPolicy, topology spread), and with the ServiceMonitor and PrometheusRule (skipped
/// only when their CRDs are not installed, as in the test environment).
#[tokio::test]
async fn every_rendered_object_passes_a_server_side_dry_run() {
    let client = support::kube::client().await;
    let ns = support::kube::namespace(&client, "deltaship").await;
    let mut extras: Vec<&[&str]> = vec![&[], &TWO_RESOURCES];
    extras.push(&["--set", "serviceMonitor.enabled=true", "--set", "prometheusRule.enabled=true", "--set", "grafanaDashboard.enabled=true"]);
    extras.push(&HARDENED);
    for extra in extras {
        let docs = render("deltaship", &ns, extra);
        for doc in &docs {
            if let Some(ns_of_doc) = doc["metadata"]["namespace"].as_str() {
                assert_eq!(ns_of_doc, ns, "{}", doc["metadata"]);
            }
        }
        let skipped = dry_run_all(&client, &docs, &format!("{extra:?}")).await;
        assert!(skipped.iter().all(|k| k == "ServiceMonitor" || k == "PrometheusRule"), "kinds the API server does not serve: {skipped:?}");
    }
    support::kube::delete_namespace(&client, &ns).await;
}

/// The chart's RBAC is enough: with the ServiceAccount, ClusterRole, Role and bindings
/// applied for real, deltaship runs the rendered config as that ServiceAccount, takes the
/// Lease and becomes ready (initial syncs of ConfigMaps and Deployments done), and the
/// ServiceAccount still may not read Secrets or change ConfigMaps.
#[tokio::test]
async fn deltaship_runs_with_the_charts_rbac() {
    let client = support::kube::client().await;
    let ns = support::kube::namespace(&client, "deltaship").await;
    // Release name = namespace name: the cluster-scoped names are unique to this run.
    let docs = render(&ns, &ns, &TWO_RESOURCES);
    create(&client, &docs, &["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"]).await;
    let sa_name = one(&docs, "ServiceAccount")["metadata"]["name"].as_str().unwrap().to_owned();
    let cluster_name = one(&docs, "ClusterRole")["metadata"]["name"].as_str().unwrap().to_owned();
    let (sa_kubeconfig, sa_client) = service_account_kubeconfig(&client, &ns, &sa_name).await;

    // Not more than needed, as the API server sees it.
    assert!(allowed(&sa_client, "watch", "", "configmaps", None).await);
    assert!(allowed(&sa_client, "list", "apps", "deployments", None).await);
    assert!(!allowed(&sa_client, "list", "", "secrets", None).await, "the ServiceAccount may list Secrets");
    assert!(!allowed(&sa_client, "update", "", "configmaps", None).await, "the ServiceAccount may update ConfigMaps");
    assert!(!allowed(&sa_client, "list", "apps", "replicasets", None).await, "the ServiceAccount may list ReplicaSets");

    // Enough: deltaship leads and is ready.
    let (config_file, _) = rendered_config(&docs);
    let kubeconfig = sa_kubeconfig.display().to_string();
    let mut bridge = Bridge::start_file(&config_file, &[("KUBECONFIG", &kubeconfig), ("POD_NAMESPACE", &ns)]);
    bridge.wait_leading(Duration::from_secs(60));
    let lease = Api::<Lease>::namespaced(client.clone(), &ns).get("deltaship").await.expect("the Lease in the release namespace");
    assert!(lease.spec.and_then(|s| s.holder_identity).is_some_and(|h| !h.is_empty()));
    drop(bridge);

    let _ = Api::<ClusterRoleBinding>::all(client.clone()).delete(&cluster_name, &DeleteParams::default()).await;
    let _ = Api::<ClusterRole>::all(client.clone()).delete(&cluster_name, &DeleteParams::default()).await;
    support::kube::delete_namespace(&client, &ns).await;
}

// ---------------------------------------------------------------------------------------
// the image and the compose file (not built or run here: no Docker engine)

/// The instructions of a Dockerfile: (INSTRUCTION, arguments), continuation lines joined.
fn dockerfile() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(root().join("deploy/Dockerfile")).unwrap();
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('#') || (t.is_empty() && current.is_empty()) {
            continue;
        }
        match t.strip_suffix('\\') {
            Some(part) => current.push_str(part),
            None => {
                current.push_str(t);
                let (ins, args) = current.split_once(char::is_whitespace).unwrap_or((&current, ""));
                out.push((ins.to_ascii_uppercase(), args.trim().to_owned()));
                current.clear();
            }
        }
    }
    out
}

#[test]
fn the_dockerfile_builds_in_one_stage_and_runs_as_non_root_in_another() {
    let ins = dockerfile();
    let stages: Vec<usize> = ins.iter().enumerate().filter(|(_, (i, _))| i == "FROM").map(|(n, _)| n).collect();
    assert_eq!(stages.len(), 2, "a builder and a runtime stage: {ins:?}");
    let (builder, runtime) = (&ins[stages[0] + 1..stages[1]], &ins[stages[1] + 1..]);
    let from = &ins[stages[0]].1;
    assert_eq!(from, "rust:1.95-bookworm AS build");
    // The builder's Rust is new enough for the crate.
    assert!((1, 95) >= rust_version(), "rust:1.95 is older than Cargo.toml's rust-version");
    let runs: Vec<&str> = builder.iter().filter(|(i, _)| i == "RUN").map(|(_, a)| a.as_str()).collect();
    assert!(runs.iter().any(|r| r.contains("apt-get install") && r.contains("libssl-dev") && r.contains("pkg-config")), "{runs:?}");
    assert!(runs.iter().any(|r| r.contains("cargo build --release --locked")), "{runs:?}");
    // A small build context: only the crate's manifest, lock file, build script and sources.
    for (i, args) in builder.iter().filter(|(i, _)| i == "COPY" || i == "ADD") {
        assert_eq!(i, "COPY", "{args}");
        let words: Vec<&str> = args.split_whitespace().filter(|w| !w.starts_with("--")).collect();
        for src in &words[..words.len() - 1] {
            assert!(["Cargo.toml", "Cargo.lock", "build.rs", "src"].contains(src), "the build copies {src}");
        }
    }

    assert_eq!(ins[stages[1]].1, "gcr.io/distroless/cc-debian12:nonroot");
    let last = |name: &str| runtime.iter().rev().find(|(i, _)| i == name).map(|(_, a)| a.clone());
    assert!(runtime.iter().any(|(i, a)| i == "COPY" && a.starts_with("--from=build ") && a.ends_with(" /usr/local/bin/deltaship")));
    // Non-root, numerically (runAsNonRoot can only verify a numeric user), as the chart runs it.
    let user = last("USER").expect("a USER in the runtime stage");
    let uid: u32 = user.split(':').next().unwrap().parse().expect("a numeric USER");
    assert_ne!(uid, 0);
    let chart = render("deltaship", "deltaship", &[]);
    let container = &one(&chart, "Deployment")["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["securityContext"]["runAsUser"], uid);
    let entrypoint: Value = serde_json::from_str(&last("ENTRYPOINT").unwrap()).expect("ENTRYPOINT in exec form");
    assert_eq!(entrypoint, json!(["/usr/local/bin/deltaship"]));
    // The default command is the chart's: run with the config where the chart mounts it.
    let cmd: Value = serde_json::from_str(&last("CMD").unwrap()).expect("CMD in exec form");
    assert_eq!(cmd, container["args"]);
}

/// Cargo.toml's rust-version as (major, minor).
fn rust_version() -> (u32, u32) {
    let text = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let line = text.lines().find(|l| l.starts_with("rust-version")).expect("rust-version in Cargo.toml");
    let mut parts = line.split('"').nth(1).unwrap().split('.').map(|p| p.parse::<u32>().unwrap());
    (parts.next().unwrap(), parts.next().unwrap())
}

fn env_of(service: &Value, name: &str) -> Option<String> {
    match &service["environment"] {
        Value::Object(map) => map.get(name).map(|v| v.as_str().map(str::to_owned).unwrap_or_else(|| v.to_string())),
        Value::Array(list) => list.iter().filter_map(|e| e.as_str()?.strip_prefix(&format!("{name}=")).map(str::to_owned)).next(),
        _ => None,
    }
}

/// (source, target) of a service's short-syntax volumes.
fn mounts(service: &Value) -> Vec<(String, String)> {
    service["volumes"]
        .as_array()
        .map(|v| {
            v.iter()
                .map(|m| {
                    let parts: Vec<&str> = m.as_str().expect("short volume syntax").split(':').collect();
                    (parts[0].to_owned(), parts[1].to_owned())
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn the_compose_file_fits_the_dockerfile_and_config_compose_toml() {
    // `docker compose config` would validate the file, but this machine's docker client has
    // no compose plugin: the file is parsed, and what must agree is checked.
    let compose = yaml_file("docker-compose.yml");
    let services = &compose["services"];
    for s in ["k3s", "kafka", "nats", "deltaship"] {
        assert!(services[s].is_object(), "service {s} missing");
    }
    let cfg = config::load(&root().join("config/compose.toml")).expect("config/compose.toml loads");

    let ds = &services["deltaship"];
    assert_eq!(ds["build"]["context"], ".");
    assert_eq!(ds["build"]["dockerfile"], "deploy/Dockerfile");
    assert!(root().join(ds["build"]["dockerfile"].as_str().unwrap()).is_file());
    let ds_mounts = mounts(ds);
    let config_target =
        ds_mounts.iter().find(|(src, _)| src == "./config/compose.toml").map(|(_, t)| t.clone()).expect("config/compose.toml mounted into deltaship");
    assert!(config_target.ends_with(".toml"), "deltaship picks the format by the extension: {config_target}");
    assert_eq!(ds["command"], json!(["run", "--config", config_target]));
    assert_eq!(ds["restart"], "on-failure");
    assert_eq!(ds["read_only"], true);
    for dep in ["k3s", "kafka"] {
        assert!(ds["depends_on"][dep].is_object(), "deltaship depends on {dep}");
    }

    // The API server: k3s writes the kubeconfig into a volume deltaship mounts at the same
    // place; it names https://127.0.0.1:6443, which is k3s's in its network namespace.
    let k3s = &services["k3s"];
    assert_eq!(k3s["privileged"], true);
    let args = strings(&k3s["command"]);
    assert_eq!(args[0], "server");
    assert!(args.windows(2).any(|w| w == ["--disable", "traefik"]) && args.windows(2).any(|w| w == ["--tls-san", "k3s"]), "{args:?}");
    let output = env_of(k3s, "K3S_KUBECONFIG_OUTPUT").expect("K3S_KUBECONFIG_OUTPUT");
    assert!(env_of(k3s, "K3S_KUBECONFIG_MODE").is_some());
    let kubeconfig = cfg.kubernetes.kubeconfig.as_ref().expect("kubernetes.kubeconfig in config/compose.toml");
    assert_eq!(Path::new(&output), kubeconfig);
    let dir = kubeconfig.parent().unwrap().to_str().unwrap();
    let volume = mounts(k3s).into_iter().find(|(_, t)| t == dir).map(|(s, _)| s).expect("the kubeconfig directory is a k3s volume");
    assert!(compose["volumes"].get(&volume).is_some(), "named volume {volume}");
    assert!(ds_mounts.contains(&(volume.clone(), dir.to_owned())), "deltaship mounts volume {volume} at {dir}");
    assert_eq!(ds["network_mode"], "service:k3s");
    // deltaship's HTTP port is published on k3s, whose network namespace it shares.
    let port = cfg.http.listen.port();
    assert_eq!(cfg.http.listen.to_string(), "0.0.0.0:9090");
    assert!(strings(&k3s["ports"]).contains(&format!("{port}:{port}")), "{}", k3s["ports"]);

    // Kafka: one KRaft node whose advertised listener is the broker address of the config.
    let kafka = &services["kafka"];
    let SinkConfig::Kafka(sink) = &cfg.effective_routes()[0].sink else { panic!("config/compose.toml ships to Kafka") };
    assert_eq!(sink.brokers, "kafka:9092");
    assert!(sink.create_topics.is_some());
    assert_eq!(env_of(kafka, "KAFKA_PROCESS_ROLES").as_deref(), Some("broker,controller"));
    assert!(env_of(kafka, "KAFKA_ADVERTISED_LISTENERS").unwrap().split(',').any(|l| l.ends_with("://kafka:9092")));
    let kinds: Vec<&str> = cfg.resources.iter().map(|r| r.kind.as_str()).collect();
    assert_eq!(kinds, ["ConfigMap", "Deployment"]);

    assert!(strings(&services["nats"]["command"]).contains(&"-js".to_owned()));
}

#[test]
fn the_digest_key_is_mounted_from_the_named_secret() {
    let deployment = |extra: &[&str]| one(&render("deltaship", "deltaship", extra), "Deployment")["spec"]["template"]["spec"].clone();
    let pod = deployment(&["--set", "digestKeySecret.name=deltaship-digest-key", "--set", "digestKeySecret.key=k"]);
    let c = &pod["containers"][0];
    let env = c["env"].as_array().unwrap();
    let file = env.iter().find(|e| e["name"] == "DELTASHIP_REDACTION__DIGEST_KEY_FILE").expect("the key file setting")["value"].as_str().unwrap();
    let mount = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| file.starts_with(&format!("{}/", m["mountPath"].as_str().unwrap())))
        .expect("a mount holding the key file");
    assert_eq!(mount["readOnly"], true);
    let volume = pod["volumes"].as_array().unwrap().iter().find(|v| v["name"] == mount["name"]).unwrap();
    let path = &file[mount["mountPath"].as_str().unwrap().len() + 1..];
    assert_eq!(volume["secret"], json!({"secretName": "deltaship-digest-key", "items": [{"key": "k", "path": path}]}));
    // Without a Secret named, nothing of it.
    let default = deployment(&[]).to_string();
    assert!(!default.contains("DIGEST_KEY") && !default.contains("digest-key"), "{default}");
}
