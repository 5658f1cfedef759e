//! Readiness with a watch that keeps failing: the watched CRD is deleted mid-run, /readyz
//! turns 503 naming the watch within `kubernetes.watch_failure_grace_secs`, and 200 again
//! once the CRD is back and the watch lists again.

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use support::bridge::Bridge;
use support::config::{TestConfig, resource};
use support::kube::{client, delete_namespace, eventually, namespace};

const GRACE_SECS: u64 = 3;

async fn create_crd(crds: &Api<CustomResourceDefinition>, crd: &CustomResourceDefinition, name: &str) {
    crds.create(&PostParams::default(), crd).await.expect("create the CRD");
    eventually(Duration::from_secs(30), "the CRD to be established", || {
        let crds = crds.clone();
        async move {
            let c = crds.get(name).await.ok()?;
            c.status?.conditions?.iter().any(|c| c.type_ == "Established" && c.status == "True").then_some(())
        }
    })
    .await;
}

/// Polls /readyz until `want` says yes; returns the body and when it was seen.
fn wait_readyz(bridge: &Bridge, timeout: Duration, want: impl Fn(u16, &str) -> bool) -> (String, Instant) {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some((status, body)) = bridge.get("/readyz")
            && want(status, &body)
        {
            return (body, Instant::now());
        }
        assert!(Instant::now() < deadline, "/readyz not as wanted within {timeout:?}; last {:?}\n{}", bridge.get("/readyz"), bridge.log_text());
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_watch_failing_longer_than_the_grace_makes_readyz_503_until_it_recovers() {
    support::env();
    let kube = client().await;
    let group = format!("{}.deltaship.dev", support::unique("ready"));
    let name = format!("gadgets.{group}");
    let crds: Api<CustomResourceDefinition> = Api::all(kube.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "group": group,
            "names": {"kind": "Gadget", "plural": "gadgets", "singular": "gadget"},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    }))
    .unwrap();
    create_crd(&crds, &crd, &name).await;
    let ns = namespace(&kube, "it-ready").await;
    let config = TestConfig::new().resource(resource(&group, "Gadget", &[&ns])).toml();
    let grace = GRACE_SECS.to_string();
    let mut bridge = Bridge::start_with_env(&config, &[("DELTASHIP_KUBERNETES__WATCH_FAILURE_GRACE_SECS", &grace)]);
    bridge.wait_ready(Duration::from_secs(60));

    crds.delete(&name, &DeleteParams::default()).await.expect("delete the CRD");
    let deleted = Instant::now();
    let (body, unready) = wait_readyz(&bridge, Duration::from_secs(60), |status, _| status == 503);
    let watch = format!("watch of gadgets.{group} in {ns} failing for");
    assert!(body.contains(&watch) && body.contains("(last error: not_found)"), "{body}");
    // Not before the grace: the first error comes at most when the deletion ends the watch.
    assert!(unready - deleted >= Duration::from_secs(GRACE_SECS), "503 after {:?}, grace {GRACE_SECS}s", unready - deleted);
    let errors = bridge.get("/metrics").unwrap().1;
    assert!(errors.lines().any(|l| l.starts_with("deltaship_watch_errors_total{") && l.contains("error_kind=\"not_found\"")), "{errors}");

    // Back: the CRD returns; the watch lists again (within its backoff, at most 30 s).
    eventually(Duration::from_secs(60), "the old CRD to be gone", || {
        let crds = crds.clone();
        let name = name.clone();
        async move { crds.get_opt(&name).await.ok()?.is_none().then_some(()) }
    })
    .await;
    create_crd(&crds, &crd, &name).await;
    wait_readyz(&bridge, Duration::from_secs(60), |status, _| status == 200);
    assert_eq!(bridge.get("/healthz").map(|(s, _)| s), Some(200), "a failing watch never fails liveness");
    drop(bridge);
    let _ = crds.delete(&name, &DeleteParams::default()).await;
    delete_namespace(&kube, &ns).await;
}
