//! The configuration's JSON Schema is generated from the config types (`deltaship schema`).
//! Two copies are kept in the repository, for editors and for the chart:
//! `schemas/config.schema.json`, and the chart's `values.schema.json`, which checks the
//! chart's `config` value with it. This test fails when either differs from what the code
//! generates; regenerate both with `DELTASHIP_BLESS=1 cargo test --test config_schema`.
//! It also holds the schema to the loader: every example loads and validates, and what the
//! loader refuses, the schema refuses at the same key.

mod support;

use std::path::Path;

use deltaship::config;
use figment::Figment;
use figment::providers::{Format, Toml, Yaml};
use serde_json::{Value, json};

const SCHEMA: &str = "schemas/config.schema.json";
const VALUES_SCHEMA: &str = "deploy/helm/deltaship/values.schema.json";
/// Where values.schema.json keeps the configuration's schema among its own definitions.
const CONFIG_DEF: &str = "DeltashipConfig";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn generated() -> String {
    format!("{:#}\n", config::schema())
}

/// values.schema.json with `config` checked by the generated schema: the configuration's
/// definitions beside the chart's, and the configuration's root as one more.
fn values_schema_with(committed: &Value) -> String {
    let schema = config::schema();
    let mut values = committed.clone();
    values["$schema"] = schema["$schema"].clone();
    let mut defs = schema["$defs"].as_object().unwrap().clone();
    let mut config_root = schema.as_object().unwrap().clone();
    for key in ["$schema", "$defs", "title"] {
        config_root.remove(key);
    }
    defs.insert(CONFIG_DEF.into(), Value::Object(config_root));
    values["$defs"] = Value::Object(defs);
    values["properties"]["config"] = json!({
        "$ref": format!("#/$defs/{CONFIG_DEF}"),
        "description": "deltaship's configuration, rendered into the ConfigMap as it is; checked with the schema `deltaship schema` prints."
    });
    format!("{}\n", serde_json::to_string_pretty(&values).unwrap())
}

fn bless() -> bool {
    std::env::var_os("DELTASHIP_BLESS").is_some()
}

#[test]
fn the_committed_schema_is_the_generated_one() {
    let fresh = generated();
    let path = root().join(SCHEMA);
    if bless() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &fresh).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(committed == fresh, "{SCHEMA} is not what the config types say; regenerate it with: DELTASHIP_BLESS=1 cargo test --test config_schema");
    // The command prints the same.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_deltaship")).arg("schema").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8(out.stdout).unwrap(), fresh);
}

#[test]
fn the_charts_values_schema_checks_config_with_it() {
    let path = root().join(VALUES_SCHEMA);
    let committed_text = std::fs::read_to_string(&path).unwrap();
    let fresh = values_schema_with(&serde_json::from_str(&committed_text).unwrap());
    if bless() {
        std::fs::write(&path, &fresh).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap();
    assert!(committed == fresh, "{VALUES_SCHEMA} does not carry the config schema; regenerate it with: DELTASHIP_BLESS=1 cargo test --test config_schema");
}

/// The instance paths the schema finds wrong in `instance`.
fn schema_errors(instance: &Value) -> Vec<String> {
    let schema = config::schema();
    let validator = jsonschema::validator_for(&schema).expect("the generated schema is a valid JSON Schema");
    validator.iter_errors(instance).map(|e| format!("{} ({e})", e.instance_path())).collect()
}

fn read_as_json(file: &Path) -> Value {
    let figment = match file.extension().and_then(|e| e.to_str()) {
        Some("toml") => Figment::from(Toml::file_exact(file)),
        _ => Figment::from(Yaml::file_exact(file)),
    };
    figment.extract().unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

#[test]
fn every_example_config_and_the_charts_default_are_valid() {
    let mut checked = 0;
    for entry in std::fs::read_dir(root().join("config")).unwrap() {
        let file = entry.unwrap().path();
        if matches!(file.extension().and_then(|e| e.to_str()), Some("toml" | "yaml")) {
            assert_eq!(schema_errors(&read_as_json(&file)), Vec::<String>::new(), "{}", file.display());
            checked += 1;
        }
    }
    assert!(checked >= 8, "{checked} examples");
    let values: Value = serde_yaml::from_str(&std::fs::read_to_string(root().join("deploy/helm/deltaship/values.yaml")).unwrap()).unwrap();
    assert_eq!(schema_errors(&values["config"]), Vec::<String>::new(), "the chart's default config");
}

/// A config the loader refuses, and the key the schema names for the same mistake.
const REFUSED: [(&str, &str); 9] = [
    ("resorces: [{version: v1, kind: ConfigMap}]", ""),
    ("resources: [{version: v1, kind: ConfigMap}]\nkubernetes: {page_size: many}", "/kubernetes/page_size"),
    ("resources: [{version: v1, kind: ConfigMap, payload: full}]", "/resources/0/payload"),
    ("resources: [{version: v1}]", "/resources/0"),
    ("resources: [{version: v1, kind: ConfigMap}]\nsink: {type: kafak, brokers: 'b:9092'}", "/sink"),
    ("resources: [{version: v1, kind: ConfigMap}]\nsink: {type: nats, url: 'nats://n:4222', jetstream: {storage: ram}}", "/sink"),
    ("resources: [{version: v1, kind: ConfigMap, redact_fields: [{path: spec, action: drop}]}]", "/resources/0/redact_fields/0/path"),
    ("resources: [{version: v1, kind: ConfigMap}]\nsink: {type: kafka, brokers: 'b:9092', librdkafka: {acks: '0'}}", "/sink"),
    ("resources: [{version: v1, kind: ConfigMap}]\nsink: {type: kafka, brokers: 'b:9092', librdkafka: {acks: 1}}", "/sink"),
];

#[test]
fn what_the_loader_refuses_the_schema_refuses_at_the_same_key() {
    let dir = std::env::temp_dir().join(support::unique("schema"));
    std::fs::create_dir_all(&dir).unwrap();
    for (i, (yaml, at)) in REFUSED.iter().enumerate() {
        let file = dir.join(format!("c{i}.yaml"));
        std::fs::write(&file, yaml).unwrap();
        assert!(config::load(&file).is_err(), "the loader took {yaml}");
        let errors = schema_errors(&read_as_json(&file));
        assert!(errors.iter().any(|e| e.starts_with(&format!("{at} "))), "{yaml}: the schema said {errors:?}, not at `{at}`");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn values_from_the_environment_are_valid_where_strings_are() {
    let config = json!({
        "resources": [{"version": "v1", "kind": "ConfigMap", "namespaces": ["${WATCHED_NAMESPACE}"]}],
        "sink": {"type": "kafka", "brokers": "${KAFKA_BROKERS:-localhost:9092}", "sasl": {"mechanism": "SCRAM-SHA-512", "username": "deltaship", "password": "${KAFKA_PASSWORD}"}}
    });
    assert_eq!(schema_errors(&config), Vec::<String>::new());
}

#[test]
fn the_all_options_example_points_editors_at_the_schema() {
    let example = root().join("config/all-options.yaml");
    let first = std::fs::read_to_string(&example).unwrap().lines().next().unwrap().to_string();
    let path = first.strip_prefix("# yaml-language-server: $schema=").unwrap_or_else(|| panic!("first line: {first}"));
    assert!(example.parent().unwrap().join(path).is_file(), "{path} is not a file beside config/");
}

/// The documentation's configuration snippets (`<!-- config: NAME -->` before a TOML block,
/// in any page): each is valid by the schema once it has resources (those of snippets that
/// show other keys).
#[test]
fn the_documentations_config_snippets_are_valid() {
    let names: Vec<String> = support::docs::marked("config").into_iter().map(|(name, _)| name).collect();
    assert!(names.iter().any(|n| n == "http-webhook") && names.iter().any(|n| n == "http-knative"), "{names:?}");
    for name in names {
        let snippet = support::docs::block(&format!("config: {name}"), "toml");
        let mut config: Value = toml::from_str(&snippet).unwrap_or_else(|e| panic!("config snippet {name}: {e}"));
        if config.get("resources").is_none() {
            config["resources"] = json!([{"version": "v1", "kind": "ConfigMap"}]);
        }
        assert_eq!(schema_errors(&config), Vec::<String>::new(), "config snippet {name}");
    }
}
