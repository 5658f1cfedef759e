//! Completeness a consumer can check (event contract, section 4), against the real API
//! server and brokers: every `sync.completed` marker carries the count and digest of the
//! objects a consumer then holds, each Kafka copy those of its own partition. The figures
//! are computed here independently, from the API server's objects and the partitions the
//! broker put their records in.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use deltaship::config::ResumeConfig;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use support::bridge::Bridge;
use support::config::{TestConfig, kafka, nats_stream};
use support::kube::{client, delete_namespace, eventually, namespace};

const OBJECTS: usize = 30;

fn cm(name: &str, v: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"v": v}})).unwrap()
}

/// The namespace's objects as (key, uid, resourceVersion), from the API server.
async fn objects(cms: &Api<ConfigMap>) -> Vec<(String, String, String)> {
    let list = cms.list(&ListParams::default()).await.unwrap();
    list.items
        .iter()
        .map(|c| {
            let m = &c.metadata;
            (format!("{}/{}", m.namespace.as_deref().unwrap(), m.name.as_deref().unwrap()), m.uid.clone().unwrap(), m.resource_version.clone().unwrap())
        })
        .collect()
}

/// `{"count": N, "digest": hex}` of objects, by the contract's definition.
fn state_of<'a>(objects: impl IntoIterator<Item = &'a (String, String, String)>) -> Value {
    let (mut count, mut digest) = (0u64, 0u128);
    for (key, uid, rv) in objects {
        let hash = Sha256::digest(format!("{key}\n{uid}\n{rv}").as_bytes());
        digest = digest.wrapping_add(u128::from_be_bytes(hash[..16].try_into().unwrap()));
        count += 1;
    }
    json!({"count": count, "digest": format!("{digest:032x}")})
}

/// Creates the namespace's objects and waits for the controller manager's ConfigMap.
async fn populated(kube: &kube::Client, prefix: &str) -> (String, Api<ConfigMap>) {
    let ns = namespace(kube, prefix).await;
    let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), &ns);
    for i in 0..OBJECTS {
        cms.create(&PostParams::default(), &cm(&format!("cm-{i}"), "0")).await.unwrap();
    }
    eventually(Duration::from_secs(60), "kube-root-ca.crt", || {
        let cms = cms.clone();
        async move { cms.get_opt("kube-root-ca.crt").await.ok().flatten() }
    })
    .await;
    (ns, cms)
}

/// 3 created, 2 updated, 2 deleted.
async fn change(cms: &Api<ConfigMap>) {
    for i in OBJECTS..OBJECTS + 3 {
        cms.create(&PostParams::default(), &cm(&format!("cm-{i}"), "0")).await.unwrap();
    }
    for i in 0..2 {
        let name = format!("cm-{i}");
        cms.patch(&name, &PatchParams::apply("it").force(), &Patch::Apply(&cm(&name, "1"))).await.unwrap();
    }
    for i in 2..4 {
        cms.delete(&format!("cm-{i}"), &DeleteParams::default()).await.unwrap();
    }
}

/// Where each object's records are: the partition the broker holds them in, by subject.
fn partitions_of(records: &[support::kafka::Record]) -> BTreeMap<String, i32> {
    records.iter().filter_map(|r| Some((r.headers.get("ce_subject")?.clone(), r.partition))).collect()
}

/// A namespace of objects and a bridge's config shipping them to a topic of their own (3
/// partitions), with `more` options: (namespace, its ConfigMaps, the topic, the config).
async fn on_kafka(kube: &kube::Client, prefix: &str, more: impl FnOnce(&mut deltaship::config::Config)) -> (String, Api<ConfigMap>, String, String) {
    let (ns, cms) = populated(kube, prefix).await;
    let prefix = support::unique(prefix);
    let config = TestConfig::new().cluster("it").configmaps(&ns).kafka(kafka(&support::env().kafka, &format!("{prefix}.{{plural}}"))).with(more).toml();
    (ns, cms, format!("{prefix}.configmaps"), config)
}

fn completed_markers(records: &[support::kafka::Record]) -> Vec<&support::kafka::Record> {
    records.iter().filter(|r| r.headers.get("ce_type").map(String::as_str) == Some("dev.deltaship.sync.completed")).collect()
}

/// Kafka, 3 partitions: each `completed` copy carries its partition's count and digest of
/// the state consumers hold at it: after the initial sync; at a resume, whose marker comes
/// before the changes made while the bridge was down (they follow as live events); and
/// after a full sync that takes those changes in.
#[tokio::test(flavor = "multi_thread")]
async fn each_kafka_partitions_completed_marker_carries_its_objects_count_and_digest() {
    let env = support::env();
    let kube = client().await;
    let resume = ResumeConfig { interval_ms: 200, kafka_topic: support::unique("it-checkpoints"), ..ResumeConfig::default() };
    let (ns, cms, topic, config) = on_kafka(&kube, "it-digest", |c| c.resume = resume).await;

    let before_changes = objects(&cms).await;
    // (how the bridge starts, the state its markers must carry)
    type Round<'a> = (&'a [(&'a str, &'a str)], Option<&'a Vec<(String, String, String)>>);
    let rounds: [Round; 3] = [(&[], Some(&before_changes)), (&[], Some(&before_changes)), (&[("DELTASHIP_RESUME__ENABLED", "false")], None)];
    for (round, (envs, state)) in rounds.into_iter().enumerate() {
        let mut bridge = Bridge::start_with_env(&config, envs);
        bridge.wait_ready(Duration::from_secs(90));
        let (brokers, t) = (env.kafka.clone(), topic.clone());
        let records = tokio::task::spawn_blocking(move || {
            support::kafka::read_until(&brokers, &t, Duration::from_secs(60), |r| completed_markers(r).len() >= 3 * (round + 1))
        })
        .await
        .unwrap();
        // Where each object's records are: the partition the broker holds them in.
        let partition_of = partitions_of(&records);
        let now = objects(&cms).await;
        let state = state.unwrap_or(&now);
        // This round's copy in each partition (partitions are read interleaved).
        let mut markers: Vec<_> = (0..3)
            .filter_map(|p| {
                let mut in_p: Vec<_> = completed_markers(&records).into_iter().filter(|m| m.partition == p).collect();
                in_p.sort_by_key(|m| m.offset);
                in_p.get(round).copied()
            })
            .collect();
        markers.sort_by_key(|m| m.partition);
        assert_eq!(markers.len(), 3, "one copy per partition");
        for m in &markers {
            let held = state.iter().filter(|(key, ..)| partition_of.get(key) == Some(&m.partition));
            assert_eq!(m.json()["state"], state_of(held), "round {round}, partition {}: {}", m.partition, m.json());
        }
        let total: u64 = markers.iter().map(|m| m.json()["state"]["count"].as_u64().unwrap()).sum();
        assert_eq!(
            total as usize,
            state.len(),
            "round {round}: every object is counted in one partition: {:?}",
            markers.iter().map(|m| m.json()).collect::<Vec<_>>()
        );
        if round == 0 {
            bridge.stop(Duration::from_secs(30));
            change(&cms).await;
        } else {
            // The changes made while down follow the resume marker as live events.
            let (brokers, t) = (env.kafka.clone(), topic.clone());
            let live = |r: &support::kafka::Record| {
                ["added", "updated", "deleted"].iter().any(|ty| r.headers.get("ce_type").is_some_and(|t| *t == format!("dev.deltaship.object.{ty}")))
            };
            tokio::task::spawn_blocking(move || {
                support::kafka::read_until(&brokers, &t, Duration::from_secs(60), |r| r.iter().filter(|r| live(r)).count() >= 7)
            })
            .await
            .unwrap();
            bridge.stop(Duration::from_secs(30));
        }
    }
    delete_namespace(&kube, &ns).await;
}

/// NATS: one stream, so the `completed` marker carries the whole scope's figures.
#[tokio::test(flavor = "multi_thread")]
async fn the_nats_completed_marker_carries_the_scopes_count_and_digest() {
    let env = support::env();
    let kube = client().await;
    let (ns, cms) = populated(&kube, "it-digest-nats").await;
    let cluster = support::unique("digest");
    let stream = support::unique("DIGEST").to_uppercase().replace('-', "_");
    let sink = nats_stream(&env.nats, &cluster, &stream);
    let mut bridge = Bridge::start(&TestConfig::new().cluster(&cluster).configmaps(&ns).nats(sink).toml());
    bridge.wait_ready(Duration::from_secs(90));
    let js = support::nats::jetstream().await;
    let completed = |m: &support::nats::Msg| m.event_type() == "dev.deltaship.sync.completed";
    let msgs = support::nats::read_until(&js, &stream, Duration::from_secs(60), |m| m.iter().any(completed)).await;
    let marker = msgs.iter().find(|m| completed(m)).unwrap();
    assert_eq!(marker.json()["state"], state_of(&objects(&cms).await), "{}", marker.json());
    bridge.stop(Duration::from_secs(30));
    delete_namespace(&kube, &ns).await;
}

/// State markers (`delivery.state_marker_secs`): between syncs, without a list, each watch
/// ships a `state` pair whose `completed` copies carry each partition's count and digest of
/// the state held then; here checked after live changes.
#[tokio::test(flavor = "multi_thread")]
async fn periodic_state_markers_carry_the_state_held_between_syncs() {
    let env = support::env();
    let kube = client().await;
    let (ns, cms, topic, config) = on_kafka(&kube, "it-digest-state", |c| c.delivery.state_marker_secs = 1).await;
    let mut bridge = Bridge::start(&config);
    bridge.wait_ready(Duration::from_secs(90));
    change(&cms).await;
    let now = objects(&cms).await;
    let is_state = |r: &support::kafka::Record| r.json()["reason"] == "state";
    // State markers come every second: after a few, the last copies hold the changes.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let (brokers, t) = (env.kafka.clone(), topic.clone());
    let total = support::kafka::total(&brokers, &t);
    let records =
        tokio::task::spawn_blocking(move || support::kafka::read_until(&brokers, &t, Duration::from_secs(60), |r| r.len() as i64 >= total)).await.unwrap();
    let partition_of = partitions_of(&records);
    for p in 0..3 {
        let last = completed_markers(&records)
            .into_iter()
            .filter(|r| r.partition == p && is_state(r))
            .max_by_key(|r| r.offset)
            .expect("a state marker in every partition");
        let held = now.iter().filter(|(key, ..)| partition_of.get(key) == Some(&p));
        assert_eq!(last.json()["state"], state_of(held), "partition {p}: {}", last.json());
        assert_eq!(last.json()["counts"], json!({"added": 0, "updated": 0, "deleted": 0, "synced": 0}), "no objects in a state marker");
    }
    bridge.stop(Duration::from_secs(30));
    delete_namespace(&kube, &ns).await;
}
