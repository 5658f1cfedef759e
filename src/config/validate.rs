//! Start-up validation of a loaded configuration: each section checks itself, then what
//! spans sections (routes against resources, destinations); each problem names its key and
//! the fix.

use super::model::Config;
use super::names::is_dns_subdomain;
use super::problem::{Problem, problem};
use super::{destinations, route};

pub(super) fn validate(c: &Config) -> Vec<Problem> {
    let mut out = Vec::new();
    if !is_dns_subdomain(&c.cluster) {
        out.push(problem("cluster", format!("`{}` is not a valid cluster name", c.cluster), "use lowercase letters, digits, `-` and `.`, e.g. `prod-eu-1`"));
    }
    if let Some(base) = &c.dataschema_base
        && !url::Url::parse(base).is_ok_and(|u| !u.cannot_be_a_base() && base.ends_with('/'))
    {
        out.push(problem(
            "dataschema_base",
            format!("`{base}` is not a URL ending in `/`"),
            "give the URL of the published schemas/events/ directory, e.g. `https://schemas.example.com/deltaship/events/`",
        ));
    }
    c.kubernetes.validate(&mut out);
    if c.resources.is_empty() {
        out.push(problem(
            "resources",
            "no resource to watch",
            "add at least one [[resources]] entry with `version` and `kind`, e.g. version = \"v1\", kind = \"ConfigMap\"",
        ));
    }
    let digest_key = c.redaction.digest_key_file.is_some();
    for (i, r) in c.resources.iter().enumerate() {
        r.validate(&mut out, i, digest_key);
    }
    route::validate_routes(&mut out, c.sink.as_ref(), &c.routes, &c.resources);
    c.redaction.validate(&mut out);
    out.extend(destinations::validate(c));
    c.delivery.validate(&mut out);
    c.runtime.validate(&mut out);
    c.resume.validate(&mut out);
    c.leader_election.validate(&mut out);
    c.log.validate(&mut out);
    c.http.validate(&mut out);
    out
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::config::{ResourceConfig, SinkConfig, Template};

    pub(in crate::config) fn base() -> Config {
        serde_json::from_value(serde_json::json!({
            "resources": [{"version": "v1", "kind": "ConfigMap"}]
        }))
        .unwrap()
    }

    pub(in crate::config) fn keys(c: &Config) -> Vec<String> {
        validate(c).into_iter().map(|p| p.key).collect()
    }

    #[test]
    fn a_minimal_config_is_valid() {
        assert!(validate(&base()).is_empty());
    }

    #[test]
    fn each_mistake_names_its_key() {
        let mut c = base();
        c.cluster = "Prod_1".into();
        c.resources.push(ResourceConfig {
            kind: "Secret".into(),
            namespaces: vec!["Bad_NS".into()],
            label_selector: Some("app=a,,b".into()),
            ignore_fields: vec!["status".into()],
            topic: Template::parse("t.{name}").ok(),
            ..c.resources[0].clone()
        });
        c.delivery.queue_capacity = 0;
        c.delivery.retry_initial_ms = 60_000;
        assert_eq!(
            keys(&c),
            [
                "cluster",
                "resources[1].namespaces[0]",
                "resources[1].label_selector",
                "resources[1].ignore_fields[0]",
                "resources[1].topic",
                "delivery.queue_capacity",
                "delivery.retry_initial_ms",
            ]
        );
        let shown = validate(&c)[4].to_string();
        assert!(shown.contains("{name}") && shown.contains("fix:"), "{shown}");
    }

    #[test]
    fn checkpoint_store_names_must_be_valid_kafka_topic_and_bucket_names() {
        let mut c = base();
        c.resume.kafka_topic = "checkpoints/prod".into();
        c.resume.nats_bucket = "deltaship.checkpoints".into();
        assert_eq!(keys(&c), ["resume.kafka_topic", "resume.nats_bucket"]);
        c.resume.kafka_topic = "..".into();
        c.resume.nats_bucket = "ok_bucket-1".into();
        assert_eq!(keys(&c), ["resume.kafka_topic"]);
    }

    #[test]
    fn no_resources_is_an_error_with_an_example() {
        let mut c = base();
        c.resources.clear();
        let p = &validate(&c)[0];
        assert_eq!(p.key, "resources");
        assert!(p.fix.contains("kind = \"ConfigMap\""));
    }

    #[test]
    fn kafka_sink_fields_are_checked() {
        let mut c = base();
        c.sink = serde_json::from_value(serde_json::json!({
            "type": "kafka", "brokers": " ", "topic_template": "t.{name}"
        }))
        .unwrap();
        assert!(matches!(c.sink, Some(SinkConfig::Kafka(_))));
        assert_eq!(keys(&c), ["sink.brokers", "sink.topic_template"]);
        // A codec is an enum: an unknown one fails to load (config::tests names its key).
        assert!(serde_json::from_value::<SinkConfig>(serde_json::json!({"type": "kafka", "brokers": "b:1", "compression": "brotli"})).is_err());
        c.sink = serde_json::from_value(serde_json::json!({
            "type": "kafka", "brokers": "b:1", "topic_template": "t.{namespace}"
        }))
        .unwrap();
        assert!(validate(&c)[0].problem.contains("{namespace}"));
    }

    #[test]
    fn kafka_tls_and_sasl_mistakes_name_their_keys_and_files() {
        let dir = std::env::temp_dir().join(format!("deltaship-validate-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("ca.pem");
        std::fs::write(&file, "").unwrap();
        let mut c = base();
        c.sink = serde_json::from_value(serde_json::json!({
            "type": "kafka", "brokers": "b:1",
            "tls": {"ca_file": "/nonexistent/ca.pem", "cert_file": file, "key_password_file": file},
            "sasl": {"mechanism": "PLAIN", "username": " ", "password": "p", "password_file": file},
        }))
        .unwrap();
        assert_eq!(keys(&c), ["sink.tls.key_file", "sink.tls.key_password_file", "sink.tls.ca_file", "sink.sasl.username", "sink.sasl.password"]);
        let shown: Vec<String> = validate(&c).iter().map(ToString::to_string).collect();
        assert!(shown[2].contains("/nonexistent/ca.pem") && shown[2].contains("No such file"), "{shown:?}");
        assert!(shown[4].contains("keep one"), "{shown:?}");

        // A key without its certificate, a directory as a file, no password at all (the
        // fix offers the environment variable only where one can reach the key).
        c.sink = serde_json::from_value(serde_json::json!({
            "type": "kafka", "brokers": "b:1",
            "tls": {"key_file": dir},
            "sasl": {"mechanism": "SCRAM-SHA-256", "username": "u"},
        }))
        .unwrap();
        assert_eq!(keys(&c), ["sink.tls.cert_file", "sink.tls.key_file", "sink.sasl.password"]);
        let problems = validate(&c);
        assert!(problems[1].problem.contains("not a regular file"), "{problems:?}");
        assert!(problems[2].fix.contains("DELTASHIP_SINK__SASL__PASSWORD"), "{problems:?}");
        c.routes = serde_json::from_value(serde_json::json!([{"name": "a", "sink": c.sink.take()}])).unwrap();
        let problems = validate(&c);
        assert_eq!(problems[2].key, "routes[0].sink.sasl.password");
        assert!(!problems[2].fix.contains("DELTASHIP_"), "{problems:?}");

        // Every file readable, the password from its file: valid; so is an empty `tls`.
        c.routes.clear();
        c.sink = serde_json::from_value(serde_json::json!({
            "type": "kafka", "brokers": "b:1",
            "tls": {"ca_file": file, "cert_file": file, "key_file": file, "key_password_file": file},
            "sasl": {"mechanism": "SCRAM-SHA-512", "username": "u", "password_file": file},
        }))
        .unwrap();
        assert!(validate(&c).is_empty(), "{:?}", validate(&c));
        c.sink = serde_json::from_value(serde_json::json!({"type": "kafka", "brokers": "b:1", "tls": {}})).unwrap();
        assert!(validate(&c).is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn nats_sink_fields_are_checked() {
        let mut c = base();
        c.sink = serde_json::from_value(serde_json::json!({
            "type": "nats", "url": "nats://n:4222",
            "marker_subject_template": "x.{name}",
            "jetstream": {"stream": "a.b", "ack_timeout_secs": 0},
            "auth": {"user": "u", "token": "t"},
            "tls": {"cert_file": "/c.pem"},
        }))
        .unwrap();
        assert_eq!(
            keys(&c),
            [
                "sink.marker_subject_template",
                "sink.jetstream.stream",
                "sink.jetstream.ack_timeout_secs",
                "sink.auth",
                "sink.auth.user",
                "sink.tls.cert_file",
                "sink.tls.cert_file"
            ]
        );
        assert!(validate(&c)[6].problem.contains("cannot read /c.pem"), "{:?}", validate(&c));
    }

    #[test]
    fn http_sink_fields_are_checked() {
        let mut c = base();
        c.dataschema_base = Some("schemas/events".into());
        c.sink = serde_json::from_value(serde_json::json!({
            "type": "http", "url": "ftp://hooks.example.com/x",
            "timeout_ms": 0, "max_requests": 0,
            "auth": {"token": "t", "user": "u"},
            "tls": {"key_file": "/k.pem"},
        }))
        .unwrap();
        assert_eq!(
            keys(&c),
            ["dataschema_base", "sink.url", "sink.timeout_ms", "sink.max_requests", "sink.auth", "sink.auth.user", "sink.tls.cert_file", "sink.tls.key_file"]
        );
        c.sink = serde_json::from_value(serde_json::json!({"type": "http", "url": "http://hooks.example.com/x", "tls": {"ca_file": "/ca.pem"}})).unwrap();
        c.dataschema_base = Some("https://schemas.example.com/deltaship/events/".into());
        assert_eq!(keys(&c), ["sink.tls", "sink.tls.ca_file"], "TLS settings with an http:// URL, and the unreadable CA");
    }

    #[test]
    fn route_mistakes_name_their_keys() {
        let mut c = base();
        c.routes = serde_json::from_value(serde_json::json!([
            {"name": "a", "sink": {"type": "kafka", "brokers": ""}, "resources": ["Secret"]},
            {"name": "a", "sink": {"type": "stdout"}, "resources": ["apps/ConfigMap"], "filter": {"changed_paths": ["spec"]}},
            {"name": "Bad_Name", "sink": {"type": "nats", "url": ""}, "resources": ["core/ConfigMap"]},
        ]))
        .unwrap();
        c.sink = Some(SinkConfig::Stdout {});
        assert_eq!(
            keys(&c),
            [
                "sink",
                "routes[0].sink.brokers",
                "routes[0].resources[0]",
                "routes[1].name",
                "routes[1].resources[0]",
                "routes[1].filter.changed_paths[0]",
                "routes[2].name",
                "routes[2].sink.url",
            ]
        );
        assert!(validate(&c)[2].fix.contains("ConfigMap"), "lists the configured kinds");
        c.sink = None;
        c.routes.truncate(1);
        assert!(keys(&c).contains(&"resources[0]".to_string()), "a resource no route ships");
    }

    #[test]
    fn every_number_out_of_its_range_names_the_key_and_the_range() {
        let mut c = base();
        c.kubernetes.page_size = 0;
        c.kubernetes.resync_secs = u64::MAX;
        c.resources[0].resync_secs = Some(u64::MAX - 1);
        c.delivery.queue_capacity = 9_223_372_036_854_775_807;
        c.delivery.max_in_flight = usize::MAX;
        c.delivery.retry_max_ms = u64::MAX;
        c.delivery.shutdown_timeout_secs = u64::MAX;
        c.delivery.stall_timeout_secs = u64::MAX;
        c.leader_election.lease_duration_secs = 3_000_000_000;
        c.kubernetes.watch_failure_grace_secs = 86_401;
        c.http.max_connections = 0;
        c.http.request_timeout_secs = u64::MAX;
        assert_eq!(
            keys(&c),
            [
                "kubernetes.page_size",
                "kubernetes.resync_secs",
                "kubernetes.watch_failure_grace_secs",
                "resources[0].resync_secs",
                "delivery.queue_capacity",
                "delivery.max_in_flight",
                "delivery.retry_max_ms",
                "delivery.shutdown_timeout_secs",
                "delivery.stall_timeout_secs",
                "leader_election.lease_duration_secs",
                "http.max_connections",
                "http.request_timeout_secs",
            ]
        );
        let shown = validate(&c)[4].to_string();
        assert!(shown.contains("9223372036854775807 is out of range") && shown.contains("from 1 to 1000000"), "{shown}");
        c.sink = serde_json::from_value(serde_json::json!({
            "type": "kafka", "brokers": "b:1", "create_topics": {"partitions": 2_000_000_000, "replication_factor": 40_000}
        }))
        .unwrap();
        let c = Config { sink: c.sink, ..base() };
        assert_eq!(keys(&c), ["sink.create_topics.partitions", "sink.create_topics.replication_factor"]);
        let mut c = base();
        c.sink = serde_json::from_value(serde_json::json!({
            "type": "nats", "url": "nats://n:4222",
            "jetstream": {"replicas": 7, "duplicate_window_secs": u64::MAX, "max_msgs_per_subject": -1, "ack_timeout_secs": 0},
        }))
        .unwrap();
        assert_eq!(
            keys(&c),
            ["sink.jetstream.replicas", "sink.jetstream.duplicate_window_secs", "sink.jetstream.max_msgs_per_subject", "sink.jetstream.ack_timeout_secs"]
        );
    }

    #[test]
    fn acks_0_is_refused_naming_the_option() {
        let mut c = base();
        c.sink = serde_json::from_value(serde_json::json!({
            "type": "kafka", "brokers": "b:1", "librdkafka": {"acks": "0", "enable.idempotence": "false", "request.required.acks": "1"},
        }))
        .unwrap();
        assert_eq!(keys(&c), ["sink.librdkafka.\"acks\""]);
    }

    #[test]
    fn librdkafka_options_it_refuses_are_errors_without_a_secret_value() {
        let mut c = base();
        c.sink = serde_json::from_value(serde_json::json!({
            "type": "kafka", "brokers": "b:1",
            "librdkafka": {"linger.ms": "5", "no.such": "x", "sasl.oauthbearer.client.secret": "Sup3rSecret", "security.protocol": "plaintextish"},
        }))
        .unwrap();
        assert_eq!(keys(&c), ["sink.librdkafka.\"no.such\"", "sink.librdkafka.\"sasl.oauthbearer.client.secret\"", "sink.librdkafka.\"security.protocol\""]);
        let shown: Vec<String> = validate(&c).iter().map(ToString::to_string).collect();
        assert!(!shown.join("\n").contains("Sup3rSecret"), "{shown:?}");
        assert!(shown[2].contains("plaintextish"), "a value that is no secret is shown: {shown:?}");
    }

    #[test]
    fn the_defaults_sit_inside_every_range() {
        let mut c = base();
        c.sink = serde_json::from_value(serde_json::json!({"type": "nats", "url": "nats://n:4222"})).unwrap();
        assert!(validate(&c).is_empty(), "{:?}", validate(&c));
        c.sink = serde_json::from_value(serde_json::json!({"type": "kafka", "brokers": "b:1", "create_topics": {}})).unwrap();
        assert!(validate(&c).is_empty(), "{:?}", validate(&c));
    }

    #[test]
    fn json_pointers_allow_only_the_rfc_6901_escapes() {
        let mut c = base();
        c.resources[0].ignore_fields = vec!["/a~0b/c~1d".into(), "/a~2b".into(), "/trailing~".into(), "".into()];
        c.resources[0].filter.changed_paths = vec!["/ok".into(), "/x~y".into()];
        assert_eq!(
            keys(&c),
            ["resources[0].filter.changed_paths[1]", "resources[0].ignore_fields[1]", "resources[0].ignore_fields[2]", "resources[0].ignore_fields[3]"]
        );
        assert!(validate(&c)[1].problem.contains("`~` must be followed by `0` or `1`"), "{:?}", validate(&c));
    }

    #[test]
    fn an_invalid_log_level_is_an_error() {
        let mut c = base();
        c.log.level = "deltaship=loud".into();
        assert_eq!(keys(&c), ["log.level"]);
        c.log.level = "warn,deltaship=debug,kube=info".into();
        assert!(validate(&c).is_empty());
    }
}
