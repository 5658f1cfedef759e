//! Bad configuration fails at start-up: `check` and `run` exit 78 (an invalid
//! configuration) naming the key, what is wrong and the fix; never a panic, a hang, a retry
//! forever or a secret in the output.

mod support;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::bridge::EXIT_CONFIG;

const CM: &str = "[[resources]]\nversion = \"v1\"\nkind = \"ConfigMap\"\n";

fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(support::unique("deltaship-config-errors"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `deltaship <command> --config <file>` with `envs`, killed after 20 s (a hang fails the
/// test instead of blocking it): (exit code, stdout + stderr).
fn deltaship(command: &str, file: &Path, envs: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_deltaship"))
        .args([command, "--config"])
        .arg(file)
        .envs(envs.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run deltaship");
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("deltaship {command} with {} did not exit within 20 s", file.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut output = String::new();
    child.stdout.take().unwrap().read_to_string(&mut output).unwrap();
    child.stderr.take().unwrap().read_to_string(&mut output).unwrap();
    (child.wait().unwrap().code(), output)
}

fn write(name: &str, text: &str) -> PathBuf {
    let path = scratch().join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// `check` and `run` both exit 78 with every one of `expected` in their output, and
/// print no panic; returns `run`'s output.
fn refused_with_env(file: &Path, envs: &[(&str, &str)], expected: &[&str]) -> String {
    let mut output = String::new();
    for command in ["check", "run"] {
        let (code, out) = deltaship(command, file, envs);
        assert_eq!(code, Some(EXIT_CONFIG), "{command}: {out}");
        assert!(!out.contains("panicked"), "{command}: {out}");
        for e in expected {
            assert!(out.contains(e), "{command}: `{e}` not in:\n{out}");
        }
        assert!(out.contains("fix:"), "{command}: {out}");
        output = out;
    }
    output
}

fn refused(toml: &str, expected: &[&str]) -> String {
    refused_with_env(&write("c.toml", toml), &[], expected)
}

/// `print-config` loads and validates without any server: exit 0.
fn accepted(toml: &str) {
    let (code, out) = deltaship("print-config", &write("c.toml", toml), &[]);
    assert_eq!(code, Some(0), "{out}");
}

#[test]
fn numbers_out_of_range_exit_2_naming_the_key_and_its_range() {
    // TOML integers stop at i64::MAX; the environment reaches u64::MAX.
    refused_with_env(
        &write("c.toml", &format!("{CM}[delivery]\nqueue_capacity = 9223372036854775807\n[leader_election]\nlease_duration_secs = 9223372036854775807\n")),
        &[("DELTASHIP_KUBERNETES__RESYNC_SECS", "18446744073709551615")],
        &[
            "`delivery.queue_capacity`: 9223372036854775807 is out of range",
            "from 1 to 1000000",
            "`kubernetes.resync_secs`: 18446744073709551615 is out of range",
            "`leader_election.lease_duration_secs`",
        ],
    );
    refused(
        &format!("{CM}[sink]\ntype = \"nats\"\nurl = \"nats://127.0.0.1:1\"\n[sink.jetstream]\nduplicate_window_secs = 9223372036854775807\n"),
        &["`sink.jetstream.duplicate_window_secs`", "from 0 to 31536000"],
    );
    refused(
        &format!("{CM}[sink]\ntype = \"kafka\"\nbrokers = \"127.0.0.1:1\"\n[sink.create_topics]\npartitions = 2000000000\n"),
        &["`sink.create_topics.partitions`: 2000000000 is out of range", "from 1 to 10000"],
    );
    refused(
        &format!("{CM}[runtime]\nworker_threads = 0\n"),
        &["`runtime.worker_threads`: 0 is out of range", "set a number of threads (e.g. 2) from 1 to 1024"],
    );
    accepted(&format!("{CM}[delivery]\nqueue_capacity = 1000000\n[kubernetes]\nresync_secs = 31536000\n[runtime]\nworker_threads = 4\n"));
}

#[test]
fn nats_subjects_with_wildcards_or_outside_the_stream_exit_2() {
    let nats = "[sink]\ntype = \"nats\"\nurl = \"nats://127.0.0.1:1\"\n";
    refused(&format!("{CM}{nats}subject_template = \"x.*.>.{{name}}\"\n"), &["`sink.subject_template`", "wildcard"]);
    refused(
        &format!("{CM}{nats}subject_template = \"k8s.{{namespace}}.{{name}}\"\n"),
        &["`sink.subject_template`", "`k8s.*.*`", "outside the stream's subjects [\"deltaship.>\"]", "sink.jetstream.subjects"],
    );
    // Markers take `.<namespace>.<full|diff>.<started|completed>` after their subject.
    let markers = "deltaship.local._.configmap._sync";
    refused(
        &format!("{CM}{nats}[sink.jetstream]\nsubjects = [\"deltaship.local.*.*.*.*\", \"{markers}\"]\n"),
        &["`sink.marker_subject_template`", "<full|diff>"],
    );
    accepted(&format!("{CM}{nats}[sink.jetstream]\nsubjects = [\"deltaship.local.*.*.*.*\", \"{markers}.*.*.*\"]\n"));
}

#[test]
fn one_kind_watched_twice_into_one_topic_is_refused_as_an_invalid_config_unless_the_namespaces_are_disjoint() {
    let kafka = "[sink]\ntype = \"kafka\"\nbrokers = \"127.0.0.1:1\"\n";
    refused(&format!("{CM}{CM}"), &["`resources[1]`", "resources[0] watches too", "sync.completed"]);
    let twice = format!("{CM}namespaces = [\"a\", \"b\"]\nlabel_selector = \"app=x\"\n{CM}namespaces = [\"b\"]\nlabel_selector = \"app=y\"\n{kafka}");
    let out = refused(&twice, &["`resources[1]`", "ConfigMap", "resources[0]", "one combined selector", "own `topic`"]);
    assert!(!out.contains("`resources[0]`"), "only the second entry is named as the key: {out}");
    accepted(&format!("{CM}namespaces = [\"a\"]\n{CM}namespaces = [\"b\"]\n{kafka}"));
    accepted(&format!("{CM}{CM}topic = \"other\"\n{kafka}"));
}

#[test]
fn json_pointers_with_a_bad_escape_exit_2() {
    refused(&format!("{CM}ignore_fields = [\"/a~2b\"]\n"), &["`resources[0].ignore_fields[0]`", "`~` must be followed by `0` or `1`"]);
    refused(&format!("{CM}filter = {{ changed_paths = [\"/spec~\"] }}\n"), &["`resources[0].filter.changed_paths[0]`"]);
}

#[test]
fn a_stdout_sink_refuses_unknown_keys_from_the_file_and_the_environment() {
    refused(&format!("{CM}[sink]\ntype = \"stdout\"\nbrokers = \"b:1\"\n"), &["`sink.brokers`: unknown field", "no keys besides `type`"]);
    let file = write("c.toml", &format!("{CM}[sink]\ntype = \"stdout\"\n"));
    refused_with_env(&file, &[("DELTASHIP_SINK__BROKERS", "b:1")], &["`sink.brokers`", "DELTASHIP_SINK__BROKERS"]);
}

#[test]
fn an_unknown_compression_codec_is_refused_as_an_invalid_config_naming_the_key_and_the_codecs() {
    let codecs = "`none`, `gzip`, `snappy`, `lz4`, `zstd`";
    refused(&format!("{CM}[sink]\ntype = \"kafka\"\nbrokers = \"b:1\"\ncompression = \"brotli\"\n"), &["`sink.compression`", "`brotli`", codecs]);
    refused(
        &format!("{CM}[[routes]]\nname = \"r\"\nsink = {{ type = \"kafka\", brokers = \"b:1\", compression = \"zip\" }}\n"),
        &["`routes.0.sink.compression`", "`zip`", codecs],
    );
    accepted(&format!("{CM}[sink]\ntype = \"kafka\"\nbrokers = \"b:1\"\ncompression = \"lz4\"\n"));
}

#[test]
fn a_bad_template_listen_address_or_relist_mode_is_refused_as_an_invalid_config_naming_the_key() {
    refused(
        &format!("{CM}topic = \"cm.{{nope}}\"\n"),
        &["`resources.0.topic`: `cm.{nope}` uses the unknown placeholder `{nope}`", "fix: use text and the placeholders"],
    );
    let kafka = "[sink]\ntype = \"kafka\"\nbrokers = \"127.0.0.1:1\"\n";
    refused(&format!("{CM}{kafka}topic_template = \"t.{{cluster\"\n"), &["`sink.topic_template`: `t.{cluster` has a `{` without a closing `}`"]);
    let route = "[[routes]]\nname = \"a\"\nsink = { type = \"nats\", url = \"nats://127.0.0.1:1\", subject_template = \"x.{name\" }\n";
    refused(&format!("{CM}{route}"), &["`routes.0.sink.subject_template`: `x.{name` has a `{` without a closing `}`"]);
    refused(&format!("{CM}[http]\nlisten = \"9090\"\n"), &["`http.listen`: `9090` is not an address", "fix: use IP:PORT, e.g. `0.0.0.0:9090`"]);
    let file = write("c.toml", CM);
    refused_with_env(
        &file,
        &[("DELTASHIP_HTTP__LISTEN", "localhost")],
        &["`http.listen`: `localhost` is not an address (from the environment variable DELTASHIP_HTTP__LISTEN)"],
    );
    refused(&format!("{CM}relist = \"partial\"\n"), &["`resources.0.relist`", "`partial`", "`diff`", "`full`"]);
}

#[test]
fn an_invalid_log_level_is_refused_as_an_invalid_config() {
    refused(&format!("{CM}[log]\nlevel = \"deltaship=loud\"\n"), &["`log.level`", "not a log filter"]);
}

#[test]
fn misspelled_environment_variables_exit_2_with_the_right_spelling() {
    let file = write("c.toml", CM);
    refused_with_env(&file, &[("deltaship_cluster", "prod")], &["`deltaship_cluster` is not in capitals", "`DELTASHIP_CLUSTER`"]);
    refused_with_env(&file, &[("DELTASHIP___X", "1")], &["`DELTASHIP___X` is not a configuration key", "`DELTASHIP_X`"]);
}

#[test]
fn a_deeply_nested_file_is_refused_before_it_is_parsed() {
    // 100,000 levels in 200 KB: parsing it took half a minute.
    let file = write("deep.yaml", &"- ".repeat(100_000));
    for command in ["check", "run"] {
        let started = Instant::now();
        let (code, out) = deltaship(command, &file, &[]);
        assert_eq!(code, Some(EXIT_CONFIG), "{out}");
        assert!(out.contains("nests deeper than 32 levels at line 1") && out.contains("fix:"), "{out}");
        assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    }
}

#[test]
fn a_fifo_as_a_secret_file_is_refused_without_blocking() {
    let dir = scratch();
    let fifo = dir.join("fifo");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let fifo = fifo.display();
    let cases = [
        (
            "sink.sasl.password_file",
            format!("[sink]\ntype = \"kafka\"\nbrokers = \"127.0.0.1:1\"\n[sink.sasl]\nmechanism = \"PLAIN\"\nusername = \"u\"\npassword_file = \"{fifo}\"\n"),
        ),
        ("sink.auth.password_file", format!("[sink]\ntype = \"nats\"\nurl = \"nats://127.0.0.1:1\"\n[sink.auth]\nuser = \"u\"\npassword_file = \"{fifo}\"\n")),
        ("sink.auth.credentials_file", format!("[sink]\ntype = \"nats\"\nurl = \"nats://127.0.0.1:1\"\n[sink.auth]\ncredentials_file = \"{fifo}\"\n")),
        ("redaction.digest_key_file", format!("[redaction]\ndigest_key_file = \"{fifo}\"\n")),
    ];
    for (key, table) in cases {
        refused(&format!("{CM}{table}"), &[&format!("`{key}`"), "not a regular file"]);
    }
    let (code, out) = deltaship("check", &dir.join("fifo"), &[]);
    assert_eq!(code, Some(EXIT_CONFIG), "the config file itself: {out}");
}

#[test]
fn a_secret_librdkafka_value_never_appears_in_the_output() {
    let secret = "Sup3r-S3cret-Value";
    let toml = format!("{CM}[sink]\ntype = \"kafka\"\nbrokers = \"127.0.0.1:1\"\n[sink.librdkafka]\n\"sasl.oauthbearer.client.secret\" = \"{secret}\"\n");
    let out = refused(&toml, &["`sink.librdkafka.\"sasl.oauthbearer.client.secret\"`", "librdkafka refuses it"]);
    assert!(!out.contains(secret), "{out}");
    for command in ["check", "run", "print-config"] {
        let (_, out) = deltaship(command, &write("c.toml", &toml), &[]);
        assert!(!out.contains(secret), "{command}: {out}");
    }
}

#[test]
fn knative_overrides_of_core_attributes_or_with_control_characters_are_refused_naming_the_extension() {
    let file = write("c.toml", &format!("{CM}[sink]\ntype = \"http\"\nurl = \"http://127.0.0.1:9/events\"\n"));
    for name in ["id", "type", "source", "specversion", "subject", "time", "cluster", "partitionkey"] {
        let overrides = format!(r#"{{"extensions": {{"team": "shop", "{name}": "x"}}}}"#);
        refused_with_env(&file, &[("K_CE_OVERRIDES", &overrides)], &["`K_CE_OVERRIDES`", &format!("sets `{name}`"), &format!("remove `{name}`")]);
    }
    refused_with_env(&file, &[("K_CE_OVERRIDES", r#"{"extensions": {"team": "shop\r\nx-evil: 1"}}"#)], &["`K_CE_OVERRIDES`", "`team`", "control character"]);
    refused_with_env(&file, &[("K_CE_OVERRIDES", r#"{"extensions": {"Team": "shop"}}"#)], &["`K_CE_OVERRIDES`", "`Team`", "lowercase"]);
    let (code, out) = deltaship("print-config", &file, &[("K_CE_OVERRIDES", r#"{"extensions": {"team": "shop"}}"#)]);
    assert_eq!(code, Some(0), "{out}");
}

#[test]
fn an_empty_namespace_list_is_refused_saying_to_omit_the_key() {
    refused(&format!("{CM}namespaces = []\n"), &["`resources.0.namespaces`", "is an empty list", "omit the key to watch every namespace"]);
    accepted(CM);
}

#[test]
fn a_log_level_that_is_not_a_level_is_refused_listing_the_levels_and_warning_is_warn() {
    for level in ["inf", "info,deltaship", "verbose"] {
        refused(
            &format!("{CM}[log]\nlevel = \"{level}\"\n"),
            &["`log.level`", "is not a level or `target=level` (valid levels: off, error, warn, info, debug, trace)"],
        );
    }
    accepted(&format!("{CM}[log]\nlevel = \"warning\"\n"));
    accepted(&format!("{CM}[log]\nlevel = \"deltaship=Warning,kube=info\"\n"));
}

#[test]
fn a_default_holding_a_reference_is_resolved() {
    let file = write("c.toml", &format!("{CM}namespaces = [\"${{APP_NS:-${{FALLBACK_NS}}}}\"]\n"));
    let (code, out) = deltaship("print-config", &file, &[("FALLBACK_NS", "shop")]);
    assert_eq!(code, Some(0), "{out}");
    let shown: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(shown["resources"][0]["namespaces"], serde_json::json!(["shop"]), "{out}");
    refused_with_env(&file, &[], &["the environment variable FALLBACK_NS is not set"]);
}
