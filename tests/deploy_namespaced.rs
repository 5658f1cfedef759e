//! The chart's namespaced RBAC mode (`rbac.scope: namespaced`): a Role + RoleBinding in
//! each namespace of config.resources[].namespaces granting only what is watched there, no
//! ClusterRole, a clear render failure for a resource without namespaces, and deltaship
//! running with exactly those Roles against the real API server.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use support::bridge::Bridge;
use support::chart::{all, allowed, chart, create, dry_run_all, helm, kinds, one, read_grants, render, rendered_config, service_account_kubeconfig, template};
use support::kube::{delete_namespace, eventually, namespace};

const NAMESPACED: [&str; 2] = ["--set", "rbac.scope=namespaced"];

/// `rbac.scope=namespaced` with `config.resources` and `rbac.resources` set from JSON.
fn namespaced(resources: &Value, rbac: &Value) -> Vec<String> {
    let mut args: Vec<String> = NAMESPACED.map(String::from).into();
    args.extend(["--set-json".into(), format!("config.resources={resources}")]);
    args.extend(["--set-json".into(), format!("rbac.resources={rbac}")]);
    args
}

fn refs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

fn grants(entries: &[(&str, &str)]) -> BTreeSet<(String, String)> {
    entries.iter().map(|(g, r)| (g.to_string(), r.to_string())).collect()
}

/// The Role of `namespace` and what it grants; asserts its RoleBinding binds it to the
/// chart's ServiceAccount.
fn role_in<'a>(docs: &'a [Value], namespace: &str) -> BTreeSet<(String, String)> {
    let in_ns = |kind: &str| -> Vec<&'a Value> { all(docs, kind).into_iter().filter(|d| d["metadata"]["namespace"] == namespace).collect() };
    let (roles, bindings) = (in_ns("Role"), in_ns("RoleBinding"));
    assert_eq!((roles.len(), bindings.len()), (1, 1), "one Role and RoleBinding in {namespace}: {:?}", kinds(docs));
    let sa = &one(docs, "ServiceAccount")["metadata"];
    assert_eq!(bindings[0]["roleRef"], json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": roles[0]["metadata"]["name"]}));
    assert_eq!(bindings[0]["subjects"], json!([{"kind": "ServiceAccount", "name": sa["name"], "namespace": sa["namespace"]}]));
    read_grants(roles[0]["rules"].as_array().unwrap())
}

/// helm template's error for `extra`, which must fail.
fn render_error(extra: &[&str]) -> String {
    let out = template("deltaship", "deltaship", extra);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "rendered although it must fail ({extra:?}):\n{}", String::from_utf8_lossy(&out.stdout));
    err
}

#[test]
fn namespaced_rbac_grants_each_namespace_only_what_is_watched_there_and_no_cluster_role() {
    let resources = json!([
        {"version": "v1", "kind": "ConfigMap", "namespaces": ["shop", "blog"]},
        {"group": "apps", "version": "v1", "kind": "Deployment", "namespaces": ["shop"]},
        {"version": "v1", "kind": "Secret", "namespaces": ["blog"]},
    ]);
    let rbac = json!([
        {"group": "", "resource": "configmaps"},
        {"group": "apps", "resource": "deployments"},
        {"group": "", "kind": "Secret", "resource": "secrets"},
        {"group": "batch", "resource": "jobs"},
    ]);
    let args = namespaced(&resources, &rbac);
    let docs = render("deltaship", "deltaship", &refs(&args));
    let found = kinds(&docs);
    assert!(!found.contains(&"ClusterRole") && !found.contains(&"ClusterRoleBinding"), "{found:?}");
    // Secrets (limited by `kind`) only where Secrets are watched; Jobs nowhere.
    assert_eq!(role_in(&docs, "shop"), grants(&[("", "configmaps"), ("apps", "deployments")]));
    assert_eq!(role_in(&docs, "blog"), grants(&[("", "configmaps"), ("", "secrets")]));
    // Besides, the leader election Role in the release namespace, as in the cluster mode.
    let others: Vec<&Value> = all(&docs, "Role").into_iter().filter(|r| !["shop", "blog"].contains(&r["metadata"]["namespace"].as_str().unwrap())).collect();
    assert_eq!(others.len(), 1, "{found:?}");
    assert_eq!(others[0]["metadata"], json!({"name": "deltaship-leader-election", "namespace": "deltaship", "labels": others[0]["metadata"]["labels"]}));
    let (_, cfg) = rendered_config(&docs);
    assert_eq!(cfg.resources[0].namespaces, ["shop", "blog"]);

    let chart = chart();
    let mut lint = vec!["lint", "--strict", &chart];
    lint.extend(refs(&args));
    let out = helm(&lint);
    assert!(out.status.success(), "helm {lint:?} failed:\n{}", String::from_utf8_lossy(&out.stdout));
}

#[test]
fn namespaced_rbac_fails_to_render_what_a_role_cannot_grant() {
    // The default config watches ConfigMaps in all namespaces: only a ClusterRole grants that.
    let err = render_error(&NAMESPACED);
    assert!(
        err.contains("rbac.scope is namespaced, but config.resources[0] (kind ConfigMap) has no namespaces")
            && err.contains("config.resources[0].namespaces")
            && err.contains("rbac.scope=cluster"),
        "{err}"
    );
    // A resource watched in a namespace with nothing granted for its kind there.
    let resources = json!([{"version": "v1", "kind": "ConfigMap", "namespaces": ["shop"]}, {"version": "v1", "kind": "Secret", "namespaces": ["blog"]}]);
    let rbac = json!([{"group": "", "kind": "ConfigMap", "resource": "configmaps"}]);
    let err = render_error(&refs(&namespaced(&resources, &rbac)));
    assert!(err.contains("config.resources[1] watches kind Secret of group \"\" in namespace blog, but rbac.resources grants nothing for it"), "{err}");
    // The chart's values.schema.json refuses another scope before the template does.
    let err = render_error(&["--set", "rbac.scope=namespace"]);
    assert!(err.contains("at '/rbac/scope': value must be one of 'cluster', 'namespaced'"), "{err}");
}

/// Events on stdout whose subject is in `namespace`, as (type, subject).
fn events_in(bridge: &Bridge, namespace: &str) -> BTreeSet<(String, String)> {
    bridge
        .lines()
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).expect("one JSON event per line"))
        .filter_map(|e| Some((e["type"].as_str()?.to_owned(), e["subject"].as_str()?.to_owned())))
        .filter(|(_, subject)| subject.starts_with(&format!("{namespace}/")))
        .collect()
}

async fn config_map(client: &Client, namespace: &str, name: &str) {
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), namespace).create(&PostParams::default(), &cm).await.unwrap();
}

/// The namespaced render passes the API server's dry run; applied for real, its Roles let
/// deltaship (as the chart's ServiceAccount, nothing cluster-wide granted) sync and ship
/// the ConfigMaps of the two watched namespaces, and nothing else; a config that also
/// watches a third namespace fails at start-up naming it.
#[tokio::test(flavor = "multi_thread")]
async fn deltaship_runs_with_only_the_roles_of_its_namespaces() {
    let client = support::kube::client().await;
    let release = namespace(&client, "deltaship").await;
    let (a, b, c) = (namespace(&client, "ds-a").await, namespace(&client, "ds-b").await, namespace(&client, "ds-c").await);
    for ns in [&a, &b, &c] {
        config_map(&client, ns, "before").await;
    }
    let resources = json!([{"version": "v1", "kind": "ConfigMap", "namespaces": [a, b]}]);
    let args = namespaced(&resources, &json!([{"group": "", "resource": "configmaps"}]));
    let docs = render(&release, &release, &refs(&args));
    assert!(!kinds(&docs).contains(&"ClusterRole"), "{:?}", kinds(&docs));
    let skipped = dry_run_all(&client, &docs, "rbac.scope=namespaced").await;
    assert!(skipped.is_empty(), "kinds the API server does not serve: {skipped:?}");

    create(&client, &docs, &["ServiceAccount", "Role", "RoleBinding"]).await;
    let sa = one(&docs, "ServiceAccount")["metadata"]["name"].as_str().unwrap().to_owned();
    let (kubeconfig, sa_client) = service_account_kubeconfig(&client, &release, &sa).await;
    // The API server's authorizer sees new RBAC objects through an informer: poll.
    eventually(Duration::from_secs(30), "the Roles to take effect", || {
        let (sa_client, a, b) = (sa_client.clone(), a.clone(), b.clone());
        async move {
            (allowed(&sa_client, "watch", "", "configmaps", Some(&a)).await && allowed(&sa_client, "watch", "", "configmaps", Some(&b)).await).then_some(())
        }
    })
    .await;
    assert!(!allowed(&sa_client, "list", "", "configmaps", Some(&c)).await, "the ServiceAccount may list ConfigMaps in {c}");
    assert!(!allowed(&sa_client, "list", "", "configmaps", None).await, "the ServiceAccount may list ConfigMaps in all namespaces");
    assert!(!allowed(&sa_client, "list", "", "secrets", Some(&a)).await, "the ServiceAccount may list Secrets in {a}");

    let (config_file, _) = rendered_config(&docs);
    let kubeconfig = kubeconfig.display().to_string();
    let envs = [("KUBECONFIG", kubeconfig.as_str()), ("POD_NAMESPACE", release.as_str())];
    let mut bridge = Bridge::start_file(&config_file, &envs);
    bridge.wait_leading(Duration::from_secs(60));
    config_map(&client, &b, "after").await;
    // The initial sync of each namespace, then a live change (beside kube-root-ca.crt,
    // which the controller-manager puts in every namespace).
    let event = |ty: &str, ns: &str, name: &str| (format!("dev.deltaship.object.{ty}"), format!("{ns}/{name}"));
    let want_a = BTreeSet::from([event("synced", &a, "before")]);
    let want_b = BTreeSet::from([event("synced", &b, "before"), event("added", &b, "after")]);
    eventually(Duration::from_secs(30), "the events of both namespaces", || {
        let done = events_in(&bridge, &a).is_superset(&want_a) && events_in(&bridge, &b).is_superset(&want_b);
        async move { done.then_some(()) }
    })
    .await;
    assert!(events_in(&bridge, &c).is_empty(), "shipped from the unwatched {c}");
    assert!(bridge.stop(Duration::from_secs(30)).success());

    // The same config watching a third namespace as well: no Role there, a start-up error.
    let text = std::fs::read_to_string(&config_file).unwrap();
    let mut config: Value = serde_saphyr::from_str(&text).unwrap();
    config["resources"][0]["namespaces"].as_array_mut().unwrap().push(c.clone().into());
    std::fs::write(&config_file, serde_saphyr::to_string(&config).unwrap()).unwrap();
    let mut bridge = Bridge::start_file(&config_file, &envs);
    let status = bridge.wait_exit(Duration::from_secs(60));
    let log = bridge.log_text();
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(log.contains(&format!("not allowed to list configmaps in namespace {c}")), "{log}");
    assert!(bridge.lines().is_empty(), "nothing is shipped before the failure: {:?}", bridge.lines());

    for ns in [&release, &a, &b, &c] {
        delete_namespace(&client, ns).await;
    }
}
