//! The live bridge against the test servers (tests/env): the ConfigMaps it watches, the
//! release binary started on a config and stopped with SIGTERM, and what it shows while it
//! runs (/readyz, /metrics, its RSS and CPU from /proc).
#![allow(dead_code)] // each bench uses a different part

use std::collections::{BTreeMap, HashSet};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
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
pub const LABEL: &str = "bench.deltaship.dev/set";

/// What a live bench runs with: the counts of ConfigMaps (DELTASHIP_TEST_BENCH_COUNTS),
/// repetitions (DELTASHIP_TEST_BENCH_RUNS, default 3), the binary (DELTASHIP_TEST_BENCH_BIN,
/// default the bench build's), the test servers. Without `--bench`: 20 ConfigMaps, one run.
pub struct Setup {
    pub bench: bool,
    pub counts: Vec<usize>,
    pub runs: usize,
    pub bin: String,
    pub brokers: String,
    pub rt: tokio::runtime::Runtime,
    pub client: Client,
}

pub fn setup(default_counts: &str) -> Setup {
    let bench = crate::common::bench_mode();
    let counts = crate::common::env_or("DELTASHIP_TEST_BENCH_COUNTS", if bench { default_counts.to_string() } else { "20".to_string() })
        .split(',')
        .map(|c| c.trim().parse().expect("DELTASHIP_TEST_BENCH_COUNTS: numbers, comma separated"))
        .collect();
    crate::common::test_env("KUBECONFIG");
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let client = rt.block_on(Client::try_default()).expect("a client for the test API server (KUBECONFIG)");
    Setup {
        bench,
        counts,
        runs: crate::common::env_or("DELTASHIP_TEST_BENCH_RUNS", if bench { 3 } else { 1 }),
        bin: crate::common::env_or("DELTASHIP_TEST_BENCH_BIN", env!("CARGO_BIN_EXE_deltaship").to_string()),
        brokers: crate::common::test_env("DELTASHIP_TEST_KAFKA"),
        rt,
        client,
    }
}

/// The namespace of `count` bench ConfigMaps: `deltaship-bench-<count>` (shared by the
/// benches, created once and reused), or a smoke run's own.
pub fn namespace(count: usize, bench: bool) -> String {
    if bench { format!("deltaship-bench-{count}") } else { format!("deltaship-bench-smoke-{count}") }
}

/// The name of bench ConfigMap number `i`.
pub fn configmap_name(i: usize) -> String {
    format!("cm-{i:06}")
}

/// About 1 KB on the wire, as many small application configs are.
pub fn configmap(name: &str, set: usize) -> ConfigMap {
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

/// Makes `ns` hold the `count` bench ConfigMaps, then lets the API server and etcd settle
/// after a burst of creates.
pub async fn prepare(client: &Client, ns: &str, count: usize, bench: &str) {
    let started = Instant::now();
    let created = ensure_configmaps(client, ns, count).await;
    eprintln!("{bench}: namespace {ns}: {count} ConfigMaps ready ({created} created in {:.1} s)", started.elapsed().as_secs_f64());
    if created > 1000 {
        tokio::time::sleep(Duration::from_secs(20)).await;
    }
}

/// Deletes a smoke run's namespace, and namespaces of more than 10k objects (they weigh on
/// the shared API server) unless DELTASHIP_TEST_BENCH_KEEP_NAMESPACES=1. In bench mode it
/// waits until the namespace is gone: the API server deletes its objects for minutes after
/// the request, which the next bench would measure (its watch events batched by a busy
/// API server cost the bridge less per event: BENCHMARKS.md, 2026-11-29).
pub async fn clean_up(client: &Client, ns: &str, count: usize, bench_mode: bool, bench: &str) {
    let keep = crate::common::env_or("DELTASHIP_TEST_BENCH_KEEP_NAMESPACES", 0u8) == 1;
    if !bench_mode || (count > 10_000 && !keep) {
        let namespaces = Api::<Namespace>::all(client.clone());
        let _ = namespaces.delete(ns, &DeleteParams::default()).await;
        let started = Instant::now();
        while bench_mode && started.elapsed() < NAMESPACE_GONE_WITHIN && namespaces.get_opt(ns).await.is_ok_and(|n| n.is_some()) {
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        let waited = started.elapsed();
        if bench_mode && waited >= NAMESPACE_GONE_WITHIN {
            eprintln!("{bench}: namespace {ns} still being deleted after {:.0} s; going on", waited.as_secs_f64());
        } else {
            eprintln!("{bench}: namespace {ns} deleted ({:.0} s)", waited.as_secs_f64());
        }
    }
}

/// How long a bench waits for a deleted namespace to be gone, at most.
const NAMESPACE_GONE_WITHIN: Duration = Duration::from_secs(900);

/// Makes `ns` hold exactly the ConfigMaps `cm-000000` .. of the set `count` (creating the
/// namespace and the missing ones, deleting strays); returns how many were created.
pub async fn ensure_configmaps(client: &Client, ns: &str, count: usize) -> usize {
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
    let missing: Vec<String> = (0..count).map(configmap_name).filter(|n| !existing.contains(n)).collect();
    let created = missing.len();
    for_each_retried(missing, |name| {
        let api = api.clone();
        async move {
            match api.create(&PostParams::default(), &configmap(&name, count)).await {
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
                other => other.map(drop),
            }
        }
    })
    .await;
    created
}

/// Runs `request` for every name, 32 at a time, each retried up to 5 times (the shared
/// API server is busy under the other engineers' tests); panics when one keeps failing.
pub async fn for_each_retried<F, Fut>(names: Vec<String>, request: F)
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = Result<(), kube::Error>>,
{
    let request = &request;
    futures::stream::iter(names)
        .map(|name| async move {
            for attempt in 0.. {
                match request(name.clone()).await {
                    Ok(()) => return Ok(()),
                    Err(e) if attempt < 5 => {
                        eprintln!("bench: {name}: {e}; retrying");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                    Err(e) => return Err(e),
                }
            }
            unreachable!()
        })
        .buffer_unordered(CREATE_CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await
        .expect("requests to the bench ConfigMaps");
}

pub async fn delete_topic(brokers: &str, topic: &str) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new().set("bootstrap.servers", brokers).create().expect("admin client");
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    if let Err(e) = admin.delete_topics(&[topic], &opts).await {
        eprintln!("bench: could not delete topic {topic}: {e}");
    }
}

/// The config of a bridge watching the ConfigMaps of `ns`, shipping to Kafka topics named
/// after `id` (`<id>.core.configmaps`, 3 partitions), serving HTTP on `port`.
/// Each run checkpoints into a topic of its own (`checkpoint_topic`): a start never reads
/// another run's records.
pub fn kafka_config(cluster: &str, ns: &str, brokers: &str, id: &str, port: u16, log_level: &str) -> String {
    format!(
        "cluster = \"{cluster}\"\n[[resources]]\nversion = \"v1\"\nkind = \"ConfigMap\"\nnamespaces = [\"{ns}\"]\n\
         [sink]\ntype = \"kafka\"\nbrokers = \"{brokers}\"\ntopic_template = \"{id}.{{group}}.{{plural}}\"\n\
         create_topics = {{ partitions = 3 }}\n[http]\nlisten = \"127.0.0.1:{port}\"\n[log]\nlevel = \"{log_level}\"\n\
         [resume]\nkafka_topic = \"{}\"\n",
        checkpoint_topic(id)
    )
}

/// The checkpoint topic of `kafka_config(.., id, ..)`.
pub fn checkpoint_topic(id: &str) -> String {
    format!("{id}.checkpoints")
}

/// The topic of the ConfigMap events of `kafka_config(.., id, ..)`.
pub fn events_topic(id: &str) -> String {
    format!("{id}.core.configmaps")
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `deltaship run` started on a config, its log in a file.
pub struct Bridge {
    child: Child,
    pid: u32,
    addr: String,
    dir: PathBuf,
    log: PathBuf,
    started: Instant,
    /// When /metrics is read (see [`Scrape`]).
    scrape: Scrape,
}

/// When [`Bridge::sample_until`] reads /metrics (a sample's text is empty when it does not).
/// Rendering /metrics ten times a second costs the bridge a few percent of its CPU and keeps
/// its allocator busy, which a Prometheus scraping every 15 s does not: a bench that does not
/// need the figures in a phase reads them less.
#[derive(Clone, Copy, PartialEq)]
pub enum Scrape {
    Always,
    /// Only in the samples where /readyz answers 200 (ready implies every initial sync acked).
    OnceReady,
    Never,
}

/// What the bridge shows at one moment; `secs` counts from the spawn. MB = 10^6 bytes.
pub struct Sample {
    pub secs: f64,
    pub rss_mb: f64,
    /// VmHWM: the highest RSS so far.
    pub hwm_mb: f64,
    pub cpu_secs: f64,
    /// /readyz answers 200.
    pub ready: bool,
    pub metrics: Metrics,
}

impl Bridge {
    /// Writes `config` (whose `[http] listen` is `127.0.0.1:<port>`) to a directory of its
    /// own named `id` and starts `bin run` on it.
    pub fn spawn(bin: &str, id: &str, port: u16, config: &str) -> Bridge {
        Bridge::spawn_under(&[], bin, id, port, config)
    }

    /// [`Bridge::spawn`] with `bin run` as the command that `wrapper` (a program and its
    /// arguments, e.g. `perf record … --`) runs; the bridge is the wrapper's child, and the
    /// wrapper is expected to exit when it does.
    pub fn spawn_under(wrapper: &[String], bin: &str, id: &str, port: u16, config: &str) -> Bridge {
        let dir = std::env::temp_dir().join(id);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("config.toml");
        std::fs::write(&path, config).unwrap();
        let log = dir.join("deltaship.log");
        let started = Instant::now();
        let (program, args) = wrapper.split_first().map_or((bin, &[][..]), |(p, a)| (p.as_str(), a));
        let child = Command::new(program)
            .args(args)
            .args(if wrapper.is_empty() { &[][..] } else { std::slice::from_ref(&bin) })
            .arg("run")
            .arg("--config")
            .arg(&path)
            .env_remove("RUST_LOG")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {program}: {e}; build deltaship with `cargo build --release`"));
        let pid = if wrapper.is_empty() { child.id() } else { child_of(child.id()) };
        Bridge { pid, child, addr: format!("127.0.0.1:{port}"), dir, log, started, scrape: Scrape::Always }
    }

    /// From now on, reads /metrics as `scrape` says.
    pub fn scrape(&mut self, scrape: Scrape) {
        self.scrape = scrape;
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Samples every 100 ms until `done` accepts a sample; all the samples. Panics when the
    /// bridge exits or `timeout` passes.
    pub fn sample_until(&mut self, timeout: Duration, mut done: impl FnMut(&Sample) -> bool) -> Vec<Sample> {
        let mut samples = Vec::new();
        let mut next = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("deltaship exited ({status}):\n{}", self.log());
            }
            let (rss_mb, hwm_mb) = rss(self.pid).unwrap_or_default();
            let (secs, cpu_secs) = (self.started.elapsed().as_secs_f64(), cpu_secs(self.pid));
            let ready = matches!(get(&self.addr, "/readyz"), Some((200, _)));
            let scraped = self.scrape == Scrape::Always || (ready && self.scrape == Scrape::OnceReady);
            let metrics = match scraped.then(|| get(&self.addr, "/metrics")).flatten() {
                Some((200, body)) => body,
                _ => String::new(),
            };
            let sample = Sample { secs, rss_mb, hwm_mb, cpu_secs, ready, metrics: Metrics(metrics) };
            let stop = done(&sample);
            samples.push(sample);
            if stop {
                return samples;
            }
            assert!(self.started.elapsed() < timeout, "deltaship not done within {timeout:?}:\n{}", self.log());
            next += SAMPLE_EVERY;
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
        }
    }

    /// SIGTERM (a graceful stop: the queues drain, the checkpoint is written once more),
    /// then a kill after 40 s; how it (or the wrapper it runs under) exited (`None`:
    /// killed) and its log.
    #[allow(unsafe_code)]
    pub fn stop(mut self) -> (Option<ExitStatus>, String) {
        // SAFETY: kill has no memory-safety preconditions; the pid is the bridge's, our
        // child or the wrapper's.
        unsafe { libc::kill(self.pid as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(40);
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break Some(status);
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let log = self.log();
        let _ = std::fs::remove_dir_all(&self.dir);
        (status, log)
    }
}

/// The text of /metrics (Prometheus exposition); empty when it did not answer.
pub struct Metrics(String);

impl Metrics {
    /// The sum of the series of `name` that carry every one of `labels`.
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.series(name).filter(|(l, _)| labels.iter().all(|want| l.contains(want))).map(|(_, v)| v).sum::<f64>() + 0.0 // an empty sum is -0.0
    }

    /// The sums of the series of `name`, by the value of its label `label`.
    pub fn by(&self, name: &str, label: &str) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        for (labels, v) in self.series(name) {
            if let Some((_, value)) = labels.iter().find(|(k, _)| *k == label) {
                *out.entry(value.to_string()).or_default() += v;
            }
        }
        out
    }

    /// (labels, value) of each series of `name` (label values hold no `,` or `"` here).
    fn series<'a>(&'a self, name: &'a str) -> impl Iterator<Item = (Vec<(&'a str, &'a str)>, f64)> + 'a {
        self.0.lines().filter_map(move |l| {
            let (labels, value) = l.strip_prefix(name)?.rsplit_once(' ')?;
            let labels = if labels.is_empty() { "" } else { labels.strip_prefix('{')?.strip_suffix('}')? };
            let pairs = labels.split(',').filter_map(|p| p.split_once("=\"")).map(|(k, v)| (k, v.trim_end_matches('"'))).collect();
            Some((pairs, value.parse().ok()?))
        })
    }
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
pub fn cpu_secs(pid: u32) -> f64 {
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

/// The processes that serve the test API server (DELTASHIP_TEST_KUBE_SERVER): its
/// kube-apiserver (by `--secure-port`) and the etcd it writes to (by
/// `--listen-client-urls`). A write's cost on this machine is what these spend on it.
pub fn api_server_pids() -> Vec<u32> {
    let server = crate::common::test_env("DELTASHIP_TEST_KUBE_SERVER");
    let port = server.rsplit_once(':').map(|(_, p)| p.trim_end_matches('/')).expect("DELTASHIP_TEST_KUBE_SERVER ends with a port");
    let processes = processes();
    let flag = |args: &[String], name: &str| args.iter().find_map(|a| a.strip_prefix(&format!("--{name}=")).map(str::to_string));
    let (api, args) = processes
        .iter()
        .find(|(_, args)| args[0].ends_with("kube-apiserver") && flag(args, "secure-port").as_deref() == Some(port))
        .unwrap_or_else(|| panic!("no kube-apiserver with --secure-port={port} runs here"));
    let etcd = flag(args, "etcd-servers").expect("the API server's --etcd-servers");
    let (store, _) = processes
        .iter()
        .find(|(_, args)| args[0].ends_with("etcd") && flag(args, "listen-client-urls").as_deref() == Some(etcd.as_str()))
        .unwrap_or_else(|| panic!("no etcd listens on {etcd}"));
    vec![*api, *store]
}

/// The Kafka brokers of the test environment (the processes that run `kafka.Kafka`).
pub fn broker_pids() -> Vec<u32> {
    let brokers: Vec<u32> = processes().into_iter().filter(|(_, args)| args.iter().any(|a| a == "kafka.Kafka")).map(|(pid, _)| pid).collect();
    assert!(!brokers.is_empty(), "no Kafka broker (kafka.Kafka) runs here");
    brokers
}

/// Every process: its pid and its command line.
fn processes() -> Vec<(u32, Vec<String>)> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| {
            let pid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            Some((pid, cmdline.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect()))
        })
        .collect()
}

/// The first child `parent` starts, waited for up to 10 s.
fn child_of(parent: u32) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let children = std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children")).unwrap_or_default();
        if let Some(pid) = children.split_whitespace().next().and_then(|p| p.parse().ok()) {
            return pid;
        }
        assert!(Instant::now() < deadline, "process {parent} started no child within 10 s");
        std::thread::sleep(Duration::from_millis(10));
    }
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
