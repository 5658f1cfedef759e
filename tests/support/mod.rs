//! Shared helpers of the integration tests: the real test environment (tests/env), the
//! deltaship binary as a child process, and a Kafka reader.
#![allow(dead_code)] // each test binary uses a different part

pub mod bridge;
pub mod churn;
pub mod kafka;
pub mod kube;
pub mod nats;
pub mod nats_server;
pub mod state;

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
    TestEnv {
        kubeconfig: var("KUBECONFIG"),
        limited_kubeconfig: var("DELTASHIP_TEST_KUBECONFIG_LIMITED"),
        kafka: var("DELTASHIP_TEST_KAFKA"),
        nats: var("DELTASHIP_TEST_NATS"),
    }
}

/// A name unique to this test run: `prefix-<hex>`, valid as a namespace or topic name.
pub fn unique(prefix: &str) -> String {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock after 1970").as_nanos();
    format!("{prefix}-{:x}", (nanos ^ (std::process::id() as u128) << 40) & 0xffff_ffff_ffff)
}

/// The `lang` code block that follows `<!-- MARKER -->` in the README (e.g. marker
/// `config: routes`, lang `toml`): the README's examples are tested as written.
pub fn readme_block(marker: &str, lang: &str) -> String {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let marker = format!("<!-- {marker} -->");
    let after = &readme[readme.find(&marker).unwrap_or_else(|| panic!("README has no {marker}"))..];
    let fence = format!("```{lang}\n");
    let start = after.find(&fence).unwrap_or_else(|| panic!("no {lang} block after {marker}")) + fence.len();
    let end = after[start..].find("```").unwrap();
    after[start..start + end].to_string()
}
