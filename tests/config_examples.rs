//! Every example in config/ loads, and the stdout and Kafka examples run as they are
//! against the test environment with the env overrides the documentation shows.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use deltaship::config::{self, SinkConfig};

fn examples() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("config"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("toml" | "yaml" | "yml")))
        .collect();
    files.sort();
    files
}

#[test]
fn every_example_config_loads() {
    let files = examples();
    assert!(files.len() >= 3, "{files:?}");
    for f in files {
        let c = config::load(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        assert!(!c.resources.is_empty(), "{}", f.display());
    }
}

#[test]
fn the_all_options_example_shows_every_default() {
    // Each default in the example equals the built-in one, so the file documents them
    // truly: loading it and a minimal file gives the same settings.
    let all = config::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("config/all-options.yaml")).unwrap();
    let dir = std::env::temp_dir().join(support::unique("cfg"));
    std::fs::create_dir_all(&dir).unwrap();
    let minimal = dir.join("m.yaml");
    std::fs::write(&minimal, "resources: [{version: v1, kind: ConfigMap}]\nsink: {type: kafka, brokers: 'localhost:9092', create_topics: {}}\n").unwrap();
    let min = config::load(&minimal).unwrap();
    assert_eq!(serde_json::to_value(&all).unwrap(), serde_json::to_value(&min).unwrap());
}

/// Resources the documentation's config snippets refer to, for snippets that show other keys.
const SNIPPET_RESOURCES: &str =
    "[[resources]]\nversion = \"v1\"\nkind = \"ConfigMap\"\n[[resources]]\ngroup = \"apps\"\nversion = \"v1\"\nkind = \"Deployment\"\n";

/// The TOML block that follows `<!-- config: NAME -->` in the documentation, loaded as a config
/// (with ConfigMaps and Deployments as resources).
fn readme_config(name: &str) -> config::Config {
    let snippet = support::docs::block(&format!("config: {name}"), "toml");
    let dir = std::env::temp_dir().join(support::unique("readme-cfg"));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("{name}.toml"));
    std::fs::write(&file, format!("{SNIPPET_RESOURCES}{snippet}")).unwrap();
    config::load(&file).unwrap_or_else(|e| panic!("config snippet {name}: {e}"))
}

#[test]
fn the_readme_routes_example_loads_as_documented() {
    let c = readme_config("routes");
    let routes = c.effective_routes();
    assert_eq!(routes.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), ["analytics", "functions"]);
    assert!(matches!(routes[0].sink, SinkConfig::Kafka(_)) && matches!(routes[1].sink, SinkConfig::Nats(_)));
    assert!(routes[0].selects(&c.resources[0]) && routes[0].selects(&c.resources[1]));
    assert!(!routes[1].selects(&c.resources[0]) && routes[1].selects(&c.resources[1]));
    assert_eq!(routes[1].payload, Some(config::PayloadMode::Reference));
    assert_eq!(routes[1].format, Some(config::EventFormat::Knative));
}

fn example(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("config").join(name).display().to_string()
}

/// `check`, then `run` until ready, as the documentation shows.
fn check_and_run(name: &str, overrides: &[(&str, &str)]) {
    let deltaship = env!("CARGO_BIN_EXE_deltaship");
    let out = std::process::Command::new(deltaship).args(["check", "--config", &example(name)]).envs(overrides.iter().copied()).output().unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "check {name} failed:\n{report}{}", String::from_utf8_lossy(&out.stderr));
    assert!(report.contains("[ok]   list and watch allowed on configmaps"), "{report}");
    support::bridge::Bridge::start_file(Path::new(&example(name)), overrides).wait_ready(Duration::from_secs(60));
}

#[test]
fn the_stdout_example_runs_as_is() {
    support::env();
    check_and_run("stdout.toml", &[]);
}

#[test]
fn the_nats_example_runs_with_the_server_from_the_environment() {
    let env = support::env();
    check_and_run("nats.toml", &[("DELTASHIP_SINK__URL", &env.nats)]);
}

#[test]
fn the_kafka_example_runs_with_the_brokers_from_the_environment() {
    let env = support::env();
    let c = config::load(Path::new(&example("kafka.toml"))).unwrap();
    assert!(matches!(c.sink, Some(SinkConfig::Kafka(_))));
    check_and_run("kafka.toml", &[("DELTASHIP_SINK__BROKERS", &env.kafka)]);
}
