//! Shared helpers of the integration tests: the real test environment (tests/env), the
//! deltaship binary as a child process and in its image, test configs, the Helm chart, a
//! Kafka reader, an HTTP receiver of CloudEvents, a PostgreSQL database and the analytics
//! replica, the documentation's pages and examples, and the test tier (scale.rs).
#![allow(dead_code)] // each test binary uses a different part

pub mod bridge;
pub mod chart;
pub mod churn;
pub mod config;
pub mod consumers;
pub mod deployment;
pub mod docs;
pub mod dpkg;
pub mod envelope;
pub mod history;
pub mod image;
pub mod kafka;
pub mod kube;
pub mod log;
pub mod nats;
pub mod nats_server;
pub mod node;
pub mod postgres;
pub mod receiver;
pub mod scale;
pub mod scenario;
pub mod secured_kafka;
pub mod state;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The test servers, as tests/env/up exported them. Integration tests need them: missing
/// variables are a failure with the command to run, never a skip.
pub struct TestEnv {
    pub kubeconfig: String,
    pub limited_kubeconfig: String,
    pub kafka: String,
    pub nats: String,
}

/// A variable tests/env/up exported; unset is a failure with the command to run.
pub fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: start the test servers with `tests/env/up` and `source tests/env/.state/env.sh`, or run the whole suite with `tests/run`")
    })
}

pub fn env() -> TestEnv {
    // Every test calls this first, so this marks when the test process started: the NATS
    // helpers read streams from then on (nats::read_until).
    std::sync::LazyLock::force(&nats::STARTED);
    TestEnv {
        kubeconfig: var("KUBECONFIG"),
        limited_kubeconfig: var("DELTASHIP_TEST_KUBECONFIG_LIMITED"),
        kafka: var("DELTASHIP_TEST_KAFKA"),
        nats: var("DELTASHIP_TEST_NATS"),
    }
}

/// The directory of the test servers' state (pids, logs, ports): the one tests/env/up
/// exported in env.sh, or tests/env/.state.
pub fn env_state() -> String {
    std::env::var("DELTASHIP_TEST_ENV_STATE").unwrap_or_else(|_| format!("{}/tests/env/.state", env!("CARGO_MANIFEST_DIR")))
}

/// A name unique to this test run: `prefix-<time>-<pid>-<n>`, valid as a namespace or topic
/// name. The counter keeps two calls in one process apart when the clock has not ticked
/// between them; the process id keeps test binaries apart; the time keeps runs apart.
pub fn unique(prefix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock after 1970").as_secs();
    format!("{prefix}-{:x}-{:x}-{n:x}", secs & 0xff_ffff, std::process::id())
}

/// A process that keeps one core busy while it lives: fault tests run beside it, so that
/// they prove the behaviour on a loaded machine, not only on a quiet one.
pub struct CpuBurner(std::process::Child);

impl CpuBurner {
    pub fn start() -> CpuBurner {
        let child = std::process::Command::new("sh").args(["-c", "while :; do :; done"]).spawn().expect("start a CPU burner (sh)");
        CpuBurner(child)
    }
}

impl Drop for CpuBurner {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
