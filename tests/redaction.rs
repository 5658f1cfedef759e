//! Field redaction rules and keyed digests, end to end: credentials in Deployment env vars,
//! annotations, ConfigMap data and Secrets never reach the Kafka topics; hashed fields carry
//! the HMAC-SHA256 of the configured key. Bad rules and key files stop start-up with exit 78.

mod support;

use std::time::Duration;

use deltaship::config::{FieldPath, KafkaConfig, PayloadMode, RedactAction, RedactField, ResourceConfig};
use hmac::{Hmac, Mac};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use support::bridge::{Bridge, EXIT_CONFIG, command};
use support::config::{TestConfig, kafka, partitions, resource};
use support::kafka::{Record, read_until};
use support::kube::{client, delete_namespace, namespace};

const KEY: &str = "a-test-key-of-32-bytes-0123456789";

/// `hmac-sha256:<hex>` of `value` with `KEY`, computed here independently of deltaship.
fn expected_digest(value: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(KEY.as_bytes()).unwrap();
    mac.update(value.as_bytes());
    format!("hmac-sha256:{:x}", mac.finalize().into_bytes())
}

fn deployment(name: &str, marker: &str) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": {
            "example.com/token": format!("{marker}-token-{name}"),
            "example.com/note": format!("{marker}-note-{name}"),
            "example.com/owner": "team-a",
        }},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [
                    {"name": "app", "image": "nginx:1.27", "env": [
                        {"name": "DB_PASSWORD", "value": format!("{marker}-db-{name}")},
                        {"name": "API_TOKEN", "value": format!("{marker}-api-{name}")},
                    ]},
                    {"name": "sidecar", "image": "busybox", "env": [{"name": "SIDECAR_KEY", "value": format!("{marker}-side-{name}")}]},
                ]},
            },
        },
    }))
    .unwrap()
}

/// Every byte of `records` (keys, header names and values, values), as text.
fn every_byte(records: &[Record]) -> String {
    let mut all = String::new();
    for r in records {
        all.push_str(r.key.as_deref().unwrap_or_default());
        for (k, v) in &r.headers {
            all.push_str(k);
            all.push_str(v);
        }
        all.push_str(&String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()));
        all.push('\n');
    }
    all
}

/// A field rule; `path` is one that parses.
fn rule(path: &str, action: RedactAction) -> RedactField {
    RedactField { path: FieldPath::parse(path).unwrap_or_else(|e| panic!("{path}: {e:?}")), action }
}

fn of_type<'a>(records: &'a [Record], key: &str, ty: &str) -> Vec<&'a Record> {
    records.iter().filter(|r| r.key.as_deref() == Some(key) && r.headers.get("ce_type").map(String::as_str) == Some(ty)).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn redact_rules_keep_credentials_out_of_every_byte_of_the_topics() {
    let env = support::env();
    let kube = client().await;
    let ns = namespace(&kube, "it-redact").await;
    let prefix = support::unique("redact");
    let marker = support::unique("marker-never-shipped");
    let dir = std::env::temp_dir().join(support::unique("redact-key"));
    std::fs::create_dir_all(&dir).unwrap();
    let key_file = dir.join("digest-key");
    // As `kubectl create secret --from-file` of an `echo`ed key mounts it: with a newline.
    std::fs::write(&key_file, format!("{KEY}\n")).unwrap();

    // One of each before the start (shipped from the initial list), one after (watch events).
    let deployments: Api<Deployment> = Api::namespaced(kube.clone(), &ns);
    deployments.create(&PostParams::default(), &deployment("early", &marker)).await.unwrap();
    let secrets: Api<Secret> = Api::namespaced(kube.clone(), &ns);
    let pin: Secret = serde_json::from_value(json!({"metadata": {"name": "pin"}, "stringData": {"pin": "1234"}})).unwrap();
    secrets.create(&PostParams::default(), &pin).await.unwrap();

    let deployment_rules = ResourceConfig {
        payload: PayloadMode::Patch,
        redact_fields: vec![
            rule("/spec/template/spec/containers/*/env", RedactAction::Drop),
            rule("/metadata/annotations/example.com~1token", RedactAction::Hash),
            rule("/metadata/annotations/example.com~1note", RedactAction::Mask),
        ],
        ..resource("apps", "Deployment", &[&ns])
    };
    let configmap_rules = ResourceConfig {
        redact_fields: vec![rule("/data/*", RedactAction::Hash), rule("/metadata/annotations/example.com~1note", RedactAction::Mask)],
        ..resource("", "ConfigMap", &[&ns])
    };
    let sink = KafkaConfig { create_topics: partitions(2), ..kafka(&env.kafka, &format!("{prefix}.{{group}}.{{plural}}")) };
    let config = TestConfig::new()
        .cluster("it")
        .with(|c| c.redaction.digest_key_file = Some(key_file.clone()))
        .resource(deployment_rules)
        .resource(configmap_rules)
        .resource(resource("", "Secret", &[&ns]))
        .kafka(sink)
        .toml();
    let mut bridge = Bridge::start(&config);
    bridge.wait_ready(Duration::from_secs(60));
    assert!(!bridge.log_text().contains("are unkeyed"), "a key is configured: no warning\n{}", bridge.log_text());

    deployments.create(&PostParams::default(), &deployment("late", &marker)).await.unwrap();
    // A new env value and token, and a new image: the update ships as a patch that shows
    // the new image and the new token's digest, never the values.
    let mut changed = deployment("early", &marker);
    let spec = changed.spec.as_mut().unwrap().template.spec.as_mut().unwrap();
    spec.containers[0].image = Some("nginx:1.28".into());
    spec.containers[0].env.as_mut().unwrap()[0].value = Some(format!("{marker}-db-changed"));
    changed.metadata.annotations.as_mut().unwrap().insert("example.com/token".into(), format!("{marker}-token-changed"));
    deployments.patch("early", &PatchParams::apply("redaction-test").force(), &Patch::Apply(&changed)).await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), &ns);
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "creds", "annotations": {"example.com/note": format!("{marker}-cm-note")}}, "data": {"password": format!("{marker}-cm"), "user": "admin"}})).unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    // A change only to a masked value is no change after redaction: not shipped. The next
    // change (of a hashed value) is.
    let merge = |v: Value| Patch::Merge(v);
    cms.patch("creds", &PatchParams::default(), &merge(json!({"metadata": {"annotations": {"example.com/note": format!("{marker}-cm-note-2")}}})))
        .await
        .unwrap();
    cms.patch("creds", &PatchParams::default(), &merge(json!({"data": {"user": "root"}}))).await.unwrap();

    let (early, late) = (format!("{ns}/early"), format!("{ns}/late"));
    let shipped_deployments = read_until(&env.kafka, &format!("{prefix}.apps.deployments"), Duration::from_secs(60), |r| {
        !of_type(r, &early, "dev.deltaship.object.synced").is_empty()
            && !of_type(r, &late, "dev.deltaship.object.added").is_empty()
            && !of_type(r, &early, "dev.deltaship.object.updated").is_empty()
    });
    let creds = format!("{ns}/creds");
    let shipped_cms = read_until(&env.kafka, &format!("{prefix}.core.configmaps"), Duration::from_secs(60), |r| {
        !of_type(r, &creds, "dev.deltaship.object.updated").is_empty()
    });
    let pin_key = format!("{ns}/pin");
    let shipped_secrets =
        read_until(&env.kafka, &format!("{prefix}.core.secrets"), Duration::from_secs(60), |r| r.iter().any(|r| r.key.as_deref() == Some(pin_key.as_str())));

    // Not one byte of any value of the rules anywhere: keys, headers, values, markers.
    for (topic, records) in [("deployments", &shipped_deployments), ("configmaps", &shipped_cms), ("secrets", &shipped_secrets)] {
        let all = every_byte(records);
        assert_eq!(all.matches(marker.as_str()).count(), 0, "{topic} carry the marker:\n{all}");
    }
    // The base64 of "1234", as the API server stores the PIN.
    assert!(!every_byte(&shipped_secrets).contains("MTIzNA=="));

    // A Deployment from the initial list and one from a watch event.
    for (name, key, ty) in [("early", &early, "dev.deltaship.object.synced"), ("late", &late, "dev.deltaship.object.added")] {
        let d = of_type(&shipped_deployments, key, ty)[0].json();
        let annotations = &d["metadata"]["annotations"];
        assert_eq!(annotations["example.com/token"], expected_digest(&format!("{marker}-token-{name}")), "{d}");
        assert_eq!(annotations["example.com/note"], "***", "{d}");
        assert_eq!(annotations["example.com/owner"], "team-a", "other annotations are kept: {d}");
        let containers = d["spec"]["template"]["spec"]["containers"].as_array().unwrap();
        assert_eq!(containers.len(), 2, "{d}");
        assert!(containers.iter().all(|c| c.get("env").is_none() && c["image"].is_string()), "{d}");
    }
    // The update's patch, made from redacted content: the new digest and image, no env.
    let update = of_type(&shipped_deployments, &early, "dev.deltaship.object.updated")[0];
    assert_eq!(update.header("content-type"), "application/json-patch+json");
    let patch = update.json();
    let op = |path: &str| patch.as_array().unwrap().iter().find(|op| op["path"] == path).map(|op| op["value"].clone());
    assert_eq!(op("/metadata/annotations/example.com~1token"), Some(Value::String(expected_digest(&format!("{marker}-token-changed")))), "{patch}");
    assert_eq!(op("/spec/template/spec/containers/0/image"), Some(json!("nginx:1.28")), "{patch}");
    assert!(!patch.to_string().contains("/env"), "{patch}");

    // ConfigMap data: every value hashed with the key; Secret values (built-in) too.
    let cm = of_type(&shipped_cms, &creds, "dev.deltaship.object.added")[0].json();
    assert_eq!(cm["data"], json!({"password": expected_digest(&format!("{marker}-cm")), "user": expected_digest("admin")}), "{cm}");
    assert_eq!(cm["metadata"]["annotations"]["example.com/note"], "***", "{cm}");
    let updates = of_type(&shipped_cms, &creds, "dev.deltaship.object.updated");
    assert_eq!(updates.len(), 1, "the masked change is not shipped: {updates:?}");
    assert_eq!(updates[0].json()["data"]["user"], expected_digest("root"));
    let secret = shipped_secrets.iter().find(|r| r.key.as_deref() == Some(pin_key.as_str())).unwrap().json();
    assert_eq!(secret["data"]["pin"], expected_digest("MTIzNA=="), "{secret}");

    // Counted by resource and action: env lists of two containers in three shipped states
    // (at least), one token and one note each.
    let (_, metrics) = bridge.get("/metrics").unwrap();
    let series = |resource: &str, action: &str| {
        metrics
            .lines()
            .filter(|l| {
                l.starts_with("deltaship_redacted_fields_total{")
                    && l.contains(&format!("resource=\"{resource}\""))
                    && l.contains(&format!("action=\"{action}\""))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    assert!(series("deployments.apps", "drop") >= 6.0, "{metrics}");
    assert!(series("deployments.apps", "hash") >= 3.0, "{metrics}");
    assert!(series("deployments.apps", "mask") >= 3.0, "{metrics}");
    assert!(series("configmaps", "hash") >= 6.0, "{metrics}");
    assert!(series("configmaps", "mask") >= 3.0, "{metrics}");
    assert_eq!(series("secrets", "hash"), 0.0, "the built-in Secret redaction is not a rule: {metrics}");

    // The key never reaches the logs.
    assert!(!bridge.log_text().contains(KEY));
    delete_namespace(&kube, &ns).await;
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_key_secret_values_are_shipped_masked_never_as_a_digest_and_a_warning_says_so_once() {
    support::env();
    let kube = client().await;
    let ns = namespace(&kube, "it-redact-unkeyed").await;
    let mut bridge = Bridge::start(&TestConfig::new().resource(resource("", "Secret", &[&ns])).configmaps(&ns).toml());
    bridge.wait_ready(Duration::from_secs(60));
    let secrets: Api<Secret> = Api::namespaced(kube.clone(), &ns);
    let pin: Secret = serde_json::from_value(json!({"metadata": {"name": "pin"}, "stringData": {"pin": "1234"}})).unwrap();
    secrets.create(&PostParams::default(), &pin).await.unwrap();
    let subject = format!("{ns}/pin");
    let event = support::kube::eventually(Duration::from_secs(30), "the Secret's added event", || {
        let found = bridge.lines().iter().map(|l| serde_json::from_str::<Value>(l).unwrap()).find(|e| e["subject"] == subject.as_str());
        async move { found }
    })
    .await;
    // Before, the digest of "MTIzNA==" (the base64 of "1234") that anyone could recompute
    // from the 10,000 PINs: now nothing derived from the value.
    assert_eq!(event["data"]["data"]["pin"], "***", "{event}");
    assert!(!event.to_string().contains(&format!("{:x}", Sha256::digest(b"MTIzNA=="))), "{event}");
    let log = bridge.log_text();
    assert_eq!(log.matches("Secret values are shipped as \"***\" (no digest key)").count(), 1, "{log}");
    delete_namespace(&kube, &ns).await;
}

#[test]
fn bad_rules_and_key_files_are_refused_as_an_invalid_config_naming_the_key_and_the_fix() {
    let dir = std::env::temp_dir().join(support::unique("redact-bad"));
    std::fs::create_dir_all(&dir).unwrap();
    let short = dir.join("short");
    std::fs::write(&short, "tiny-secret\n").unwrap();
    // Rules are parsed as the file is read: the one refused is named, the good one before it is not.
    // The configs of this test are invalid on purpose, so written as text (the builder
    // holds only rules that parse).
    let config = |rule: &str| {
        format!("[[resources]]\nversion = \"v1\"\nkind = \"ConfigMap\"\nredact_fields = [\n  {{ path = \"/data/*\", action = \"hash\" }},\n  {rule},\n]\n")
    };
    let cases: [(&str, &[&str]); 5] = [
        (
            r#"{ path = "data/password", action = "hash" }"#,
            &["`resources.0.redact_fields.1.path`: `data/password` is not a JSON pointer", "fix: start it with `/`"],
        ),
        (r#"{ path = "", action = "drop" }"#, &["`resources.0.redact_fields.1.path`: is empty", "fix: give a JSON pointer"]),
        (
            r#"{ path = "/metadata/annotations/a~2b", action = "mask" }"#,
            &[
                "`resources.0.redact_fields.1.path`: `/metadata/annotations/a~2b` has a `~` not followed by `0` or `1`",
                "fix: write `~0` for `~` and `~1` for `/`",
            ],
        ),
        (
            r#"{ path = "/data/x", action = "wipe" }"#,
            &["`resources.0.redact_fields.1.action`: unknown variant: found `wipe`", "`drop`", "fix: use one of the listed values"],
        ),
        (
            r#"{ path = "/metadata", action = "mask" }"#,
            &["`resources.0.redact_fields.1.path`: `/metadata` would redact /metadata/name, which identifies the object"],
        ),
    ];
    for (rule, expected) in cases {
        let (status, _, stderr) = command(&["check"], &config(rule), &[]);
        assert_eq!(status.code(), Some(EXIT_CONFIG), "{stderr}");
        for e in expected {
            assert!(stderr.contains(e), "missing {e:?} in:\n{stderr}");
        }
        assert!(!stderr.contains("redact_fields.0"), "{stderr}");
    }
    let missing = format!("[redaction]\ndigest_key_file = \"{}\"\n{}", dir.join("missing").display(), config(r#"{ path = "/data/x", action = "drop" }"#));
    let (status, _, stderr) = command(&["check"], &missing, &[]);
    assert_eq!(status.code(), Some(EXIT_CONFIG), "{stderr}");
    assert!(stderr.contains("`redaction.digest_key_file`: cannot read"), "{stderr}");
    // A key too short to resist guessing, without a rule: refused without showing it.
    let (status, _, stderr) =
        command(&["check"], &format!("[redaction]\ndigest_key_file = \"{}\"\n[[resources]]\nversion = \"v1\"\nkind = \"Secret\"\n", short.display()), &[]);
    assert_eq!(status.code(), Some(EXIT_CONFIG), "{stderr}");
    assert!(stderr.contains("`redaction.digest_key_file`: ") && stderr.contains("holds 11 bytes, fewer than 16"), "{stderr}");
    assert!(!stderr.contains("tiny-secret"), "{stderr}");
    // A `hash` rule needs a key: without one its digest could be guessed.
    let (status, _, stderr) = command(&["check"], &config(r#"{ path = "/data/x", action = "drop" }"#), &[]);
    assert_eq!(status.code(), Some(EXIT_CONFIG), "{stderr}");
    assert!(stderr.contains("`resources[0].redact_fields[0].action`: is `hash` without a digest key"), "{stderr}");
    assert!(stderr.contains("fix: set redaction.digest_key_file"), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_readme_redaction_example_loads_as_documented() {
    let dir = std::env::temp_dir().join(support::unique("redact-readme"));
    std::fs::create_dir_all(&dir).unwrap();
    let key_file = dir.join("digest-key");
    std::fs::write(&key_file, KEY).unwrap();
    let snippet = support::docs::block("config: redact-fields", "toml");
    let documented = "/etc/deltaship-redaction/digest-key";
    assert!(snippet.contains(documented), "{snippet}");
    let file = dir.join("c.toml");
    std::fs::write(&file, snippet.replace(documented, &key_file.display().to_string())).unwrap();
    let c = deltaship::config::load(&file).unwrap_or_else(|e| panic!("{e}"));
    let actions: Vec<&str> = c.resources[0].redact_fields.iter().map(|r| r.action.as_str()).collect();
    assert_eq!(actions, ["drop", "mask", "hash"]);
    assert_eq!(c.redaction.digest_key_file.as_deref(), Some(key_file.as_path()));
    std::fs::remove_dir_all(&dir).unwrap();
}
