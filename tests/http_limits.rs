//! The HTTP port under a flood of idle connections: the process holds at most
//! `http.max_connections` of them, /healthz still answers at once, and connections without
//! a request are closed after `http.request_timeout_secs`.

mod support;

use std::io::Read;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use support::bridge::Bridge;
use support::config::TestConfig;
use support::kube::{client, delete_namespace, namespace};

const FLOOD: usize = 2000;
const MAX_CONNECTIONS: usize = 256; // the default
const TIMEOUT_SECS: u64 = 3;

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread")]
async fn idle_connections_neither_exhaust_descriptors_nor_starve_healthz() {
    support::env();
    let kube = client().await;
    let ns = namespace(&kube, "it-http").await;
    let config = TestConfig::new().configmaps(&ns).toml();
    let timeout = TIMEOUT_SECS.to_string();
    let mut bridge = Bridge::start_with_env(&config, &[("DELTASHIP_HTTP__REQUEST_TIMEOUT_SECS", &timeout)]);
    bridge.wait_ready(Duration::from_secs(60));
    let baseline = open_fds(bridge.pid());

    // Connect and send nothing. Beyond the limit the bridge makes room by closing the
    // connections idle the longest, so every connect goes through.
    let started = Instant::now();
    let flood: Vec<TcpStream> = (0..FLOOD)
        .map(|i| TcpStream::connect_timeout(&bridge.http.parse().unwrap(), Duration::from_secs(5)).unwrap_or_else(|e| panic!("connection {i}: {e}")))
        .collect();
    let flooded = started.elapsed();
    let asked = Instant::now();
    let healthz = bridge.get("/healthz");
    let answered = asked.elapsed();
    assert_eq!(healthz.as_ref().map(|(s, _)| *s), Some(200), "{healthz:?}\n{}", bridge.log_text());
    assert!(answered < Duration::from_secs(2), "/healthz took {answered:?} under {FLOOD} idle connections (opened in {flooded:?})");
    let held = open_fds(bridge.pid());
    assert!(held <= baseline + MAX_CONNECTIONS + 8, "{held} open fds with {FLOOD} idle connections (baseline {baseline})");
    assert!(bridge.log_text().contains("HTTP connection limit reached"), "the limit is logged");

    // The idle ones still open are closed after the request timeout.
    std::thread::sleep(Duration::from_secs(TIMEOUT_SECS + 1));
    for (i, mut c) in flood.into_iter().enumerate() {
        c.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        let mut buf = [0u8; 16];
        match c.read(&mut buf) {
            Ok(0) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            other => panic!("connection {i} still open after {TIMEOUT_SECS}s without a request: {other:?}"),
        }
    }
    let after = open_fds(bridge.pid());
    assert!(after <= baseline + 2, "{after} open fds once the idle connections were closed (baseline {baseline})");
    assert_eq!(bridge.get("/readyz").map(|(s, _)| s), Some(200));
    drop(bridge);
    delete_namespace(&kube, &ns).await;
}
