//! The test environment works for real: the API server's watch, a Kafka record with
//! headers on a 3-partition topic, and JetStream's duplicate window.

mod support;

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, PostParams, WatchEvent, WatchParams};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use serde_json::json;

#[tokio::test(flavor = "multi_thread")]
async fn api_server_watch_sees_a_configmap_created_and_deleted() {
    let client = support::kube::client().await;
    let version = client.apiserver_version().await.unwrap();
    assert!(version.git_version.starts_with("v1.34."), "a real 1.34 API server: {}", version.git_version);
    let ns = support::kube::namespace(&client, "smoke").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    // A watch from the (empty) list's version sees every change after it.
    let listed = api.list_metadata(&ListParams::default()).await.unwrap();
    let from = listed.metadata.resource_version.expect("a list's resourceVersion");
    let mut events = std::pin::pin!(api.watch(&WatchParams::default().timeout(60), &from).await.unwrap());
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "smoke"}})).unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();
    api.delete("smoke", &DeleteParams::default()).await.unwrap();
    let (mut applied, mut deleted) = (false, false);
    let seen = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(e) = events.next().await {
            match e.unwrap() {
                WatchEvent::Added(o) if o.metadata.name.as_deref() == Some("smoke") => applied = true,
                WatchEvent::Deleted(o) if o.metadata.name.as_deref() == Some("smoke") => deleted = true,
                _ => {}
            }
            if applied && deleted {
                return;
            }
        }
    })
    .await;
    assert!(seen.is_ok(), "watch saw applied={applied} deleted={deleted}");
    support::kube::delete_namespace(&client, &ns).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn kafka_round_trips_a_record_with_headers_on_a_three_partition_topic() {
    let env = support::env();
    let topic = support::unique("smoke");
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new().set("bootstrap.servers", &env.kafka).create().unwrap();
    let created = admin.create_topics(&[NewTopic::new(&topic, 3, TopicReplication::Fixed(1))], &AdminOptions::new()).await.unwrap();
    assert!(created[0].is_ok(), "{created:?}");
    let producer: FutureProducer = ClientConfig::new().set("bootstrap.servers", &env.kafka).set("enable.idempotence", "true").create().unwrap();
    let headers = OwnedHeaders::new().insert(Header { key: "ce_id", value: Some("1") });
    for p in 0..3 {
        producer
            .send(FutureRecord::to(&topic).key("k").payload("v").partition(p).headers(headers.clone()), Duration::from_secs(30))
            .await
            .expect("the broker acknowledges");
    }
    let records = support::kafka::read_until(&env.kafka, &topic, Duration::from_secs(30), |r| r.len() == 3);
    let mut partitions: Vec<i32> = records.iter().map(|r| r.partition).collect();
    partitions.sort();
    assert_eq!(partitions, [0, 1, 2]);
    assert!(records.iter().all(|r| r.header("ce_id") == "1" && r.key.as_deref() == Some("k")));
}

#[tokio::test(flavor = "multi_thread")]
async fn jetstream_keeps_one_message_for_two_publishes_with_the_same_msg_id() {
    let env = support::env();
    let client = async_nats::connect(&env.nats).await.unwrap();
    let js = async_nats::jetstream::new(client);
    let name = support::unique("SMOKE").to_uppercase();
    let subject = format!("smoke.{name}");
    let mut stream =
        js.create_stream(async_nats::jetstream::stream::Config { name: name.clone(), subjects: vec![subject.clone()], ..Default::default() }).await.unwrap();
    for _ in 0..2 {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", "event-1");
        js.publish_with_headers(subject.clone(), headers, "payload".into()).await.unwrap().await.unwrap();
    }
    assert_eq!(stream.info().await.unwrap().state.messages, 1);
    js.delete_stream(&name).await.unwrap();
}
