//! The configuration's JSON Schema is generated from the config types (`deltaship schema`).
//! Two copies are kept in the repository, for editors and for the chart:
//! `schemas/config.schema.json`, and the chart's `values.schema.json`, which checks the
//! chart's `config` value with it. This test fails when either differs from what the code
//! generates; regenerate both with `DELTASHIP_BLESS=1 cargo test --test config_schema`.
//! It also holds the schema to the loader: every example loads and validates, what the
//! loader refuses, the schema refuses at the same key, and both take and refuse the same
//! numbers at each end of every bounded option's range (`config::BOUNDS`).

mod support;

use std::path::Path;

use deltaship::config;
use figment::Figment;
use figment::providers::{Format, Toml};
use serde_json::{Value, json};
use serde_saphyr::figment::Yaml;

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
    let values: Value = serde_saphyr::from_str(&std::fs::read_to_string(root().join("deploy/helm/deltaship/values.yaml")).unwrap()).unwrap();
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

/// A minimal sink of each kind, for the bounded options under `sink`.
const SINKS: [(&str, &str); 3] = [
    ("kafka", r#"{"type": "kafka", "brokers": "b:9092"}"#),
    ("nats", r#"{"type": "nats", "url": "nats://n:4222"}"#),
    ("http", r#"{"type": "http", "url": "http://h/x"}"#),
];

/// A minimal configuration with the option `key` (as `config::Bound` names it, e.g.
/// `resources[].resync_secs` or `sink.jetstream.replicas`) set to `value`, and the option's
/// path in it (`/resources/0/resync_secs`). An option under `sink` goes into a sink of the
/// kind whose schema has it.
fn with_option(schema: &Value, key: &str, value: Value) -> (Value, String) {
    let mut config = json!({"resources": [{"version": "v1", "kind": "ConfigMap"}]});
    let parts: Vec<&str> = key.split('.').collect();
    if parts[0] == "sink" {
        let kinds = schema["$defs"]["SinkConfig"]["oneOf"].as_array().unwrap();
        let kind = kinds.iter().find(|k| k["properties"].get(parts[1]).is_some()).unwrap_or_else(|| panic!("no sink has `{}`", parts[1]));
        let kind = kind["properties"]["type"]["const"].as_str().unwrap();
        let sink = SINKS.iter().find(|(k, _)| *k == kind).unwrap_or_else(|| panic!("add a minimal `{kind}` sink to SINKS"));
        config["sink"] = serde_json::from_str(sink.1).unwrap();
    }
    let mut path = String::new();
    let mut at = &mut config;
    for (i, part) in parts.iter().enumerate() {
        let (name, item) = part.strip_suffix("[]").map_or((*part, false), |name| (name, true));
        path.push_str(&format!("/{name}"));
        at = if i + 1 == parts.len() {
            &mut at[name]
        } else if item {
            path.push_str("/0");
            &mut at[name][0]
        } else {
            at.as_object_mut().unwrap().entry(name).or_insert_with(|| json!({}))
        };
    }
    *at = value;
    (config, path)
}

/// Whether the loader's error names the option at `path`, as figment does
/// (`resources.0.resync_secs`) or as validation does (`resources[0].resync_secs`).
fn names(error: &str, path: &str) -> Option<String> {
    let dotted = path.trim_start_matches('/').replace('/', ".");
    let indexed = dotted.replace(".0.", "[0].");
    error.lines().find(|l| l.contains(&format!("`{dotted}`")) || l.contains(&format!("`{indexed}`"))).map(str::to_string)
}

/// What the loader says of `file` when it refuses it, as `deltaship print-config` loads it
/// in an environment of its own (the caller's `DELTASHIP_` variables would be read too).
fn load_refusal(file: &Path) -> Option<String> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_deltaship")).env_clear().arg("print-config").arg("--config").arg(file).output().unwrap();
    (!out.status.success()).then(|| String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn the_schema_and_the_loader_take_and_refuse_the_same_numbers_at_every_bound() {
    let schema = config::schema();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let dir = std::env::temp_dir().join(support::unique("bounds"));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("c.yaml");
    let mut disagreements = Vec::new();
    for bound in config::BOUNDS {
        let (min, max) = (i128::from(bound.min), i128::from(bound.max));
        for (value, valid) in [(min, true), (max, true), (min - 1, false), (max + 1, false)] {
            let number = if value < 0 { Value::from(value as i64) } else { Value::from(value as u64) };
            let (instance, path) = with_option(&schema, bound.key, number);
            // Inside a sink (a `oneOf` of kinds), the schema names the sink.
            let at_option = |e: &jsonschema::ValidationError| path.starts_with(&e.instance_path().to_string());
            let other = validator.iter_errors(&instance).find(|e| !at_option(e));
            assert!(other.is_none(), "{}: the schema refuses something else in {instance}: {}", bound.key, other.unwrap());
            let schema_refuses = validator.iter_errors(&instance).next().is_some();
            std::fs::write(&file, instance.to_string()).unwrap();
            let refusal = load_refusal(&file).and_then(|e| names(&e, &path));
            if schema_refuses == valid {
                disagreements.push(format!("{} = {value}: the schema {}", bound.key, if valid { "refuses it" } else { "takes it" }));
            }
            match &refusal {
                Some(line) if valid => disagreements.push(format!("{} = {value}: the loader refuses it: {line}", bound.key)),
                None if !valid => disagreements.push(format!("{} = {value}: the loader takes it", bound.key)),
                // A number the option's type holds is refused by validation, naming the range.
                Some(line) if (0..=i128::from(i64::MAX)).contains(&value) && !line.contains(&format!("from {min} to {max}")) => {
                    disagreements.push(format!("{} = {value}: the loader's refusal does not name the range: {line}", bound.key))
                }
                _ => {}
            }
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(disagreements.is_empty(), "the schema and the loader disagree:\n{}", disagreements.join("\n"));
    assert!(config::BOUNDS.len() >= 25, "{} bounds", config::BOUNDS.len());
}

/// The numbers written around each key of `config/all-options.yaml`: its trailing comment and
/// the comment block above it (shared by keys listed one after the other), as
/// `(key, text)`.
fn commented_keys(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut block = String::new();
    let mut after_key = false;
    for line in text.lines().map(str::trim_start) {
        if let Some(comment) = line.strip_prefix('#') {
            if after_key {
                block.clear();
            }
            block.push(' ');
            block.push_str(comment.trim());
            after_key = false;
        } else if let Some((key, rest)) = line.split_once(':').filter(|(key, _)| !key.is_empty() && !key.contains(' ')) {
            let trailing = rest.split_once(" #").map_or("", |(_, c)| c);
            out.push((key.to_string(), format!("{block} {trailing}")));
            after_key = true;
        } else {
            block.clear();
            after_key = false;
        }
    }
    out
}

/// The `A to B` ranges and `at most B` limits written in `text`, as (Some(A), B) and (None, B).
fn stated_ranges(text: &str) -> Vec<(Option<i64>, i64)> {
    let number_before = |i: usize| text[..i].rsplit(|c: char| !c.is_ascii_digit()).next().and_then(|d| d.parse().ok());
    let number_after = |i: usize| text[i..].split(|c: char| !c.is_ascii_digit()).next().and_then(|d| d.parse().ok());
    let ranges = text.match_indices(" to ").filter_map(|(i, m)| Some((Some(number_before(i)?), number_after(i + m.len())?)));
    let limits = text.match_indices("at most ").filter_map(|(i, m)| Some((None, number_after(i + m.len())?)));
    ranges.chain(limits).collect()
}

#[test]
fn the_ranges_the_all_options_example_states_are_the_loaders() {
    let text = std::fs::read_to_string(root().join("config/all-options.yaml")).unwrap();
    let keys = commented_keys(&text);
    let mut checked = 0;
    for bound in config::BOUNDS {
        for (_, comment) in keys.iter().filter(|(key, _)| key == bound.field()) {
            for (min, max) in stated_ranges(comment) {
                assert!(
                    min.is_none_or(|min| min == bound.min) && max == bound.max,
                    "config/all-options.yaml says {}{max} for {}, the loader {} to {}",
                    min.map_or("at most ".to_string(), |min| format!("{min} to ")),
                    bound.key,
                    bound.min,
                    bound.max
                );
                checked += 1;
            }
        }
    }
    assert!(checked >= 15, "{checked} ranges found in config/all-options.yaml");
}
