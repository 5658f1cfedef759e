//! Faults against the real servers while ConfigMaps churn: Kafka broker restarts and NATS
//! server restarts in a row on a busy machine (5 of each at the proof scale, 20 at the soak
//! scale: `tests/support/scale.rs`; no event delivered twice, every marker's count and
//! digest verified by `rebuild --verify`), a broker outage longer than the bridge's queues,
//! a SIGKILLed bridge, and forced watch expiry. Every write carries the object's next
//! `seq`; afterwards the stream is read back and audited per object (support::churn::audit):
//! nothing lost unless a sync shipped newer state in its place, nothing reordered, every
//! duplicate an exact repeat.
//!
//! The tests stop and restart the shared brokers and the API server, so they take SERIAL
//! one at a time, and live in a test binary of their own.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use support::bridge::Bridge;
use support::churn::{Arrivals, Audit, Churn, Item, RssSampler, audit, ctl, metric};
use support::kube::{client, delete_namespace, namespace};
use support::nats::STREAM;
use support::state::assert_rebuild_matches;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The default NATS stream (subjects `deltaship.>`); each test's unique cluster name makes
/// its subjects its own.
const SAMPLE_EVERY: Duration = Duration::from_millis(200);

fn nats_config(cluster: &str, ns: &str) -> String {
    let url = support::env().nats;
    format!(
        "cluster = \"{cluster}\"\n[[resources]]\nversion = \"v1\"\nkind = \"ConfigMap\"\nnamespaces = [\"{ns}\"]\n\
         [sink]\ntype = \"nats\"\nurl = \"{url}\"\n[sink.jetstream]\nack_timeout_secs = 2\n"
    )
}

/// One test's Kafka destination: a unique cluster name and topic prefix.
struct KafkaRun {
    cluster: String,
    prefix: String,
}

impl KafkaRun {
    fn new() -> KafkaRun {
        KafkaRun { cluster: support::unique("c"), prefix: support::unique("it-faults") }
    }

    /// The bridge's config: ConfigMaps of `ns`, to `<prefix>.core.configmaps` (3 partitions).
    fn config(&self, ns: &str, delivery: &str) -> String {
        let (cluster, prefix, brokers) = (&self.cluster, &self.prefix, support::env().kafka);
        format!(
            "cluster = \"{cluster}\"\n[[resources]]\nversion = \"v1\"\nkind = \"ConfigMap\"\nnamespaces = [\"{ns}\"]\n\
             [sink]\ntype = \"kafka\"\nbrokers = \"{brokers}\"\ntopic_template = \"{prefix}.{{group}}.{{plural}}\"\ncreate_topics = {{ partitions = 3 }}\n\
             [delivery]\n{delivery}\n"
        )
    }

    /// The topic of the churn's ConfigMaps.
    fn topic(&self) -> String {
        format!("{}.core.configmaps", self.prefix)
    }

    /// Everything shipped, per partition, once every final seq arrived (or `timeout`).
    async fn read(&self, written: &BTreeMap<String, u64>, timeout: Duration) -> Vec<Vec<Item>> {
        let (brokers, topic, written) = (support::env().kafka, self.topic(), written.clone());
        tokio::task::spawn_blocking(move || read_kafka(&brokers, &topic, &written, timeout)).await.expect("the Kafka reader")
    }
}

/// Reads a Kafka topic from the beginning of every partition until `written`'s final seqs
/// all arrived or `timeout` passed; one log per partition, in offset order. Blocking.
fn read_kafka(brokers: &str, topic: &str, written: &BTreeMap<String, u64>, timeout: Duration) -> Vec<Vec<Item>> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::{Headers, Message};
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", support::unique("fault-reader"))
        .set("enable.auto.commit", "false")
        .create()
        .expect("a Kafka consumer");
    let md = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).expect("topic metadata");
    let partitions = md.topics().first().map_or(0, |t| t.partitions().len());
    assert!(partitions > 0, "topic {topic} has no partitions");
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in 0..partitions as i32 {
        tpl.add_partition_offset(topic, p, rdkafka::Offset::Beginning).unwrap();
    }
    consumer.assign(&tpl).expect("assign partitions");
    let (mut logs, mut arrivals) = (vec![Vec::new(); partitions], Arrivals::new(written));
    let deadline = Instant::now() + timeout;
    while !arrivals.complete() && Instant::now() < deadline {
        let Some(m) = consumer.poll(Duration::from_millis(200)) else { continue };
        let m = m.expect("a Kafka record");
        let header = |name: &str| m.headers().and_then(|h| h.iter().find(|h| h.key == name)?.value.map(|v| String::from_utf8_lossy(v).into_owned()));
        let item = Item::decode(
            &header("ce_type").unwrap_or_default(),
            header("ce_subject").as_deref(),
            &header("ce_id").unwrap_or_default(),
            header("ce_syncid").as_deref(),
            m.payload().unwrap_or_default(),
        );
        arrivals.see(&item);
        logs[m.partition() as usize].push(item);
    }
    logs
}

/// Reads the JetStream `stream` from its start, keeping the subjects under `prefix`, until
/// `written`'s final seqs all arrived or `timeout` passed. Header values percent-decoded.
async fn read_nats(js: &async_nats::jetstream::Context, stream: &str, prefix: &str, written: &BTreeMap<String, u64>, timeout: Duration) -> Vec<Item> {
    let (mut items, mut arrivals, mut next) = (Vec::new(), Arrivals::new(written), 1u64);
    let deadline = Instant::now() + timeout;
    while !arrivals.complete() && Instant::now() < deadline {
        let mut s = js.get_stream(stream).await.expect("the stream");
        let last = s.info().await.expect("stream info").state.last_sequence;
        while next <= last {
            // A message removed by limits is simply not there; nothing of ours is removed.
            if let Ok(m) = s.get_raw_message(next).await
                && m.subject.starts_with(prefix)
            {
                let h = |name: &str| m.headers.get(name).map(|v| support::nats::percent_decode(v.as_str()));
                let item = Item::decode(
                    &h("ce-type").unwrap_or_default(),
                    h("ce-subject").as_deref(),
                    &h("ce-id").unwrap_or_default(),
                    h("ce-syncid").as_deref(),
                    &m.payload,
                );
                arrivals.see(&item);
                items.push(item);
            }
            next += 1;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    items
}

/// Runs a fault control in a thread while the churn goes on; waits for it to finish.
async fn inject(component: &'static str, action: &'static str) {
    let fault = std::thread::spawn(move || ctl(component, action));
    while !fault.is_finished() {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    if let Err(panic) = fault.join() {
        std::panic::resume_unwind(panic);
    }
}

/// Writes until `after` more updates are done, then stops the churn; what was written.
async fn keep_writing(churn: &mut Churn, after: usize) -> BTreeMap<String, u64> {
    churn.wait_writes(churn.writes() + after).await;
    churn.finish().await
}

fn metrics(bridge: &Bridge) -> String {
    bridge.get("/metrics").map(|(_, body)| body).unwrap_or_default()
}

/// When delivery stalls, what the bridge was doing: its delivery gauges, /readyz, and a
/// gdb backtrace of every thread (written next to its log), for the report.
fn diagnose(bridge: &Bridge, a: &Audit) {
    if a.lost == 0 {
        return;
    }
    let m = metrics(bridge);
    let gauges: Vec<String> =
        ["deltaship_in_flight_events", "deltaship_held_events", "deltaship_queued_events", "deltaship_sink_errors_total", "deltaship_ready"]
            .iter()
            .map(|g| format!("{g}={}", metric(&m, g)))
            .collect();
    let dump = bridge.log.with_extension("threads.txt");
    let out = std::process::Command::new("gdb").args(["-p", &bridge.pid().to_string(), "-batch", "-ex", "thread apply all bt"]).output();
    let _ = std::fs::write(&dump, out.map(|o| o.stdout).unwrap_or_default());
    eprintln!("STALLED bridge: {} readyz={:?} threads={} log={}", gauges.join(" "), bridge.get("/readyz"), dump.display(), bridge.log.display());
}

/// Restarts in a row for each restart test: 5 at the proof scale, 20 at the soak scale. Each
/// restart is a fresh chance for a producer to be left stuck, so five already prove the
/// recovery and the exactness through restarts; twenty find the rarer interleavings.
fn restarts() -> usize {
    support::scale::by_tier(5, 20)
}

/// The bound on each recovery: the time from the server answering a new client again to the
/// bridge's next acknowledgement. A Kafka producer left without brokers is replaced within
/// about 2 s, any other stuck producer after 15 s of no report while the broker answers
/// (src/sink/kafka/recover.rs); 45 s leaves room for a busy machine and is still seconds,
/// where the liveness probe alone would take delivery.stall_timeout_secs (300 s). A bound
/// on each restart, not on their sum: the same at both scales.
const RECOVERY_BOUND: Duration = Duration::from_secs(45);

/// Whether `component`'s server answers a new client now: Kafka metadata that lists a
/// broker (a starting broker answers with none), or a NATS connection accepted. Blocking.
fn answering(component: &str) -> bool {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    match component {
        "kafka" => rdkafka::ClientConfig::new()
            .set("bootstrap.servers", support::env().kafka)
            .create::<BaseConsumer>()
            .is_ok_and(|c| c.fetch_metadata(None, Duration::from_secs(1)).is_ok_and(|md| !md.brokers().is_empty())),
        _ => {
            let url = support::env().nats;
            let addr = url.trim_start_matches("nats://").parse().expect("DELTASHIP_TEST_NATS is host:port");
            std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok()
        }
    }
}

/// Restarts `component` restarts() times while the churn goes on, with some writes between
/// restarts; each recovery time (see RECOVERY_BOUND), waited for up to 5 minutes so that a
/// stuck bridge is reported with figures rather than a timeout.
async fn restart_repeatedly(bridge: &Bridge, churn: &Churn, component: &'static str) -> Vec<Duration> {
    let mut recoveries = Vec::with_capacity(restarts());
    for _ in 0..restarts() {
        churn.wait_writes(churn.writes() + 40).await;
        let fault = std::thread::spawn(move || ctl(component, "restart"));
        // The server goes down, then answers again: that moment starts the clock (ctl
        // itself returns later, after its own readiness checks).
        let (mut went_down, mut back) = (false, None);
        while back.is_none() {
            let up = tokio::task::spawn_blocking(move || answering(component)).await.expect("the probe");
            if !up {
                went_down = true;
            } else if went_down || fault.is_finished() {
                back = Some(Instant::now());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let (back, acked) = (back.expect("set above"), metric(&metrics(bridge), "deltaship_events_total"));
        while metric(&metrics(bridge), "deltaship_events_total") <= acked && back.elapsed() < Duration::from_secs(300) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        recoveries.push(back.elapsed());
        while !fault.is_finished() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        if let Err(panic) = fault.join() {
            std::panic::resume_unwind(panic);
        }
    }
    recoveries
}

/// `FAULT-FIGURES` fields for the recoveries, and whether each stayed within the bound.
fn recovery_figures(recoveries: &[Duration]) -> (String, bool) {
    let secs: Vec<String> = recoveries.iter().map(|d| format!("{:.1}", d.as_secs_f64())).collect();
    let longest = recoveries.iter().max().copied().unwrap_or_default();
    let scale = support::scale::tier().as_str();
    (
        format!(" scale={scale} restarts={} longest_recovery_s={:.1} recoveries_s={}", recoveries.len(), longest.as_secs_f64(), secs.join(",")),
        longest <= RECOVERY_BOUND,
    )
}

/// Kafka broker restarts in a row (restarts()) in the middle of the churn, with a core kept
/// busy beside it: the idempotent producer (message.timeout.ms=0) holds and re-sends, a producer
/// left without brokers is replaced, and every update arrives, in order per object; each
/// restart is recovered from within RECOVERY_BOUND.
#[tokio::test(flavor = "multi_thread")]
async fn kafka_broker_restarts_in_a_row_on_a_busy_machine_lose_and_reorder_nothing() {
    kafka_broker_restarts(false).await;
}

/// The same with leader election and fencing (the chart's default): the leader's records go
/// in transactions, which a restart aborts or leaves to commit again; a read-committed
/// consumer sees each update once.
#[tokio::test(flavor = "multi_thread")]
async fn kafka_broker_restarts_in_a_row_under_a_fenced_leader_lose_repeat_and_reorder_nothing() {
    kafka_broker_restarts(true).await;
}

async fn kafka_broker_restarts(fenced: bool) {
    let _serial = SERIAL.lock().await;
    let test = if fenced { "kafka-broker-restarts-fenced" } else { "kafka-broker-restarts" };
    support::scale::announce(test, &format!("restarts={}", restarts()));
    let _busy = support::CpuBurner::start();
    let client = client().await;
    let ns = namespace(&client, "it-fault-kafka").await;
    let run = KafkaRun::new();
    // Every delivery report in the log, to trace a lost record (locate_gaps).
    let mut config = run.config(&ns, "");
    if fenced {
        config.push_str(&format!("[leader_election]\nenabled = true\nnamespace = \"{ns}\"\nlease_name = \"deltaship-faults\"\nfence = true\n"));
    }
    let mut bridge = Bridge::start_with_env(&config, &[("RUST_LOG", "deltaship=debug,deltaship::broker::kafka::context=trace,info")]);
    bridge.wait_ready(Duration::from_secs(60));
    let rss = RssSampler::start(bridge.pid(), SAMPLE_EVERY);
    let mut churn = Churn::create(&client, &ns, 20, 0).await;
    churn.start(4, Duration::from_millis(100), None);
    churn.wait_writes(100).await;
    let recoveries = restart_repeatedly(&bridge, &churn, "kafka").await;
    let written = keep_writing(&mut churn, 200).await;
    let a = audit(&run.read(&written, Duration::from_secs(180)).await, &written);
    let (peak, _) = rss.finish();
    let m = metrics(&bridge);
    let (figures, within) = recovery_figures(&recoveries);
    let errors = bridge.log_text().matches("Kafka client error").count();
    let replaced = metric(&m, "deltaship_sink_recoveries_total");
    a.print(
        test,
        churn.writes(),
        &format!("{} Kafka broker restarts, one core busy", restarts()),
        peak,
        &format!("{figures} producers_replaced={replaced} client_error_logs={errors}"),
    );
    diagnose(&bridge, &a);
    if fenced && a.lost > 0 {
        describe_transactions(&support::env().kafka, &run.topic());
    }
    locate_gaps(&support::env().kafka, &run.topic(), &a, &bridge.log_text());
    a.assert_clean();
    // Under a fenced leader a record written twice is in an aborted transaction once, which
    // a read-committed consumer never sees; without transactions, a record whose report left
    // its fate open is looked for in the log before it is sent again (sink::kafka::resend).
    let doubtful = ["written", "absent"].map(|o| {
        let series = m.lines().filter(|l| l.starts_with("deltaship_sink_doubtful_records_total{") && l.contains(&format!("outcome=\"{o}\"")));
        // A count: an empty sum of f64 is -0.0, which would print as "-0".
        series.map(|l| metric(l, "deltaship_sink_doubtful_records_total")).sum::<f64>() as u64
    });
    eprintln!("records in doubt after a restart: written {}, absent {}", doubtful[0], doubtful[1]);
    assert_eq!(a.duplicates, 0, "a broker restart made the bridge deliver an event twice:\n{}", a.problems.join("\n"));
    // Every marker's count and digest match the state a consumer holds at it.
    let rebuild = vec!["--kafka".into(), support::env().kafka, "--topic".into(), run.topic(), "--verify".into()];
    assert_rebuild_matches(&client, rebuild, std::slice::from_ref(&ns), Duration::from_secs(120)).await;
    assert!(within, "a restart took longer than {RECOVERY_BOUND:?} to recover from:{figures}\n{}", bridge.log_text());
    // The restarts reached the bridge (librdkafka reported the broker down).
    assert!(errors > 0, "the bridge never saw the broker go down:\n{}", bridge.log_text());
    drop(bridge);
    delete_namespace(&client, &ns).await;
}

/// For each of `a`'s gaps: every record of that object near the lost seqs, wherever it is
/// in the topic, and the bridge's delivery reports (trace lines) for that object that are
/// failures, or that name an offset holding one of those records or another object's
/// record: tells "never written" from "written elsewhere or later", and which report
/// claimed a lost record. Blocking.
fn locate_gaps(brokers: &str, topic: &str, a: &Audit, bridge_log: &str) {
    use std::collections::HashMap;

    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::{Headers, Message};
    if a.gaps.is_empty() {
        return;
    }
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", support::unique("gap-locator"))
        .set("enable.partition.eof", "true")
        .create()
        .expect("a Kafka consumer");
    let md = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).expect("topic metadata");
    let partitions = md.topics().first().map_or(0, |t| t.partitions().len());
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in 0..partitions as i32 {
        tpl.add_partition_offset(topic, p, rdkafka::Offset::Beginning).unwrap();
    }
    consumer.assign(&tpl).expect("assign partitions");
    // (partition, offset) -> (key, seq, id) of every object record in the topic.
    let mut records: HashMap<(i32, i64), (String, Option<u64>, String)> = HashMap::new();
    let (mut at_end, deadline) = (0, Instant::now() + Duration::from_secs(120));
    while at_end < partitions && Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(500)) {
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => at_end += 1,
            Some(Ok(m)) => {
                let header = |name: &str| m.headers().and_then(|h| h.iter().find(|h| h.key == name)?.value.map(|v| String::from_utf8_lossy(v).into_owned()));
                let item = Item::decode(
                    &header("ce_type").unwrap_or_default(),
                    header("ce_subject").as_deref(),
                    &header("ce_id").unwrap_or_default(),
                    None,
                    m.payload().unwrap_or_default(),
                );
                if let Item::Object { key, seq, id, .. } = item {
                    records.insert((m.partition(), m.offset()), (key, seq, id));
                }
            }
            _ => {}
        }
    }
    eprintln!("GAPS: {topic} read to the end of {at_end}/{partitions} partitions, {} object records", records.len());
    let field = |line: &str, name: &str| {
        line.split(&format!(" {name}=")).nth(1).and_then(|v| v.split(|c: char| !c.is_ascii_digit() && c != '-').next()?.parse::<i64>().ok())
    };
    for (key, first, last) in &a.gaps {
        let near = |seq: Option<u64>| seq.is_some_and(|s| s + 2 >= *first && s <= last + 2);
        let mut found: Vec<String> =
            records.iter().filter(|(_, (k, seq, _))| k == key && near(*seq)).map(|((p, o), (_, seq, id))| format!("seq {seq:?} at {p}/{o} id {id}")).collect();
        found.sort();
        eprintln!("GAP {key}: lost {first}..={last}; its records near them: {found:?}");
        let (in_topic, of_key) = (format!("topic=\"{topic}\""), format!("key=Some(\"{key}\")"));
        for line in bridge_log.lines().filter(|l| l.contains(&in_topic) && l.contains(&of_key)) {
            let at = field(line, "partition").zip(field(line, "offset")).and_then(|(p, o)| records.get(&(p as i32, o)));
            let telling = match at {
                None => true,
                Some((k, seq, _)) => k != key || near(*seq),
            };
            if line.contains("not delivered") || line.contains("unconfirmed") || telling {
                eprintln!("  {line}\n    -> the record there: {at:?}");
            }
        }
    }
}

/// Why a read-committed reader may stop short of what the bridge delivered: each partition's
/// high watermark beside its last stable offset (an open transaction holds the latter back),
/// and the broker's view of the transactions (`tests/env/kafka/ctl transactions`).
fn describe_transactions(brokers: &str, topic: &str) {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    // A diagnosis: what cannot be read is printed as -1 or left out, never a panic that would
    // hide the audit's own message. librdkafka asks for the ends with the reader's isolation
    // level: read committed, the last stable offset (checked: an open transaction holds it).
    let ends = |isolation: &str| -> Vec<i64> {
        let Ok(consumer) = rdkafka::ClientConfig::new().set("bootstrap.servers", brokers).set("isolation.level", isolation).create::<BaseConsumer>() else {
            return Vec::new();
        };
        let partitions = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).map_or(0, |md| md.topics().first().map_or(0, |t| t.partitions().len()));
        (0..partitions as i32).map(|p| consumer.fetch_watermarks(topic, p, Duration::from_secs(10)).map_or(-1, |w| w.1)).collect()
    };
    let (high, stable) = (ends("read_uncommitted"), ends("read_committed"));
    eprintln!("TRANSACTIONS: {topic}: high watermarks {high:?}, last stable offsets {stable:?}");
    let ctl = format!("{}/tests/env/kafka/ctl", env!("CARGO_MANIFEST_DIR"));
    let ask = |args: &[&str]| match std::process::Command::new(&ctl).arg("transactions").args(args).output() {
        Ok(out) => eprintln!("TRANSACTIONS {}:\n{}{}", args.join(" "), String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
        Err(e) => eprintln!("TRANSACTIONS {}: cannot run {ctl}: {e}", args.join(" ")),
    };
    // The test broker's node.id (tests/env/kafka/ctl).
    ask(&["find-hanging", "--broker-id", "1"]);
    for p in 0..high.len() {
        ask(&["describe-producers", "--topic", topic, "--partition", &p.to_string()]);
    }
}

/// NATS server restarts in a row (restarts()) in the middle of the churn, JetStream mode,
/// with a core kept busy: publishes are retried with the same Nats-Msg-Id until acked, one per
/// object at a time; each restart is recovered from within RECOVERY_BOUND.
#[tokio::test(flavor = "multi_thread")]
async fn nats_server_restarts_in_a_row_on_a_busy_machine_lose_and_reorder_nothing() {
    let _serial = SERIAL.lock().await;
    support::scale::announce("nats-server-restarts", &format!("restarts={}", restarts()));
    let _busy = support::CpuBurner::start();
    let client = client().await;
    let ns = namespace(&client, "it-fault-nats").await;
    let cluster = support::unique("c");
    let mut bridge = Bridge::start(&nats_config(&cluster, &ns));
    bridge.wait_ready(Duration::from_secs(60));
    let rss = RssSampler::start(bridge.pid(), SAMPLE_EVERY);
    let mut churn = Churn::create(&client, &ns, 20, 0).await;
    churn.start(4, Duration::from_millis(100), None);
    churn.wait_writes(100).await;
    let recoveries = restart_repeatedly(&bridge, &churn, "nats").await;
    let written = keep_writing(&mut churn, 200).await;
    let js = support::nats::jetstream().await;
    let items = read_nats(&js, STREAM, &format!("deltaship.{cluster}."), &written, Duration::from_secs(180)).await;
    let a = audit(&[items], &written);
    let (peak, _) = rss.finish();
    let (figures, within) = recovery_figures(&recoveries);
    a.print("nats-server-restarts", churn.writes(), &format!("{} NATS server restarts, one core busy", restarts()), peak, &figures);
    diagnose(&bridge, &a);
    a.assert_clean();
    assert_eq!(a.duplicates, 0, "a server restart made the bridge deliver an event twice:\n{}", a.problems.join("\n"));
    let rebuild = vec!["--nats".into(), support::env().nats, "--stream".into(), STREAM.into(), "--cluster".into(), cluster.clone(), "--verify".into()];
    assert_rebuild_matches(&client, rebuild, std::slice::from_ref(&ns), Duration::from_secs(120)).await;
    assert!(within, "a restart took longer than {RECOVERY_BOUND:?} to recover from:{figures}\n{}", bridge.log_text());
    assert!(bridge.log_text().contains("Disconnected from NATS"), "the bridge never saw the restarts:\n{}", bridge.log_text());
    drop(bridge);
    delete_namespace(&client, &ns).await;
}

/// Starts the Kafka broker again when dropped, unless `start` did: a failing test must not
/// leave the shared broker down for every other test.
struct BrokerStopped(bool);

impl BrokerStopped {
    fn stop() -> BrokerStopped {
        ctl("kafka", "stop");
        BrokerStopped(true)
    }

    fn start(mut self) {
        ctl("kafka", "start");
        self.0 = false;
    }
}

impl Drop for BrokerStopped {
    fn drop(&mut self) {
        // Runs while a failed test unwinds: report, never panic again.
        if self.0
            && let Err(e) = support::churn::try_ctl("kafka", "start")
        {
            eprintln!("could not start the Kafka broker again: {e}");
        }
    }
}

/// Bounds for the long outage. The bridge may hold queue_capacity (200) + max_in_flight
/// (100) events, each a ~16 KiB ConfigMap held as JSON (plus its encoded copy in librdkafka
/// for the ones in flight): about 300 × 2 × 16 KiB ≈ 10 MiB over its baseline, plus a
/// relist's list page (200 × 16 KiB, decoded) if another test restarts the API server during
/// the outage. Measured: 8.7-9.4 MiB. The outage's 2,000 updates are ~32 MiB of object data
/// alone: with queues of 10,000 / 3,000 instead, the same outage grew the bridge by 39 MiB,
/// so a bridge that buffered instead of pausing its watches fails GROWTH_MIB (which is why the
/// outage keeps its 2,000 updates at both scales of `tests/support/scale.rs`: fewer would
/// let a buffering bridge pass). PEAK_MIB is the absolute ceiling for these settings (a
/// fresh debug bridge runs at ~35-40 MiB).
const GROWTH_MIB: f64 = 32.0;
const PEAK_MIB: f64 = 200.0;

/// The broker down for longer than the bridge's queues hold: the queue fills, the watches
/// stop being read, memory stays bounded, /readyz says 503; once the broker is back,
/// everything arrives. If the API server dropped the paused watch and the bridge relisted,
/// seqs in between were never shipped (the relist ships current state): the audit excuses
/// exactly those gaps that span a sync marker, and still demands every final seq and no
/// step backwards.
#[tokio::test(flavor = "multi_thread")]
async fn a_broker_outage_longer_than_the_queues_pauses_the_watches_with_bounded_memory_and_loses_nothing() {
    let _serial = SERIAL.lock().await;
    let client = client().await;
    let ns = namespace(&client, "it-fault-outage").await;
    let run = KafkaRun::new();
    let mut bridge = Bridge::start(&run.config(&ns, "queue_capacity = 200\nmax_in_flight = 100"));
    bridge.wait_ready(Duration::from_secs(60));
    let mut churn = Churn::create(&client, &ns, 200, 16 * 1024).await;
    // Everything created is shipped first, so the baseline holds no backlog.
    run.read(&churn.written(), Duration::from_secs(120)).await;
    let baseline = support::churn::rss_kib(bridge.pid()).expect("the bridge's RSS") as f64 / 1024.0;

    let outage = BrokerStopped::stop();
    let down_at = Instant::now();
    let rss = RssSampler::start(bridge.pid(), SAMPLE_EVERY);
    churn.start(4, Duration::ZERO, Some(10));
    // While the writes go on: /readyz must turn 503 (the sink probe runs every 10 s), and
    // the queue and in-flight gauges must stay within their bounds.
    let (mut saw_503, mut max_queued, mut max_held) = (None, 0.0f64, 0.0f64);
    while churn.writes() < 2000 || saw_503.is_none() {
        if saw_503.is_none() && matches!(bridge.get("/readyz"), Some((503, _))) {
            saw_503 = Some(down_at.elapsed());
        }
        let m = metrics(&bridge);
        max_queued = max_queued.max(metric(&m, "deltaship_queued_events"));
        max_held = max_held.max(metric(&m, "deltaship_in_flight_events") + metric(&m, "deltaship_held_events"));
        assert!(down_at.elapsed() < Duration::from_secs(300), "writes {} of 2000, /readyz 503 seen: {saw_503:?}", churn.writes());
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let written = churn.finish().await;
    // A little longer down, so the samples cover a bridge that has been stuck for a while.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let still_503 = matches!(bridge.get("/readyz"), Some((503, _)));
    // Whether the paused watch expired during the outage (the relist markers are only
    // shipped later, so the metric tells it apart from relists caused by other tests'
    // API server restarts afterwards).
    let relists_while_down = metric(&metrics(&bridge), "deltaship_relists_total");
    let (peak, samples) = rss.finish();
    let down_for = down_at.elapsed();
    outage.start();

    bridge.wait_ready(Duration::from_secs(120));
    let a = audit(&run.read(&written, Duration::from_secs(300)).await, &written);
    let extra = format!(
        " baseline_rss_mib={baseline:.1} rss_samples={samples} broker_down_s={:.0} readyz_503_after_s={:.1} max_queued={max_queued} max_in_flight_plus_held={max_held} relists_while_down={relists_while_down}",
        down_for.as_secs_f64(),
        saw_503.map_or(-1.0, |d| d.as_secs_f64())
    );
    a.print("kafka-long-outage", churn.writes(), "1 Kafka broker outage", peak, &extra);
    diagnose(&bridge, &a);
    a.assert_clean();
    assert!(saw_503.is_some() && still_503, "/readyz must report 503 while the broker is down (first 503 after {saw_503:?}, still at the end: {still_503})");
    assert!(max_queued >= 190.0, "the queue never filled (max {max_queued} of 200): the outage did not back-pressure the watches");
    assert!(max_held <= 100.0, "in flight + held reached {max_held}, over delivery.max_in_flight = 100");
    assert!(peak < PEAK_MIB, "peak RSS {peak:.1} MiB while the broker was down, over {PEAK_MIB} MiB");
    assert!(
        peak - baseline < GROWTH_MIB,
        "RSS grew {:.1} MiB (from {baseline:.1} to {peak:.1}) while the broker was down, over {GROWTH_MIB} MiB",
        peak - baseline
    );
    drop(bridge);
    delete_namespace(&client, &ns).await;
}

/// A bridge killed with SIGKILL mid-stream and started again with the same config: the
/// second run resumes from the first run's checkpoint and continues the watch from its
/// position, so what the first run had not delivered comes as live changes (what it
/// delivered after its last checkpoint write comes again, with the same ids), every
/// object's final seq arrives, and no seq goes backwards.
#[tokio::test(flavor = "multi_thread")]
async fn a_bridge_killed_mid_stream_and_restarted_delivers_every_final_state_in_order() {
    let _serial = SERIAL.lock().await;
    let client = client().await;
    let ns = namespace(&client, "it-fault-kill").await;
    let run = KafkaRun::new();
    let config = run.config(&ns, "");
    let mut first = Bridge::start(&config);
    first.wait_ready(Duration::from_secs(60));
    let rss_first = RssSampler::start(first.pid(), SAMPLE_EVERY);
    let mut churn = Churn::create(&client, &ns, 20, 0).await;
    churn.start(4, Duration::from_millis(100), None);
    churn.wait_writes(150).await;
    first.signal("KILL");
    let writes_at_kill = churn.writes();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut second = Bridge::start(&config);
    second.wait_ready(Duration::from_secs(60));
    let rss_second = RssSampler::start(second.pid(), SAMPLE_EVERY);
    let written = keep_writing(&mut churn, 200).await;
    let a = audit(&run.read(&written, Duration::from_secs(180)).await, &written);
    let peak = rss_first.finish().0.max(rss_second.finish().0);
    a.print("bridge-sigkill", churn.writes(), "1 SIGKILL of the bridge", peak, &format!(" writes_at_kill={writes_at_kill}"));
    a.assert_clean();
    assert_eq!((a.initial_syncs, a.resumes), (1, 1), "the second run resumed from the first run's checkpoint");
    drop((first, second));
    delete_namespace(&client, &ns).await;
}

/// Forced watch expiry (etcd compacted, API server restarted): the watch cannot resume
/// (410 Gone), the bridge relists and the diff ships each changed object's current state,
/// which is never older than what was shipped before.
#[tokio::test(flavor = "multi_thread")]
async fn a_forced_watch_expiry_mid_stream_is_caught_up_by_the_relist_without_going_backwards() {
    let _serial = SERIAL.lock().await;
    let client = client().await;
    let ns = namespace(&client, "it-fault-expire").await;
    let run = KafkaRun::new();
    let mut bridge = Bridge::start(&run.config(&ns, ""));
    bridge.wait_ready(Duration::from_secs(60));
    let rss = RssSampler::start(bridge.pid(), SAMPLE_EVERY);
    let mut churn = Churn::create(&client, &ns, 20, 0).await;
    churn.start(4, Duration::from_millis(100), None);
    churn.wait_writes(100).await;
    // expire-watches compacts etcd at the revision it reads first, then restarts the API
    // server: a watch that saw the very last write before the restart resumes without 410
    // (one run in four did). So the churn pauses for the fault (the API server is down for
    // most of it anyway) and a write the watch never sees puts the compaction past the
    // watch's resourceVersion. The churn resumes at once, while the watch backs off.
    churn.finish().await;
    support::churn::touch_namespace(&client, &ns).await;
    inject("kube", "expire-watches").await;
    churn.start(4, Duration::from_millis(100), None);
    let written = keep_writing(&mut churn, 200).await;
    let a: Audit = audit(&run.read(&written, Duration::from_secs(180)).await, &written);
    let (peak, _) = rss.finish();
    let relists = metric(&metrics(&bridge), "deltaship_relists_total");
    a.print("watch-expiry", churn.writes(), "1 forced watch expiry", peak, &format!(" relists_metric={relists}"));
    diagnose(&bridge, &a);
    a.assert_clean();
    assert!(a.relists >= 1 && relists >= 1.0, "the expiry never made the bridge relist (markers {}, metric {relists})", a.relists);
    drop(bridge);
    delete_namespace(&client, &ns).await;
}

/// The audit itself, on a made-up stream: it must flag a gap without a sync, a step back,
/// a repeated id with another payload, a repeat after a newer event of its object and a
/// missing final seq, and excuse a gap that a relist spans; otherwise the fault tests above
/// could pass without looking.
#[test]
fn the_audit_flags_losses_reorders_and_inexact_or_late_duplicates_but_excuses_gaps_a_relist_covers() {
    let ev = |key: &str, seq: u64, id: &str, digest: u64| Item::Object { key: key.into(), seq: Some(seq), id: id.into(), digest, synced: false };
    let started = |reason: &str, id: &str| Item::Started { reason: reason.into(), sync_id: id.into() };
    let written: BTreeMap<String, u64> = [("n/a", 4), ("n/b", 3), ("n/c", 2)].map(|(k, v)| (k.to_string(), v)).into();
    let log = vec![
        started("initial", "s1"),
        Item::Completed,
        ev("n/a", 0, "a0", 1),
        ev("n/a", 1, "a1", 1),
        ev("n/a", 1, "a1", 1), // an exact repeat: fine
        ev("n/a", 3, "a3", 1), // seq 2 lost: no sync in between
        ev("n/a", 2, "a2", 1), // a step back
        ev("n/a", 4, "a4", 1),
        ev("n/a", 3, "a3", 1), // an exact repeat after a newer event of its object
        ev("n/b", 0, "b0", 1),
        ev("n/b", 0, "b0", 2), // same id, other payload
        started("relist", "s2"),
        ev("n/b", 3, "b3", 1), // 1 and 2 skipped by the relist: excused
        Item::Completed,
        ev("n/c", 0, "c0", 1), // 1 and 2 never arrive
    ];
    let a = audit(&[log], &written);
    assert_eq!((a.lost, a.reordered, a.duplicates, a.inexact_duplicates, a.late_repeats, a.skipped_by_sync, a.relists), (3, 1, 3, 1, 1, 2, 1), "{a:?}");
}
