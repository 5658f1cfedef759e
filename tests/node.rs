//! The test node (tests/env/node): pods run on a real kubelet, containerd and runc joined to
//! the test API server. A container runs from an image containerd holds, `logs` and `exec`
//! work through the API server, a failing liveness probe restarts a container, and deltaship
//! installs as a user installs it: deploy/release (of this test build's binary) pushes the
//! image and the chart to the test registry, `helm install oci://...` installs the chart from
//! there, containerd pulls the image from there, and two pods come to Ready under the chart's
//! security context, one of them leading and shipping a ConfigMap's events to the test Kafka
//! broker (its listener for pods), where the host reads them and rebuilds the API server's
//! state.
//!
//! Needs `tests/env/up node kafka` (root: the node changes the host until tests/env/down; it
//! brings up the registry too).

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::churn::metric;
use support::kube::{delete_namespace, eventually, namespace};
use support::node::{
    container_status, helm_test, install, kubectl, kubectl_ok, leader_among, metrics, names, node_client, pod_processes, release, report, uninstall,
};
use support::state::assert_rebuild_matches;

/// A pod of the test busybox image running `script` with `sh -c`, plus `extra` merged into
/// its container.
fn busybox_pod(name: &str, script: &str, extra: Value) -> Pod {
    let mut container = json!({
        "name": "main",
        "image": support::var("DELTASHIP_TEST_NODE_BUSYBOX_IMAGE"),
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", script],
    });
    container.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"containers": [container], "terminationGracePeriodSeconds": 1},
    }))
    .unwrap()
}

/// The pod `name` once its container runs; after 90 s, a failure with what explains it.
async fn wait_running(pods: &Api<Pod>, ns: &str, name: &str) -> Pod {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if let Ok(pod) = pods.get(name).await
            && container_status(&pod).and_then(|s| s.state.as_ref()).is_some_and(|s| s.running.is_some())
        {
            return pod;
        }
        assert!(Instant::now() < deadline, "pod {name} not running after 90 s:\n{}", report(ns));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn a_pod_runs_and_its_logs_and_exec_work_through_the_api_server() {
    let client = node_client().await;
    let ns = namespace(&client, "node-pod").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod = busybox_pod("hello", "echo hello from the node; exec sleep 600", json!({}));
    pods.create(&PostParams::default(), &pod).await.unwrap();

    let running = wait_running(&pods, &ns, "hello").await;
    assert_eq!(running.spec.unwrap().node_name.as_deref(), Some("localhost"), "scheduled to the test node");
    assert!(running.status.unwrap().pod_ip.unwrap().starts_with("10.244.0."), "an address of the node's pod bridge");

    // logs: the API server proxies to the kubelet (by the node name localhost).
    let logs = eventually(Duration::from_secs(30), "the pod's log", || async {
        let out = kubectl(&["logs", "-n", &ns, "hello"]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        (out.status.success() && text.contains("hello from the node")).then_some(text)
    })
    .await;
    assert_eq!(logs.trim(), "hello from the node");

    // exec: a command inside the container, its output and exit code back through the API server.
    let out = kubectl_ok(&["exec", "-n", &ns, "hello", "--", "sh", "-c", "echo $((6 * 7)) $(id -u)"]);
    assert_eq!(out.trim(), "42 0");
    let failed = kubectl(&["exec", "-n", &ns, "hello", "--", "sh", "-c", "exit 3"]);
    assert_eq!(failed.status.code(), Some(3), "exec returns the command's exit code");

    // The `kubernetes` Service: pods reach the API server at its ClusterIP (the host's DNAT).
    let host = kubectl_ok(&["exec", "-n", &ns, "hello", "--", "sh", "-c", "echo $KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT"]);
    assert_eq!(host.trim(), "10.96.0.1:443");
    // busybox wget does not check certificates; the deltaship pods below do (rustls, the IP SAN).
    let livez = kubectl_ok(&["exec", "-n", &ns, "hello", "--", "wget", "-q", "-O-", "--no-check-certificate", "https://10.96.0.1/livez"]);
    assert_eq!(livez, "ok");
    // The servers on the host's 127.0.0.1 (here the registry) at the node's host address.
    let port = support::var("DELTASHIP_TEST_REGISTRY").rsplit(':').next().unwrap().to_owned();
    let url = format!("http://{}:{port}/v2/", support::var("DELTASHIP_TEST_NODE_HOST_IP"));
    assert_eq!(kubectl_ok(&["exec", "-n", &ns, "hello", "--", "wget", "-q", "-O-", &url]), "{}");

    delete_namespace(&client, &ns).await;
}

#[tokio::test]
async fn a_failing_liveness_probe_restarts_the_container() {
    let client = node_client().await;
    let ns = namespace(&client, "node-probe").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    // Healthy for its first 2 s, then the probe's file is gone.
    let probe = json!({"livenessProbe": {
        "exec": {"command": ["cat", "/tmp/healthy"]},
        "periodSeconds": 1, "failureThreshold": 2, "timeoutSeconds": 1,
    }});
    let pod = busybox_pod("probed", "echo started; touch /tmp/healthy; sleep 2; rm /tmp/healthy; exec sleep 600", probe);
    pods.create(&PostParams::default(), &pod).await.unwrap();
    wait_running(&pods, &ns, "probed").await;

    let restarted = eventually(Duration::from_secs(90), "a restart by the liveness probe", || async {
        let pod = pods.get("probed").await.ok()?;
        let status = container_status(&pod)?;
        (status.restart_count >= 1 && status.state.as_ref()?.running.is_some()).then(|| status.clone())
    })
    .await;
    let last = restarted.last_state.unwrap().terminated.expect("the killed container's termination");
    assert_eq!(last.exit_code, 137, "killed (SIGKILL after the probe failed), not exited: {last:?}");
    let events = kubectl_ok(&["get", "events", "-n", &ns, "--field-selector", "involvedObject.name=probed", "-o", "json"]);
    assert!(events.contains("Liveness probe failed"), "the kubelet reports the probe: {events}");

    delete_namespace(&client, &ns).await;
}

fn status_field<'a>(status: &'a str, field: &str) -> &'a str {
    status.lines().find_map(|l| l.strip_prefix(field)).unwrap_or_else(|| panic!("no {field} in {status}")).trim()
}

/// README's install command, the chart's sink set to the test broker's listener for pods: the
/// leader ships the release namespace's ConfigMaps to Kafka, read back from the host.
#[tokio::test]
async fn a_release_installed_from_the_registry_runs_two_ready_pods_with_one_leader_shipping_to_kafka() {
    let client = node_client().await;
    let release = release();
    let ns = namespace(&client, "node-helm").await;
    let cluster = support::unique("c");
    let sink = json!({"type": "kafka", "brokers": support::var("DELTASHIP_TEST_KAFKA_PODS"), "create_topics": {}});
    let resources = json!([{"group": "", "version": "v1", "kind": "ConfigMap", "namespaces": [ns]}]);
    let (sink, resources, cluster_value) = (format!("config.sink={sink}"), format!("config.resources={resources}"), format!("config.cluster={cluster}"));
    let pods = install(release, &ns, &["--set-json", &sink, "--set-json", &resources, "--set", &cluster_value]);
    let names = names(&pods);
    for pod in &pods {
        let ready = pod.status.as_ref().unwrap().conditions.as_ref().unwrap().iter().any(|c| c.type_ == "Ready" && c.status == "True");
        assert!(ready, "{:?} is not Ready", pod.metadata.name);
        // The image containerd pulled from the registry: the pushed manifest, by its digest.
        let status = container_status(pod).unwrap();
        assert_eq!(status.image, format!("{}:{}", release.repository, release.version));
        assert_eq!(status.image_id, format!("{}@{}", release.repository, release.image_digest));
        let sc = pod.spec.as_ref().unwrap().containers[0].security_context.clone().unwrap();
        assert_eq!((sc.run_as_user, sc.read_only_root_filesystem, sc.allow_privilege_escalation), (Some(65532), Some(true), Some(false)));
    }

    let events: Value = serde_json::from_str(&kubectl_ok(&["get", "events", "-n", &ns, "-o", "json"])).unwrap();
    let pulled = format!("Successfully pulled image \"{}:{}\"", release.repository, release.version);
    let messages: Vec<&str> = events["items"].as_array().unwrap().iter().filter_map(|e| e["message"].as_str()).collect();
    assert!(messages.iter().any(|m| m.starts_with(&pulled)), "the kubelet did not pull the image: {messages:#?}");

    // As the kernel sees the two processes: uid 65532, no capabilities, a seccomp filter, no
    // new privileges, and the chart's memory limit (512Mi) on their cgroups.
    let procs = pod_processes("deltaship", &pods);
    assert_eq!(procs.len(), 2, "two deltaship processes in kubepods cgroups: {procs:?}");
    for support::node::PodProcess { pid, status, memory_limit } in &procs {
        assert!(status_field(status, "Uid:").split_whitespace().all(|u| u == "65532"), "pid {pid}: {status}");
        assert_eq!(status_field(status, "CapEff:"), "0000000000000000", "pid {pid} has capabilities");
        assert_eq!(status_field(status, "Seccomp:"), "2", "pid {pid} runs without a seccomp filter");
        assert_eq!(status_field(status, "NoNewPrivs:"), "1", "pid {pid}");
        assert_eq!(*memory_limit, 512 * 1024 * 1024, "pid {pid}'s memory limit");
    }

    // One leader: the Lease names one of the two pods, and only it says it leads.
    let leader = leader_among(&client, &ns, &names, Duration::from_secs(60)).await;
    for pod in &names {
        let text = eventually(Duration::from_secs(30), &format!("{pod}'s /metrics"), || async { metrics(&ns, pod) }).await;
        let leads = if *pod == leader { 1.0 } else { 0.0 };
        assert_eq!(metric(&text, "deltaship_leader"), leads, "{pod}'s deltaship_leader (the Lease names {leader})");
    }

    // A ConfigMap created, changed and deleted: its events on Kafka, read from the host, in
    // order, between the initial sync's markers.
    let cm_name = support::unique("node-cm");
    let configmaps = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": cm_name}, "data": {"k": "v"}})).unwrap();
    configmaps.create(&PostParams::default(), &cm).await.unwrap();
    let patch = json!({"data": {"k": "w"}});
    configmaps.patch(&cm_name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    configmaps.delete(&cm_name, &Default::default()).await.unwrap();
    let kafka = support::var("DELTASHIP_TEST_KAFKA");
    let topic = format!("deltaship.{cluster}.core.configmaps");
    let key = format!("{ns}/{cm_name}");
    let records = support::kafka::read_until(&kafka, &topic, Duration::from_secs(90), |records| {
        records.iter().any(|r| r.key.as_deref() == Some(key.as_str()) && r.event_type() == "dev.deltaship.object.deleted")
    });
    let types: Vec<&str> = records.iter().filter(|r| r.key.as_deref() == Some(key.as_str())).map(|r| r.event_type()).collect();
    assert_eq!(types, ["dev.deltaship.object.added", "dev.deltaship.object.updated", "dev.deltaship.object.deleted"]);
    for marker in ["dev.deltaship.sync.started", "dev.deltaship.sync.completed"] {
        assert!(records.iter().any(|r| r.event_type() == marker), "no {marker} on {topic}");
    }
    // The state a consumer rebuilds from the topic is the API server's.
    let rebuild = vec!["--kafka".into(), kafka.clone(), "--topic".into(), topic.clone()];
    assert_rebuild_matches(&client, rebuild, std::slice::from_ref(&ns), Duration::from_secs(60)).await;

    // `helm test`: deltaship check, from a pod of the release, passes.
    let checked = helm_test(&ns);
    assert!(checked.lines().any(|l| l.starts_with("Phase:") && l.trim_end().ends_with("Succeeded")), "{checked}");
    // `helm uninstall` leaves what README says (support::node::uninstall).
    uninstall(&ns).await;
    delete_namespace(&client, &ns).await;
}
