//! Memory and time to synced of the real bridge (`deltaship run`, Kafka sink) watching
//! the ConfigMaps of one namespace of the test API server (tests/env), at 0, 10k and 100k
//! ConfigMaps of about 1 KB each.
//!
//!   tests/env/up && source tests/env/.state/env.sh
//!   cargo build --release && cargo bench --bench memory
//!
//! Per run: starts the binary, samples /proc/<pid>/status (VmRSS, VmHWM), /metrics and
//! /readyz every 100 ms. `synced` = the first `sync.completed` acknowledged by Kafka
//! (`deltaship_events_total{type="sync.completed"}` counts acknowledged events); `ready` =
//! the first 200 of /readyz (every initial sync acked and the sink probed reachable, the
//! first probe comes 1 s after start); `peak` = the highest RSS until synced (VmHWM);
//! `steady` = the median RSS from 5 s to 10 s after ready. Time counts from the spawn.
//!
//! The namespaces `deltaship-bench-<count>` are created once and reused when they hold
//! the right ConfigMaps (plus the `kube-root-ca.crt` every namespace has). Namespaces of
//! more than 10k objects are deleted afterwards (they weigh on the shared API server)
//! unless DELTASHIP_TEST_BENCH_KEEP_NAMESPACES=1.
//!
//! Environment: DELTASHIP_TEST_BENCH_COUNTS (default `0,10000,100000`), DELTASHIP_TEST_BENCH_RUNS
//! (default 3), DELTASHIP_TEST_BENCH_BIN (default: the bench build's deltaship binary, i.e.
//! target/release/deltaship). Without `--bench` (`cargo test --benches`): one run at 20
//! ConfigMaps as a smoke test.

#[path = "common/mod.rs"]
mod common;

use std::collections::HashSet;
use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use serde_json::json;

const SAMPLE_EVERY: Duration = Duration::from_millis(100);
const CREATE_CONCURRENCY: usize = 32;
const LABEL: &str = "bench.deltaship.dev/set";

fn main() {
    let bench = common::bench_mode();
    let counts: Vec<usize> = common::env_or("DELTASHIP_TEST_BENCH_COUNTS", if bench { "0,10000,100000".to_string() } else { "20".to_string() })
        .split(',')
        .map(|c| c.trim().parse().expect("DELTASHIP_TEST_BENCH_COUNTS: numbers, comma separated"))
        .collect();
    let runs: usize = common::env_or("DELTASHIP_TEST_BENCH_RUNS", if bench { 3 } else { 1 });
    let steady_secs: u64 = if bench { 10 } else { 2 };
    let bin = common::env_or("DELTASHIP_TEST_BENCH_BIN", env!("CARGO_BIN_EXE_deltaship").to_string());
    let keep = common::env_or("DELTASHIP_TEST_BENCH_KEEP_NAMESPACES", 0u8) == 1;
    common::test_env("KUBECONFIG");
    let brokers = common::test_env("DELTASHIP_TEST_KAFKA");
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let client = rt.block_on(Client::try_default()).expect("a client for the test API server (KUBECONFIG)");
    for count in counts {
        let ns = if bench { format!("deltaship-bench-{count}") } else { format!("deltaship-bench-smoke-{count}") };
        let started = Instant::now();
        let created = rt.block_on(ensure_configmaps(&client, &ns, count));
        eprintln!("memory: namespace {ns}: {count} ConfigMaps ready ({created} created in {:.1} s)", started.elapsed().as_secs_f64());
        if created > 1000 {
            // Let the API server and etcd settle after a burst of creates.
            std::thread::sleep(Duration::from_secs(20));
        }
        let mut results = Vec::new();
        for run in 0..runs {
            let r = run_bridge(&bin, &ns, &brokers, steady_secs);
            println!(
                "{}",
                json!({"bench": "memory", "objects": count, "run": run, "synced_secs": r.synced_secs, "ready_secs": r.ready_secs,
                       "peak_rss_mb": r.peak_mb, "steady_rss_mb": r.steady_mb,
                       "sync_cpu_secs": r.sync_cpu_secs, "samples": r.samples, "smoke": !bench})
            );
            rt.block_on(delete_topic(&brokers, &r.topic));
            results.push(r);
        }
        let col = |f: fn(&Run) -> f64| common::stats(&results.iter().map(f).collect::<Vec<_>>());
        let s = |(median, min, max): (f64, f64, f64)| json!({"median": median, "min": min, "max": max});
        let ratios: Vec<f64> = results.iter().map(|r| r.peak_mb / r.steady_mb).collect();
        println!(
            "{}",
            json!({"bench": "memory", "summary": true, "objects": count, "runs": results.len(),
                   "synced_secs": s(col(|r| r.synced_secs)), "ready_secs": s(col(|r| r.ready_secs)), "peak_rss_mb": s(col(|r| r.peak_mb)),
                   "steady_rss_mb": s(col(|r| r.steady_mb)), "peak_over_steady": s(common::stats(&ratios)),
                   "sync_cpu_secs": s(col(|r| r.sync_cpu_secs)), "smoke": !bench})
        );
        if !bench || (count > 10_000 && !keep) {
            rt.block_on(async {
                let _ = Api::<Namespace>::all(client.clone()).delete(&ns, &DeleteParams::default()).await;
            });
            eprintln!("memory: namespace {ns} deleted");
        }
    }
}

/// About 1 KB on the wire, as many small application configs are.
fn configmap(name: &str, set: usize) -> ConfigMap {
    let mut settings = String::new();
    for i in 0..16 {
        settings.push_str(&format!("setting_{i:02}: value-{name}-{i:02}-abcdefghij\n"));
    }
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {LABEL: set.to_string(), "app.kubernetes.io/name": "bench"}},
        "data": {"application.yaml": settings, "mode": "production"},
    }))
    .unwrap()
}

/// Makes `ns` hold exactly the ConfigMaps `cm-000000` .. of the set `count` (creating the
/// namespace and the missing ones, deleting strays); returns how many were created.
async fn ensure_configmaps(client: &Client, ns: &str, count: usize) -> usize {
    let namespaces = Api::<Namespace>::all(client.clone());
    loop {
        match namespaces.get_opt(ns).await.expect("get namespace") {
            Some(n) if n.metadata.deletion_timestamp.is_some() => tokio::time::sleep(Duration::from_secs(1)).await,
            Some(_) => break,
            None => {
                let n: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
                namespaces.create(&PostParams::default(), &n).await.expect("create the bench namespace");
                break;
            }
        }
    }
    let api = Api::<ConfigMap>::namespaced(client.clone(), ns);
    let mut existing = HashSet::new();
    let mut lp = ListParams::default().labels(LABEL).limit(5000);
    loop {
        let page = api.list_metadata(&lp).await.expect("list the bench ConfigMaps");
        for cm in &page.items {
            let name = cm.metadata.name.clone().unwrap_or_default();
            let set = cm.metadata.labels.as_ref().and_then(|l| l.get(LABEL)).cloned().unwrap_or_default();
            if set == count.to_string() {
                existing.insert(name);
            } else {
                let _ = api.delete(&name, &DeleteParams::default()).await;
            }
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => lp = lp.continue_token(&c),
            None => break,
        }
    }
    let missing: Vec<String> = (0..count).map(|i| format!("cm-{i:06}")).filter(|n| !existing.contains(n)).collect();
    let created = missing.len();
    futures::stream::iter(missing)
        .map(|name| {
            let api = api.clone();
            async move {
                let cm = configmap(&name, count);
                for attempt in 0.. {
                    match api.create(&PostParams::default(), &cm).await {
                        Ok(_) => return Ok(()),
                        Err(kube::Error::Api(e)) if e.code == 409 => return Ok(()),
                        Err(e) if attempt < 5 => {
                            eprintln!("memory: create {name}: {e}; retrying");
                            tokio::time::sleep(Duration::from_millis(500)).await;
                        }
                        Err(e) => return Err(e),
                    }
                }
                unreachable!()
            }
        })
        .buffer_unordered(CREATE_CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await
        .expect("create the bench ConfigMaps");
    created
}

struct Run {
    synced_secs: f64,
    ready_secs: f64,
    peak_mb: f64,
    steady_mb: f64,
    sync_cpu_secs: f64,
    samples: usize,
    topic: String,
}

/// (VmRSS, VmHWM) in MB (10^6 bytes; /proc reports KiB).
fn rss(pid: u32) -> Option<(f64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map(|kib| kib * 1024.0 / 1e6)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// User + system CPU time of `pid`, in seconds.
#[allow(unsafe_code)]
fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of stat, 12 and 13 after the ')'.
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (ticks(11) + ticks(12)) / hz
}

/// GET `path` from the bridge's HTTP server: (status, body).
fn get(addr: &str, path: &str) -> Option<(u16, String)> {
    let mut s = std::net::TcpStream::connect_timeout(&addr.parse().unwrap(), Duration::from_millis(200)).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").ok()?;
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default()))
}

/// Whether /readyz answers 200.
fn ready(addr: &str) -> bool {
    matches!(get(addr, "/readyz"), Some((200, _)))
}

/// Whether the sink acknowledged a `sync.completed` (deltaship_events_total counts events
/// acknowledged by the sink).
fn synced(addr: &str) -> bool {
    let Some((200, body)) = get(addr, "/metrics") else { return false };
    body.lines().any(|l| {
        l.starts_with("deltaship_events_total{")
            && l.contains("type=\"sync.completed\"")
            && l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()).is_some_and(|v| v >= 1.0)
    })
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[allow(unsafe_code)]
fn run_bridge(bin: &str, ns: &str, brokers: &str, steady_secs: u64) -> Run {
    let id = common::unique("dsbench-mem");
    let port = free_port();
    let dir = std::env::temp_dir().join(&id);
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        format!(
            "cluster = \"bench\"\n[[resources]]\nversion = \"v1\"\nkind = \"ConfigMap\"\nnamespaces = [\"{ns}\"]\n\
             [sink]\ntype = \"kafka\"\nbrokers = \"{brokers}\"\ntopic_template = \"{id}.{{group}}.{{plural}}\"\n\
             create_topics = {{ partitions = 3 }}\n[http]\nlisten = \"127.0.0.1:{port}\"\n[log]\nlevel = \"warn\"\n"
        ),
    )
    .unwrap();
    let log = dir.join("deltaship.log");
    let started = Instant::now();
    let mut child: Child = Command::new(bin)
        .arg("run")
        .arg("--config")
        .arg(&config)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {bin}: {e}; build it with `cargo build --release`"));
    let pid = child.id();
    let addr = format!("127.0.0.1:{port}");
    let mut samples: Vec<(f64, f64, f64)> = Vec::new(); // (secs since start, rss, hwm)
    let mut synced_at: Option<f64> = None;
    let mut ready_at: Option<f64> = None;
    let mut hwm_at_synced = 0.0;
    let mut cpu_at_synced = 0.0;
    let mut next = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("deltaship exited ({status}):\n{}", std::fs::read_to_string(&log).unwrap_or_default());
        }
        let t = started.elapsed().as_secs_f64();
        if let Some((rss, hwm)) = rss(pid) {
            samples.push((t, rss, hwm));
        }
        if synced_at.is_none() && synced(&addr) {
            synced_at = Some(started.elapsed().as_secs_f64());
            hwm_at_synced = rss(pid).map(|s| s.1).unwrap_or(0.0);
            cpu_at_synced = cpu_secs(pid);
        }
        if synced_at.is_some() && ready_at.is_none() && ready(&addr) {
            ready_at = Some(started.elapsed().as_secs_f64());
        }
        if let Some(r) = ready_at
            && t > r + steady_secs as f64
        {
            break;
        }
        assert!(t < 900.0, "deltaship not ready within 900 s:\n{}", std::fs::read_to_string(&log).unwrap_or_default());
        next += SAMPLE_EVERY;
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    // SAFETY: kill has no memory-safety preconditions; the pid is our child's.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(40);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = std::fs::remove_dir_all(&dir);
    let ready = ready_at.unwrap();
    let synced = synced_at.unwrap();
    let peak_sampled = samples.iter().filter(|s| s.0 <= synced).map(|s| s.1).fold(0.0, f64::max);
    let steady: Vec<f64> = samples.iter().filter(|s| s.0 >= ready + steady_secs as f64 / 2.0).map(|s| s.1).collect();
    Run {
        synced_secs: synced,
        ready_secs: ready,
        peak_mb: hwm_at_synced.max(peak_sampled),
        steady_mb: common::stats(&steady).0,
        sync_cpu_secs: cpu_at_synced,
        samples: samples.len(),
        topic: format!("{id}.core.configmaps"),
    }
}

async fn delete_topic(brokers: &str, topic: &str) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new().set("bootstrap.servers", brokers).create().expect("admin client");
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    if let Err(e) = admin.delete_topics(&[topic], &opts).await {
        eprintln!("memory: could not delete topic {topic}: {e}");
    }
}
