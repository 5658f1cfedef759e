//! `deltaship check`: every start-up step of `run`, reported one finding per line,
//! without watching or publishing anything.

use std::fmt::Display;

use std::time::Duration;

use crate::checkpoint::Store;
use crate::config::{Config, DEFAULT_ROUTE, NatsConfig, SinkConfig, mask_urls};
use crate::pipeline::{self, Started};
use crate::plan;
use crate::sink::{HttpSink, KafkaSink, NatsSink};
use crate::watch::access;

/// Prints each finding on stdout; returns whether all passed.
pub async fn run(config: &Config) -> bool {
    let mut report = Report::default();
    report.ok("config is valid");
    let started = pipeline::start(config, &mut |step| match step {
        Ok(passed) => report.ok(passed),
        Err(e) => {
            report.fail(e);
        }
    })
    .await;
    let Ok(Started { client, scopes }) = started else { return report.done() };
    let routes = config.effective_routes();
    if config.resume.enabled && routes.iter().any(|r| Store::kept(&r.sink, &config.resume)) {
        check_resume_access(&mut report, config, &client, &scopes).await;
    }
    for (i, route) in routes.iter().enumerate() {
        if routes.len() > 1 || route.name != DEFAULT_ROUTE {
            report.ok(format!("route {}: {} watch(es) feed it", route.name, plan::watches_of(&scopes, i)));
        }
        match &route.sink {
            SinkConfig::Kafka(k) => check_kafka(&mut report, k, plan::topics(&scopes, i)).await,
            SinkConfig::Nats(n) => check_nats(&mut report, n).await,
            SinkConfig::Http(h) => check_http(&mut report, h).await,
            SinkConfig::Stdout {} => report.ok("sink: stdout"),
        }
    }
    report.done()
}

/// The `get`s a resume needs: each resumed scope's objects (to prove a checkpoint belongs to
/// the API server's history) and the `kube-system` namespace (the cluster's identity).
/// Missing ones are warnings: the bridge runs, with every start a full initial sync, or its
/// checkpoints not checked against the cluster's identity.
async fn check_resume_access(report: &mut Report, config: &Config, client: &kube::Client, scopes: &[std::sync::Arc<plan::Scope>]) {
    for scope in scopes.iter().filter(|s| config.resources.get(s.index).is_some_and(|r| r.resume)) {
        match access::allows_get(client, scope).await {
            Ok(true) => report.ok(format!("get allowed on {} (a resume proves its checkpoint against the API server)", scope.describe())),
            Ok(false) => report.warn(format!(
                "get not allowed on {}: with resume on, its checkpoint cannot be proven to belong to the API server's history, so every start is a full initial sync; grant get beside list and watch",
                scope.describe()
            )),
            Err(e) => report.warn(e),
        }
    }
    match access::allows_identity(client).await {
        Ok(true) => report.ok("get allowed on namespace kube-system (checkpoints are checked against the cluster's identity)"),
        Ok(false) => report.warn(
            "get not allowed on namespace kube-system: checkpoints are not checked against the cluster's identity (its uid); grant get on namespaces, resourceNames [kube-system]",
        ),
        Err(e) => report.warn(e),
    }
}

async fn check_http(report: &mut Report, h: &crate::config::HttpSinkConfig) {
    match HttpSink::new(h) {
        Err(e) => {
            report.fail(e);
        }
        Ok(sink) => match sink.probe().await {
            Ok(()) => report.ok(format!(
                "HTTP server reachable at {}{} (events go to {})",
                sink.address(),
                if sink.is_tls() { ", its certificate verified" } else { "" },
                mask_urls(&h.target_url().unwrap_or_default())
            )),
            Err(e) => {
                report.fail(e);
            }
        },
    }
}

async fn check_kafka(report: &mut Report, k: &crate::config::KafkaConfig, topics: Vec<String>) {
    let sink = match KafkaSink::new(k) {
        Ok(s) => s,
        Err(e) => {
            report.fail(e);
            return;
        }
    };
    match sink.topic_partitions(topics).await {
        Ok(found) => {
            report.ok(format!("Kafka brokers reachable at {}", mask_urls(&k.brokers)));
            for (topic, partitions) in found {
                match (partitions, &k.create_topics) {
                    (Some(n), _) => report.ok(format!("topic {topic} exists with {n} partition(s)")),
                    (None, Some(_)) => report.ok(format!("topic {topic} is missing and will be created at start-up")),
                    (None, None) => report
                        .warn(format!("topic {topic} does not exist; create it, set sink.create_topics, or rely on the broker's auto.create.topics.enable")),
                }
            }
        }
        Err(e) => {
            report.fail(format!("Kafka brokers at {} unreachable: {e}", mask_urls(&k.brokers)));
        }
    }
}

async fn check_nats(report: &mut Report, n: &NatsConfig) {
    let sink = match NatsSink::connect(n).await {
        Ok(s) => s,
        Err(e) => {
            report.fail(e);
            return;
        }
    };
    // The client connects in the background; give it a moment.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while sink.probe().is_err() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if let Err(e) = sink.probe() {
        report.fail(format!("NATS at {} unreachable: {e}", mask_urls(&n.url)));
        return;
    }
    report.ok(format!("NATS reachable at {}", mask_urls(&n.url)));
    let stream = &n.jetstream.stream;
    match (sink.stream_exists().await, n.jetstream.create) {
        (Ok(None), _) => report.ok("core NATS mode: at most once, no stream"),
        (Ok(Some(true)), _) => report.ok(format!("JetStream stream {stream} exists")),
        (Ok(Some(false)), true) => report.ok(format!("JetStream stream {stream} is missing and will be created at start-up")),
        (Ok(Some(false)), false) => {
            report.fail(format!("JetStream stream {stream} does not exist; create it or set sink.jetstream.create = true"));
        }
        (Err(e), _) => {
            report.fail(e);
        }
    }
}

#[derive(Default)]
struct Report {
    failed: bool,
}

impl Report {
    fn ok(&mut self, what: impl Display) {
        println!("[ok]   {what}");
    }
    fn warn(&mut self, what: impl Display) {
        println!("[warn] {what}");
    }
    fn fail(&mut self, what: impl Display) -> &mut Self {
        println!("[FAIL] {what}");
        self.failed = true;
        self
    }
    fn done(&self) -> bool {
        !self.failed
    }
}
