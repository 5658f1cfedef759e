//! Loading: the file (TOML or YAML), its `${VAR}` values, the `DELTASHIP_` environment on
//! top, then validation; every problem reported at once, each naming its key and the fix.

use std::path::{Path, PathBuf};

use figment::Figment;
use figment::error::{Actual, Kind};
use figment::providers::{Env, Format, Toml};
use figment::value::{Dict, Value};
use serde_saphyr::figment::Yaml;

use super::input::{ENV_NOT_CONFIG, ENV_PREFIX};
use super::interpolate::Interpolated;
use super::kafka::Compression;
use super::model::Config;
use super::template::Template;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {}: {source}", file.display())]
    Unreadable {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read config file {}: it is larger than {} MiB; a config is a few kilobytes", file.display(), MAX_FILE_BYTES >> 20)]
    TooLarge { file: PathBuf },
    #[error(
        "config file {} has an unknown format; use a .toml, .yaml or .yml file",
        file.display()
    )]
    UnknownFormat { file: PathBuf },
    #[error("invalid config ({}):\n{}", file.display(), list(.errors))]
    Invalid { file: PathBuf, errors: Vec<String> },
}

fn list(errors: &[String]) -> String {
    errors.iter().map(|e| format!("  - {e}")).collect::<Vec<_>>().join("\n")
}

/// Loads `file` (TOML or YAML by extension) with `DELTASHIP_` env overrides and validates
/// the result. Every problem is reported at once, each naming its key and the fix.
pub fn load(file: &Path) -> Result<Config, ConfigError> {
    load_with_env(file, Env::prefixed(ENV_PREFIX))
}

/// The largest config file read, in bytes: a config is a few kilobytes.
const MAX_FILE_BYTES: u64 = 4 << 20;

fn load_with_env(file: &Path, env: Env) -> Result<Config, ConfigError> {
    let unreadable = |source| ConfigError::Unreadable { file: file.to_owned(), source };
    let meta = super::secret::regular_file(file).map_err(unreadable)?;
    if meta.len() > MAX_FILE_BYTES {
        return Err(ConfigError::TooLarge { file: file.to_owned() });
    }
    let ext = file.extension().and_then(|e| e.to_str()).unwrap_or("");
    let yaml = match ext {
        "toml" => false,
        "yaml" | "yml" => true,
        _ => {
            return Err(ConfigError::UnknownFormat { file: file.to_owned() });
        }
    };
    // Checked before parsing: a parser spends time and stack on every level.
    let text = std::fs::read_to_string(file).map_err(unreadable)?;
    let mut errors: Vec<String> = super::input::check_depth(&text, yaml)
        .err()
        .map(|e| format!("the file {e}; fix: flatten it (no option is more than 8 levels deep)"))
        .into_iter()
        .collect();
    errors.extend(super::input::check_env_names(std::env::vars_os().map(|(name, _)| name)));
    if !errors.is_empty() {
        return Err(ConfigError::Invalid { file: file.to_owned(), errors });
    }
    let lookup = |name: &str| std::env::var(name).ok();
    let interpolated = if yaml { Interpolated::new(&Yaml::file_exact(file), lookup) } else { Interpolated::new(&Toml::file_exact(file), lookup) };
    let figment = match interpolated {
        Ok(Some(data)) => Figment::from(data),
        // Not readable as data: parsed again as it is, for figment's error naming the place.
        Ok(None) if yaml => Figment::from(Yaml::file_exact(file)),
        Ok(None) => Figment::from(Toml::file_exact(file)),
        Err(errors) => return Err(ConfigError::Invalid { file: file.to_owned(), errors }),
    };
    let env = env.split("__").filter(|key| {
        let key = key.as_str().to_ascii_lowercase();
        !ENV_NOT_CONFIG.iter().any(|p| key.starts_with(p))
    });
    let figment = figment.merge(env);
    let config: Config = figment.extract().map_err(|e| {
        let root = figment.find_value("").ok();
        ConfigError::Invalid { file: file.to_owned(), errors: e.into_iter().map(|e| describe_figment_error(complete_sink_path(e, root.as_ref()))).collect() }
    })?;
    let problems = super::validate::validate(&config);
    if problems.is_empty() {
        Ok(config)
    } else {
        Err(ConfigError::Invalid { file: file.to_owned(), errors: problems.iter().map(ToString::to_string).collect() })
    }
}

/// The fields of a sink parsed into templates when loaded.
const SINK_TEMPLATES: [&str; 3] = ["marker_subject_template", "subject_template", "topic_template"];

/// Inside a sink (its `type` tag buffers the table) figment's key path stops at the sink;
/// the sink in `root` (the merged configuration) completes it: a refused template is found
/// among the sink's templates, and a number refused for its sign or size (`-1` for a count)
/// is the one number in the sink equal to it.
fn complete_sink_path(mut e: figment::Error, root: Option<&Value>) -> figment::Error {
    let sink = root.and_then(|root| {
        e.path.iter().try_fold(root, |value, key| match value {
            Value::Dict(_, dict) => dict.get(key),
            Value::Array(_, items) => items.get(key.parse::<usize>().ok()?),
            _ => None,
        })
    });
    let Some(Value::Dict(_, sink)) = sink else { return e };
    match &e.kind {
        Kind::Message(message) => {
            let refused =
                |field: &str| matches!(sink.get(field), Some(Value::String(_, t)) if Template::parse(t).is_err_and(|p| message.starts_with(&p.to_string())));
            if let Some(field) = SINK_TEMPLATES.into_iter().find(|field| refused(field)) {
                e.path.push(field.into());
            }
        }
        Kind::InvalidValue(number @ (Actual::Signed(_) | Actual::Unsigned(_)), _) => {
            let mut found = Vec::new();
            paths_to(sink, number, &mut Vec::new(), &mut found);
            if let [path] = found.as_slice() {
                e.path.extend(path.iter().cloned());
            }
        }
        _ => {}
    }
    e
}

/// The key paths under `dict` of the numbers equal to `number`, into `found`.
fn paths_to(dict: &Dict, number: &Actual, at: &mut Vec<String>, found: &mut Vec<Vec<String>>) {
    for (key, value) in dict {
        at.push(key.clone());
        match value {
            Value::Dict(_, inner) => paths_to(inner, number, at, found),
            Value::Num(..) if value.to_actual() == *number => found.push(at.clone()),
            _ => {}
        }
        at.pop();
    }
}

/// The key path (without figment's internal profile name), the problem, where it came from
/// (file or environment variable), and the fix for the common cases.
fn describe_figment_error(mut e: figment::Error) -> String {
    // Inside a sink (its `type` tag buffers the table) the path stops at the sink: the
    // unknown field completes it, so the key and the variable are named in full.
    if let Kind::UnknownField(field, _) = &e.kind
        && e.path.last() != Some(field)
    {
        e.path.push(field.clone());
    }
    // A wrong codec likewise: serde's list of the codecs names the key.
    if let Kind::UnknownVariant(_, expected) = &e.kind
        && expected[..] == Compression::NAMES[..]
    {
        e.path.push("compression".into());
    }
    let from = match &e.metadata {
        Some(m) if m.name.contains("environment") => {
            let var: Vec<String> = e.path.iter().map(|k| k.to_ascii_uppercase()).collect();
            format!(" (from the environment variable {ENV_PREFIX}{})", var.join("__"))
        }
        Some(m) => match &m.source {
            Some(source) => format!(" (in {source})"),
            None => format!(" (in {})", m.name),
        },
        None => String::new(),
    };
    // Values of our own types (templates, addresses) say what is wrong, then `; fix: ...`:
    // where the value came from goes between the two.
    if let Kind::Message(message) = &e.kind
        && let Some((problem, fix)) = message.split_once("; fix: ")
    {
        return format!("`{}`: {problem}{from}; fix: {fix}", e.path.join("."));
    }
    let fix = match &e.kind {
        // Only the stdout sink has no keys but `type`.
        Kind::UnknownField(_, []) => "fix: remove the key: this sink takes no keys besides `type` (set `type` to `kafka` or `nats` for theirs)",
        Kind::UnknownField(_, _) => "fix: remove the key or correct its spelling (the expected keys are listed)",
        Kind::MissingField(_) => "fix: add the key; it has no default",
        Kind::UnknownVariant(_, _) => "fix: use one of the listed values",
        Kind::InvalidType(_, _) | Kind::InvalidValue(_, _) => "fix: give the key a value of the expected type",
        _ => "fix: see the configuration reference, docs/reference/configuration.md",
    };
    if e.path.is_empty() { format!("{}{from}; {fix}", e.kind) } else { format!("`{}`: {}{from}; {fix}", e.path.join("."), e.kind) }
}

#[cfg(test)]
mod tests {
    // figment::Jail's closures return figment's (large) error type; not ours to shrink.
    #![allow(clippy::result_large_err)]
    use super::*;
    use crate::config::{DEFAULT_ROUTE, PayloadMode, Secret, SinkConfig};
    use figment::Jail;
    use std::net::SocketAddr;

    fn load_in_jail(jail: &Jail, name: &str) -> Result<Config, ConfigError> {
        load_with_env(&jail.directory().join(name), Env::prefixed(ENV_PREFIX))
    }

    #[test]
    fn minimal_toml_gets_documented_defaults() {
        Jail::expect_with(|jail| {
            jail.create_file("c.toml", "[[resources]]\nversion = \"v1\"\nkind = \"ConfigMap\"\n")?;
            let c = load_in_jail(jail, "c.toml").unwrap();
            assert_eq!(c.cluster, "local");
            assert!(c.sink.is_none());
            let routes = c.effective_routes();
            assert_eq!(routes.len(), 1);
            assert_eq!(routes[0].name, DEFAULT_ROUTE);
            assert!(matches!(routes[0].sink, SinkConfig::Stdout {}));
            assert_eq!(c.delivery.queue_capacity, 2_000);
            assert!(c.resources[0].redact);
            assert_eq!(c.resources[0].payload, PayloadMode::Object);
            Ok(())
        });
    }

    #[test]
    fn env_overrides_file_and_test_variables_are_ignored() {
        Jail::expect_with(|jail| {
            jail.create_file("c.yaml", "cluster: a\nresources:\n  - {version: v1, kind: ConfigMap}\nsink: {type: kafka, brokers: 'x:1'}\n")?;
            jail.set_env("DELTASHIP_SINK__BROKERS", "127.0.0.1:9092");
            jail.set_env("DELTASHIP_CLUSTER", "prod");
            jail.set_env("DELTASHIP_TEST_KAFKA", "ignored");
            let c = load_in_jail(jail, "c.yaml").unwrap();
            assert_eq!(c.cluster, "prod");
            match c.sink {
                Some(SinkConfig::Kafka(k)) => assert_eq!(k.brokers, "127.0.0.1:9092"),
                other => panic!("expected kafka, got {other:?}"),
            }
            Ok(())
        });
    }

    #[test]
    fn file_values_come_from_the_environment_and_stay_masked() {
        Jail::expect_with(|jail| {
            jail.create_file(
                "c.toml",
                "cluster = \"${CLUSTER:-dev}\"\n[[resources]]\nversion = \"v1\"\nkind = \"ConfigMap\"\nnamespaces = [\"${APP_NS}\"]\n\
                 [sink]\ntype = \"kafka\"\nbrokers = \"${KAFKA_BROKERS}\"\n[sink.sasl]\nmechanism = \"PLAIN\"\nusername = \"u\"\npassword = \"${KAFKA_PASSWORD}\"\n",
            )?;
            jail.set_env("APP_NS", "shop");
            jail.set_env("KAFKA_BROKERS", "k0:9092,k1:9092");
            jail.set_env("KAFKA_PASSWORD", "pw-from-env");
            let c = load_in_jail(jail, "c.toml").unwrap();
            assert_eq!((c.cluster.as_str(), c.resources[0].namespaces.as_slice()), ("dev", ["shop".to_string()].as_slice()));
            let shown = serde_json::to_string(&c.masked()).unwrap();
            assert!(shown.contains("k0:9092,k1:9092") && !shown.contains("pw-from-env"), "{shown}");
            match c.sink {
                Some(SinkConfig::Kafka(k)) => assert_eq!(k.sasl.unwrap().password.unwrap().expose(), "pw-from-env"),
                other => panic!("expected kafka, got {other:?}"),
            }
            // An unset variable without a default stops loading, naming the key, the file and the fix.
            jail.create_file("unset.toml", "cluster = \"${NO_SUCH_VARIABLE}\"\n[[resources]]\nversion = \"v1\"\nkind = \"ConfigMap\"\n")?;
            let e = load_in_jail(jail, "unset.toml").unwrap_err().to_string();
            assert!(e.contains("unset.toml") && e.contains("`cluster`: the environment variable NO_SUCH_VARIABLE is not set; fix:"), "{e}");
            Ok(())
        });
    }

    #[test]
    fn unknown_key_is_rejected_with_its_path_file_and_fix() {
        Jail::expect_with(|jail| {
            jail.create_file("c.toml", "[[resources]]\nversion = \"v1\"\nkind = \"ConfigMap\"\nnamespace = \"x\"\n")?;
            let e = load_in_jail(jail, "c.toml").unwrap_err().to_string();
            assert!(e.contains("`resources.0.namespace`: unknown field: found `namespace`"), "{e}");
            assert!(e.contains("namespaces"), "lists the expected keys: {e}");
            assert!(e.contains("c.toml"), "{e}");
            assert!(e.contains("fix:"), "{e}");
            Ok(())
        });
    }

    #[test]
    fn a_stdout_sink_refuses_unknown_keys_from_the_file_and_the_environment() {
        Jail::expect_with(|jail| {
            jail.create_file("c.toml", "[[resources]]\nversion = \"v1\"\nkind = \"ConfigMap\"\n[sink]\ntype = \"stdout\"\nbrokers = \"b:1\"\n")?;
            let e = load_in_jail(jail, "c.toml").unwrap_err().to_string();
            assert!(e.contains("unknown field: found `brokers`") && e.contains("c.toml"), "{e}");
            jail.create_file("e.toml", "[[resources]]\nversion = \"v1\"\nkind = \"ConfigMap\"\n[sink]\ntype = \"stdout\"\n")?;
            jail.set_env("DELTASHIP_SINK__BROKERS", "b:1");
            let e = load_in_jail(jail, "e.toml").unwrap_err().to_string();
            assert!(
                e.contains("`sink.brokers`: unknown field: found `brokers`") && e.contains("DELTASHIP_SINK__BROKERS") && e.contains("no keys besides `type`"),
                "{e}"
            );
            Ok(())
        });
    }

    #[test]
    fn an_unknown_codec_names_its_key_and_the_codecs_from_the_file_and_the_environment() {
        Jail::expect_with(|jail| {
            let kafka = "[[resources]]\nversion = \"v1\"\nkind = \"ConfigMap\"\n[sink]\ntype = \"kafka\"\nbrokers = \"b:1\"\n";
            jail.create_file("c.toml", &format!("{kafka}compression = \"brotli\"\n"))?;
            let e = load_in_jail(jail, "c.toml").unwrap_err().to_string();
            assert!(e.contains("`sink.compression`: unknown variant: found `brotli`") && e.contains("`lz4`, `zstd`") && e.contains("c.toml"), "{e}");
            jail.create_file("e.toml", kafka)?;
            jail.set_env("DELTASHIP_SINK__COMPRESSION", "LZ4");
            let e = load_in_jail(jail, "e.toml").unwrap_err().to_string();
            assert!(e.contains("`sink.compression`") && e.contains("DELTASHIP_SINK__COMPRESSION") && e.contains("fix: use one of the listed values"), "{e}");
            Ok(())
        });
    }

    #[test]
    fn a_number_of_the_wrong_sign_inside_a_sink_names_its_key() {
        Jail::expect_with(|jail| {
            jail.create_file(
                "c.toml",
                "[[resources]]\nversion = \"v1\"\nkind = \"ConfigMap\"\n[sink]\ntype = \"nats\"\nurl = \"n:1\"\n[sink.jetstream]\nduplicate_window_secs = -1\n",
            )?;
            let e = load_in_jail(jail, "c.toml").unwrap_err().to_string();
            assert!(e.contains("`sink.jetstream.duplicate_window_secs`: invalid value signed int `-1`, expected u64"), "{e}");
            Ok(())
        });
    }

    #[test]
    fn misspelled_environment_variables_are_refused_with_the_right_spelling() {
        Jail::expect_with(|jail| {
            jail.create_file("c.toml", "[[resources]]\nversion = \"v1\"\nkind = \"ConfigMap\"\n")?;
            jail.set_env("deltaship_cluster", "prod");
            jail.set_env("DELTASHIP___X", "1");
            let e = load_in_jail(jail, "c.toml").unwrap_err().to_string();
            assert!(e.contains("`deltaship_cluster` is not in capitals; fix: rename it `DELTASHIP_CLUSTER`"), "{e}");
            assert!(e.contains("`DELTASHIP___X` is not a configuration key"), "{e}");
            Ok(())
        });
    }

    #[test]
    fn unknown_sink_type_lists_the_valid_ones() {
        Jail::expect_with(|jail| {
            jail.create_file("c.toml", "[[resources]]\nversion = \"v1\"\nkind = \"ConfigMap\"\n[sink]\ntype = \"kafak\"\n")?;
            let e = load_in_jail(jail, "c.toml").unwrap_err().to_string();
            assert!(e.contains("kafak") && e.contains("kafka") && e.contains("stdout"), "{e}");
            Ok(())
        });
    }

    #[test]
    fn wrong_type_names_the_key() {
        Jail::expect_with(|jail| {
            jail.create_file("c.toml", "[[resources]]\nversion = \"v1\"\nkind = \"ConfigMap\"\n[delivery]\nqueue_capacity = \"big\"\n")?;
            let e = load_in_jail(jail, "c.toml").unwrap_err().to_string();
            assert!(e.contains("delivery.queue_capacity"), "{e}");
            Ok(())
        });
    }

    #[test]
    fn a_bad_template_is_refused_at_load_naming_its_key_the_problem_and_the_fix() {
        Jail::expect_with(|jail| {
            jail.create_file("r.toml", "[[resources]]\nversion = \"v1\"\nkind = \"ConfigMap\"\ntopic = \"cm.{nope}\"\n")?;
            let e = load_in_jail(jail, "r.toml").unwrap_err().to_string();
            assert!(
                e.contains("`resources.0.topic`: `cm.{nope}` uses the unknown placeholder `{nope}` (in ")
                    && e.contains("r.toml); fix: use text and the placeholders"),
                "{e}"
            );
            jail.create_file(
                "s.toml",
                "[[resources]]\nversion = \"v1\"\nkind = \"ConfigMap\"\n[sink]\ntype = \"kafka\"\nbrokers = \"b:1\"\ntopic_template = \"t.{cluster\"\n",
            )?;
            let e = load_in_jail(jail, "s.toml").unwrap_err().to_string();
            assert!(e.contains("`sink.topic_template`: `t.{cluster` has a `{` without a closing `}`") && e.contains("fix: use text"), "{e}");
            jail.create_file("n.toml", "[[resources]]\nversion = \"v1\"\nkind = \"ConfigMap\"\n[[routes]]\nname = \"a\"\nsink = { type = \"nats\", url = \"n:1\", marker_subject_template = \"\" }\n")?;
            let e = load_in_jail(jail, "n.toml").unwrap_err().to_string();
            assert!(e.contains("`routes.0.sink.marker_subject_template`: the template is empty") && e.contains("fix: use text"), "{e}");
            // Good templates serialize back as written, for print-config.
            jail.create_file("g.toml", "[[resources]]\nversion = \"v1\"\nkind = \"ConfigMap\"\ntopic = \"cm-{cluster}\"\n")?;
            let shown = serde_json::to_value(load_in_jail(jail, "g.toml").unwrap()).unwrap();
            assert_eq!(shown["resources"][0]["topic"], "cm-{cluster}");
            Ok(())
        });
    }

    #[test]
    fn a_bad_listen_address_is_refused_at_load_from_the_file_and_the_environment() {
        Jail::expect_with(|jail| {
            jail.create_file("c.toml", "[[resources]]\nversion = \"v1\"\nkind = \"ConfigMap\"\n[http]\nlisten = \"localhost:x\"\n")?;
            let e = load_in_jail(jail, "c.toml").unwrap_err().to_string();
            assert!(e.contains("`http.listen`: `localhost:x` is not an address (in ") && e.contains("fix: use IP:PORT, e.g. `0.0.0.0:9090`"), "{e}");
            jail.create_file("d.toml", "[[resources]]\nversion = \"v1\"\nkind = \"ConfigMap\"\n")?;
            assert_eq!(load_in_jail(jail, "d.toml").unwrap().http.listen, SocketAddr::from(([0, 0, 0, 0], 9090)));
            jail.set_env("DELTASHIP_HTTP__LISTEN", "9090");
            let e = load_in_jail(jail, "d.toml").unwrap_err().to_string();
            assert!(e.contains("`http.listen`") && e.contains("DELTASHIP_HTTP__LISTEN") && e.contains("expected an address IP:PORT"), "{e}");
            jail.set_env("DELTASHIP_HTTP__LISTEN", "127.0.0.1:8080");
            let c = load_in_jail(jail, "d.toml").unwrap();
            assert_eq!(c.http.listen, SocketAddr::from(([127, 0, 0, 1], 8080)));
            assert_eq!(serde_json::to_value(&c).unwrap()["http"]["listen"], "127.0.0.1:8080");
            Ok(())
        });
    }

    #[test]
    fn a_bad_relist_mode_lists_the_valid_ones() {
        Jail::expect_with(|jail| {
            jail.create_file("c.toml", "[[resources]]\nversion = \"v1\"\nkind = \"ConfigMap\"\nrelist = \"partial\"\n")?;
            let e = load_in_jail(jail, "c.toml").unwrap_err().to_string();
            assert!(
                e.contains("`resources.0.relist`")
                    && e.contains("partial")
                    && e.contains("`diff`")
                    && e.contains("`full`")
                    && e.contains("fix: use one of the listed values"),
                "{e}"
            );
            jail.create_file("f.toml", "[[resources]]\nversion = \"v1\"\nkind = \"ConfigMap\"\nrelist = \"full\"\n")?;
            assert_eq!(load_in_jail(jail, "f.toml").unwrap().resources[0].relist, crate::model::SyncMode::Full);
            Ok(())
        });
    }

    #[test]
    fn missing_file_and_unknown_extension_are_clear() {
        Jail::expect_with(|jail| {
            let e = load_in_jail(jail, "nope.toml").unwrap_err();
            assert!(matches!(&e, ConfigError::Unreadable { source, .. } if source.kind() == std::io::ErrorKind::NotFound), "{e:?}");
            let e = e.to_string();
            assert!(e.contains("cannot read config file") && e.contains("nope.toml"), "{e}");
            jail.create_file("big.toml", &"#".repeat(MAX_FILE_BYTES as usize + 1))?;
            let e = load_in_jail(jail, "big.toml").unwrap_err();
            assert!(matches!(e, ConfigError::TooLarge { .. }) && e.to_string().contains("larger than 4 MiB"), "{e}");
            jail.create_file("c.ini", "")?;
            let e = load_in_jail(jail, "c.ini").unwrap_err().to_string();
            assert!(e.contains(".toml, .yaml or .yml"), "{e}");
            Ok(())
        });
    }

    #[test]
    fn masked_config_hides_secret_client_options() {
        Jail::expect_with(|jail| {
            jail.create_file(
                "c.toml",
                "[[resources]]\nversion = \"v1\"\nkind = \"ConfigMap\"\n[sink]\ntype = \"kafka\"\nbrokers = \"b:1\"\n[sink.librdkafka]\n\"sasl.password\" = \"hunter2\"\n\"linger.ms\" = \"5\"\n",
            )?;
            let c = load_in_jail(jail, "c.toml").unwrap().masked();
            let shown = serde_json::to_string(&c).unwrap();
            assert!(!shown.contains("hunter2"), "{shown}");
            assert!(shown.contains("\"linger.ms\":\"5\""), "{shown}");
            Ok(())
        });
    }

    #[test]
    fn masked_config_hides_the_sasl_password_from_the_file_and_the_environment() {
        Jail::expect_with(|jail| {
            jail.create_file("ca.pem", "")?;
            jail.create_file(
                "c.toml",
                "[[resources]]\nversion = \"v1\"\nkind = \"ConfigMap\"\n[sink]\ntype = \"kafka\"\nbrokers = \"b:1\"\ntls = { ca_file = \"ca.pem\" }\n[sink.sasl]\nmechanism = \"SCRAM-SHA-256\"\nusername = \"u\"\npassword = \"hunter2\"\n",
            )?;
            let c = load_in_jail(jail, "c.toml").unwrap();
            let shown = serde_json::to_value(c.masked()).unwrap();
            assert_eq!(shown["sink"]["sasl"]["password"], "***", "{shown}");
            assert_eq!(shown["sink"]["sasl"]["username"], "u", "{shown}");
            assert_eq!(shown["sink"]["tls"]["ca_file"], "ca.pem", "paths are not secrets: {shown}");
            assert!(!shown.to_string().contains("hunter2"), "{shown}");
            // The password can come from the environment alone (librdkafka's `sasl.password`
            // cannot: its name has a dot).
            jail.create_file(
                "e.toml",
                "[[resources]]\nversion = \"v1\"\nkind = \"ConfigMap\"\n[sink]\ntype = \"kafka\"\nbrokers = \"b:1\"\n[sink.sasl]\nmechanism = \"PLAIN\"\nusername = \"u\"\n",
            )?;
            jail.set_env("DELTASHIP_SINK__SASL__PASSWORD", "from-env-pw");
            let c = load_in_jail(jail, "e.toml").unwrap();
            match &c.sink {
                Some(SinkConfig::Kafka(k)) => assert_eq!(k.sasl.as_ref().and_then(|s| s.password.as_ref().map(Secret::expose)), Some("from-env-pw")),
                other => panic!("expected kafka, got {other:?}"),
            }
            let shown = serde_json::to_string(&c.masked()).unwrap();
            assert!(!shown.contains("from-env-pw") && shown.contains("***"), "{shown}");
            Ok(())
        });
    }

    #[test]
    fn a_sasl_password_that_reads_as_a_number_is_refused_without_showing_it_and_quotes_keep_it() {
        Jail::expect_with(|jail| {
            jail.create_file(
                "c.toml",
                "[[resources]]\nversion = \"v1\"\nkind = \"ConfigMap\"\n[sink]\ntype = \"kafka\"\nbrokers = \"b:1\"\n[sink.sasl]\nmechanism = \"PLAIN\"\nusername = \"u\"\n",
            )?;
            jail.set_env("DELTASHIP_SINK__SASL__PASSWORD", "0071234");
            let e = load_in_jail(jail, "c.toml").unwrap_err().to_string();
            assert!(!e.contains("71234") && e.contains("a password or token is a number") && e.contains("quote it"), "{e}");
            jail.set_env("DELTASHIP_SINK__SASL__PASSWORD", "\"0071234\"");
            match load_in_jail(jail, "c.toml").unwrap().sink {
                Some(SinkConfig::Kafka(k)) => assert_eq!(k.sasl.and_then(|s| s.password).as_ref().map(Secret::expose), Some("0071234")),
                other => panic!("expected kafka, got {other:?}"),
            }
            Ok(())
        });
    }

    #[test]
    fn routes_are_loaded_checked_and_masked() {
        Jail::expect_with(|jail| {
            jail.create_file(
                "c.toml",
                r#"
[[resources]]
version = "v1"
kind = "ConfigMap"
[[resources]]
group = "apps"
version = "v1"
kind = "Deployment"
[[routes]]
name = "audit"
sink = { type = "kafka", brokers = "b:1", librdkafka = { "sasl.password" = "hunter2" } }
[[routes]]
name = "trigger"
resources = ["apps/Deployment"]
payload = "reference"
filter = { types = ["updated"] }
sink = { type = "nats", url = "nats://n:4222", auth = { token = "tok3n" } }
"#,
            )?;
            let c = load_in_jail(jail, "c.toml").unwrap();
            let routes = c.effective_routes();
            assert_eq!(routes.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), ["audit", "trigger"]);
            assert!(routes[0].selects(&c.resources[0]) && routes[0].selects(&c.resources[1]));
            assert!(!routes[1].selects(&c.resources[0]) && routes[1].selects(&c.resources[1]));
            let shown = serde_json::to_string(&c.masked()).unwrap();
            assert!(!shown.contains("hunter2") && !shown.contains("tok3n"), "{shown}");
            // With `DELTASHIP_SINK__*` variables, an env override could add `sink` beside
            // `routes`: that is an error naming both.
            jail.set_env("DELTASHIP_SINK__TYPE", "stdout");
            let e = load_in_jail(jail, "c.toml").unwrap_err().to_string();
            assert!(e.contains("`sink`") && e.contains("routes"), "{e}");
            Ok(())
        });
    }

    /// Arbitrary files and environments: the loader answers, never panics.
    mod fuzz {
        use super::*;
        use proptest::prelude::*;

        /// Lines from which configs are assembled: real keys, odd values, tables, deep
        /// nesting and syntax errors, in both formats.
        const FRAGMENTS: [&str; 24] = [
            "[[resources]]",
            "version = \"v1\"",
            "kind = \"ConfigMap\"",
            "namespaces = [\"a\", \"a\"]",
            "ignore_fields = [\"/a~2\"]",
            "[sink]",
            "type = \"nats\"",
            "type = \"kafka\"",
            "url = \"n:1\"",
            "subject_template = \"x.*.{name}\"",
            "[sink.jetstream]",
            "subjects = [\">\", \"a..b\", \"\"]",
            "[delivery]",
            "queue_capacity = 9223372036854775807",
            "queue_capacity = -1",
            "[kubernetes]",
            "resync_secs = 0",
            "resources:",
            "  - {version: v1, kind: Pod}",
            "sink: {type: stdout, x: 1}",
            "a = {b = {c = [[[1]]]}}",
            "x: [[[[",
            "\"\\u0000\" = 1",
            "log: {level: 'a=b=c'}",
        ];

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(128))]

            #[test]
            fn the_loader_never_panics_on_any_file_or_environment(
                lines in proptest::collection::vec(prop_oneof![proptest::sample::select(&FRAGMENTS[..]).prop_map(str::to_string), "[ -~]{0,40}"], 0..16),
                yaml in any::<bool>(),
                env in proptest::collection::vec(("(DELTASHIP|deltaship|DeltaShip)_[A-Za-z0-9_]{0,30}", "[ -~]{0,20}"), 0..4),
            ) {
                Jail::expect_with(|jail| {
                    let name = if yaml { "c.yaml" } else { "c.toml" };
                    jail.create_file(name, &lines.join("\n"))?;
                    for (key, value) in &env {
                        jail.set_env(key, value);
                    }
                    let _ = load_in_jail(jail, name);
                    Ok(())
                });
            }
        }
    }
}
