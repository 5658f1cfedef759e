//! The Helm chart (deploy/helm/deltaship): renders with the pinned helm, rendered objects
//! against the real API server, and a kubeconfig for the chart's ServiceAccount.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use deltaship::config;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Client;
use kube::api::{Api, DynamicObject, GroupVersionKind, PostParams};
use kube::discovery::Scope;
use serde_json::{Value, json};

pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

pub fn chart() -> String {
    root().join("deploy/helm/deltaship").display().to_string()
}

pub fn helm(args: &[&str]) -> std::process::Output {
    let bin = super::var("DELTASHIP_TEST_HELM");
    Command::new(&bin).args(args).output().unwrap_or_else(|e| panic!("run {bin}: {e}"))
}

/// `helm template RELEASE <chart> --namespace NAMESPACE EXTRA...`, which must succeed.
pub fn render_text(release: &str, namespace: &str, extra: &[&str]) -> String {
    let out = template(release, namespace, extra);
    assert!(out.status.success(), "helm template {extra:?} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// `helm template RELEASE <chart> --namespace NAMESPACE --skip-tests EXTRA...` (what an
/// install creates: `helm test`'s pod is rendered on its own), as it went.
pub fn template(release: &str, namespace: &str, extra: &[&str]) -> std::process::Output {
    let chart = chart();
    let mut args = vec!["template", release, &chart, "--namespace", namespace, "--skip-tests"];
    args.extend_from_slice(extra);
    helm(&args)
}

/// The documents of a multi-document YAML stream, empty ones left out.
pub fn docs(yaml: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(yaml).expect("rendered YAML parses").into_iter().filter(|v| !v.is_null()).collect()
}

pub fn render(release: &str, namespace: &str, extra: &[&str]) -> Vec<Value> {
    docs(&render_text(release, namespace, extra))
}

pub fn kinds(docs: &[Value]) -> Vec<&str> {
    docs.iter().map(|d| d["kind"].as_str().unwrap()).collect()
}

/// The documents of `kind`.
pub fn all<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

/// The one document of `kind`.
pub fn one<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let found = all(docs, kind);
    assert_eq!(found.len(), 1, "expected one {kind}, found {} in {:?}", found.len(), kinds(docs));
    found[0]
}

pub fn strings(v: &Value) -> Vec<String> {
    v.as_array().unwrap_or_else(|| panic!("not a list: {v}")).iter().map(|s| s.as_str().unwrap().to_owned()).collect()
}

pub fn name_of(doc: &Value) -> String {
    format!("{}/{}", doc["kind"].as_str().unwrap(), doc["metadata"]["name"].as_str().unwrap())
}

pub fn scratch_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(super::unique("deltaship-deploy"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The deltaship.yaml of the rendered ConfigMap, written to a file, loaded as deltaship does.
pub fn rendered_config(docs: &[Value]) -> (PathBuf, config::Config) {
    let text = one(docs, "ConfigMap")["data"]["deltaship.yaml"].as_str().expect("ConfigMap key deltaship.yaml");
    let path = scratch_dir().join("deltaship.yaml");
    std::fs::write(&path, text).unwrap();
    let cfg = config::load(&path).unwrap_or_else(|e| panic!("the rendered config does not load: {e}\n{text}"));
    (path, cfg)
}

/// The API of a rendered object, resolved through discovery; None when the server does not
/// serve its kind (a CRD that is not installed).
pub async fn api_for(client: &Client, doc: &Value) -> Option<Api<DynamicObject>> {
    let api_version = doc["apiVersion"].as_str().unwrap();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, doc["kind"].as_str().unwrap());
    let (ar, caps) = kube::discovery::pinned_kind(client, &gvk).await.ok()?;
    Some(match caps.scope {
        Scope::Namespaced => {
            let ns = doc["metadata"]["namespace"]
                .as_str()
                .unwrap_or_else(|| panic!("namespaced object without a namespace (kubectl apply -f would use the current one): {doc}"));
            Api::namespaced_with(client.clone(), ns, &ar)
        }
        Scope::Cluster => Api::all_with(client.clone(), &ar),
    })
}

/// POSTs `doc` with dryRun=All and fieldValidation=Strict, as `kubectl apply
/// --dry-run=server` does: validation and admission run, nothing is stored, and an unknown
/// or duplicate field (a typo in a template) is an error. kube's `Api::create` leaves
/// fieldValidation to the server's default, which only warns, hence the request by hand.
async fn dry_run_create(client: &Client, api: &Api<DynamicObject>, doc: &Value) -> kube::Result<DynamicObject> {
    let dry_run = PostParams { dry_run: true, field_manager: None };
    let mut req = kube::core::Request::new(api.resource_url()).create(&dry_run, serde_json::to_vec(doc).unwrap()).unwrap();
    let uri = format!("{}&fieldValidation=Strict", req.uri());
    assert!(uri.contains("dryRun=All&"), "{uri}");
    *req.uri_mut() = uri.parse().unwrap();
    client.request(req).await
}

/// Sends every document as a server-side dry run (`dry_run_create`), which must pass and
/// store nothing; returns the kinds the API server does not serve (skipped).
pub async fn dry_run_all(client: &Client, docs: &[Value], what: &str) -> Vec<String> {
    let mut skipped = Vec::new();
    for doc in docs {
        let Some(api) = api_for(client, doc).await else {
            skipped.push(doc["kind"].as_str().unwrap().to_owned());
            continue;
        };
        let created = dry_run_create(client, &api, doc).await.unwrap_or_else(|e| panic!("the API server rejects {} ({what}): {e}", name_of(doc)));
        assert_eq!(created.metadata.name.as_deref(), doc["metadata"]["name"].as_str());
        // Dry run: nothing was stored.
        assert!(api.get_opt(doc["metadata"]["name"].as_str().unwrap()).await.unwrap().is_none(), "{} exists", name_of(doc));
    }
    skipped
}

/// Creates the documents of `kinds` for real, as the admin.
pub async fn create(client: &Client, docs: &[Value], kinds: &[&str]) {
    for doc in docs.iter().filter(|d| kinds.contains(&d["kind"].as_str().unwrap())) {
        let api = api_for(client, doc).await.unwrap();
        let obj: DynamicObject = serde_json::from_value(doc.clone()).unwrap();
        api.create(&PostParams::default(), &obj).await.unwrap_or_else(|e| panic!("create {}: {e}", name_of(doc)));
    }
}

/// A kubeconfig for ServiceAccount `namespace/name` (the admin's, with a bound token
/// instead), written to a file, and a client with it.
pub async fn service_account_kubeconfig(client: &Client, namespace: &str, name: &str) -> (PathBuf, Client) {
    service_account_kubeconfig_from(client, namespace, name, &super::env().kubeconfig).await
}

/// As `service_account_kubeconfig`, from the admin kubeconfig at `admin` (e.g. the HA
/// control plane's, through its load balancer).
pub async fn service_account_kubeconfig_from(client: &Client, namespace: &str, name: &str, admin: &str) -> (PathBuf, Client) {
    let token = Api::<ServiceAccount>::namespaced(client.clone(), namespace)
        .create_token_request(
            name,
            &PostParams::default(),
            &TokenRequest { spec: TokenRequestSpec { expiration_seconds: Some(600), ..Default::default() }, ..Default::default() },
        )
        .await
        .expect("a token for the chart's ServiceAccount")
        .status
        .unwrap()
        .token;
    let admin = std::fs::read_to_string(admin).unwrap_or_else(|e| panic!("{admin}: {e}"));
    let mut kubeconfig: Value = serde_saphyr::from_str(&admin).unwrap();
    kubeconfig["users"] = json!([{"name": "sa", "user": {"token": token}}]);
    for ctx in kubeconfig["contexts"].as_array_mut().unwrap() {
        ctx["context"]["user"] = "sa".into();
    }
    let path = scratch_dir().join("sa.kubeconfig");
    std::fs::write(&path, serde_saphyr::to_string(&kubeconfig).unwrap()).unwrap();
    let sa_client = Client::try_from(
        kube::Config::from_custom_kubeconfig(kube::config::Kubeconfig::read_from(&path).unwrap(), &kube::config::KubeConfigOptions::default()).await.unwrap(),
    )
    .unwrap();
    (path, sa_client)
}

/// Whether the API server allows `client`'s identity to `verb` the `resource` of `group`,
/// in `namespace` (None: in all namespaces), as a SelfSubjectAccessReview answers.
pub async fn allowed(client: &Client, verb: &str, group: &str, resource: &str, namespace: Option<&str>) -> bool {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some(group.into()),
                resource: Some(resource.into()),
                verb: Some(verb.into()),
                namespace: namespace.map(str::to_owned),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    api.create(&PostParams::default(), &review).await.unwrap().status.unwrap().allowed
}

/// {(group, resource)} that RBAC `rules` grant; asserts that each grants exactly get, list
/// and watch, on named groups and resources (no wildcards, no non-resource URLs).
pub fn read_grants(rules: &[Value]) -> BTreeSet<(String, String)> {
    let read: BTreeSet<String> = ["get", "list", "watch"].map(String::from).into();
    let mut granted = BTreeSet::new();
    for rule in rules {
        let groups = strings(&rule["apiGroups"]);
        let resources = strings(&rule["resources"]);
        let verbs: BTreeSet<String> = strings(&rule["verbs"]).into_iter().collect();
        assert!(rule.get("nonResourceURLs").is_none() && rule.get("resourceNames").is_none(), "{rule}");
        assert!(!groups.contains(&"*".into()) && !resources.contains(&"*".into()), "wildcard in {rule}");
        assert_eq!(verbs, read, "not exactly get, list and watch: {rule}");
        for g in &groups {
            for r in &resources {
                granted.insert((g.clone(), r.clone()));
            }
        }
    }
    granted
}
