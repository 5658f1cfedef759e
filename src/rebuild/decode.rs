//! One record of either binding (headers and value) to a step of the consumer protocol, or
//! the reason it is bad.

use serde_json::Value;

use super::step::{Bad, Body, ChangeKind, Content, Figures, Reason, Received, Step};

/// The deepest JSON a record may nest: what serde_json's recursion limit (128) admits. The
/// bridge's own watch decodes objects with that limit, so no object it ships is deeper.
/// Parsing stops there with an error instead of recursing on.
pub const MAX_DEPTH: usize = 127;

/// The largest record value (or structured event) decoded: 16 MiB, ten times the largest
/// object the API server stores (etcd's 1.5 MiB) and above every broker's default message
/// limit, so every event the bridge ships fits (its oversize policy ships a reference
/// instead). A larger record is skipped as `too_large` before it is parsed.
pub const MAX_RECORD_BYTES: usize = 16 << 20;

const PATCH: &str = "application/json-patch+json";
const STRUCTURED: &str = "application/cloudevents+json";

/// How a binding carries attributes in headers.
#[derive(Debug, Clone, Copy)]
pub enum Binding {
    /// `ce_` headers, raw UTF-8 values; `content-type` is the data's content type.
    Kafka,
    /// `ce-` headers, percent-encoded values; `ce-datacontenttype` is the data's.
    Nats,
}

/// Turns one record into a protocol step. `headers` are (name, value) as read, names
/// compared case-insensitively (the last of repeated names wins); `value` is None for a
/// Kafka tombstone; `partition` is the Kafka partition (0 for NATS).
pub fn decode(binding: Binding, headers: &[(&[u8], &[u8])], value: Option<&[u8]>, partition: i32) -> Result<Step, Bad> {
    let Some(value) = value else { return Ok(Step::Tombstone) };
    if value.is_empty() {
        return Err(Bad::new(Reason::Empty, "the value is empty"));
    }
    if value.len() > MAX_RECORD_BYTES {
        return Err(Bad::new(Reason::TooLarge, format!("the value is {} bytes, more than {MAX_RECORD_BYTES}", value.len())));
    }
    let header = |name: &str| -> Result<Option<String>, Bad> {
        let Some((_, raw)) = headers.iter().rev().find(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes())) else { return Ok(None) };
        let bytes = match binding {
            Binding::Kafka => raw.to_vec(),
            Binding::Nats => percent_decode(raw),
        };
        String::from_utf8(bytes).map(Some).map_err(|_| Bad::new(Reason::WrongType, format!("header {name} is not UTF-8")))
    };
    let content_type = header("content-type")?;
    if content_type.as_deref().is_some_and(|c| c.starts_with(STRUCTURED)) {
        let event = parse(value)?;
        let Value::Object(event) = event else {
            return Err(Bad::new(Reason::WrongType, format!("the structured event is {}, not a JSON object", kind_of(&event))));
        };
        let text = |name: &str| match event.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(Bad::new(Reason::WrongType, format!("attribute {name} is {}, not a string", kind_of(other)))),
        };
        return event_of(&text, || Ok(event.get("data").cloned()), partition);
    }
    let prefix = match binding {
        Binding::Kafka => "ce_",
        Binding::Nats => "ce-",
    };
    let attribute = |name: &str| match name {
        // Kafka's binding carries it as `content-type`; NATS's as `ce-datacontenttype`.
        "datacontenttype" => header(&format!("{prefix}{name}")).map(|a| a.or_else(|| content_type.clone())),
        _ => header(&format!("{prefix}{name}")),
    };
    event_of(&attribute, || parse(value).map(Some), partition)
}

/// The event of these attributes and (parsed only for the contract's types) data.
fn event_of(attribute: &dyn Fn(&str) -> Result<Option<String>, Bad>, data: impl FnOnce() -> Result<Option<Value>, Bad>, partition: i32) -> Result<Step, Bad> {
    // An empty id, type, subject, apiversion or kind names nothing: as good as absent.
    let required = |name: &str| attribute(name)?.filter(|a| !a.is_empty()).ok_or_else(|| Bad::new(Reason::MissingAttribute, format!("no {name} attribute")));
    let ty = required("type")?;
    let change = match ty.strip_prefix("dev.deltaship.") {
        Some("object.added") => Some(ChangeKind::Added),
        Some("object.updated") => Some(ChangeKind::Updated),
        Some("object.synced") => Some(ChangeKind::Synced),
        Some("object.deleted") => Some(ChangeKind::Deleted),
        Some("sync.started" | "sync.completed") => None,
        _ => return Ok(Step::Foreign),
    };
    let id = required("id")?;
    let cluster = attribute("cluster")?.unwrap_or_default();
    let data = data()?;
    let body = match change {
        None => marker(ty.ends_with("started"), data)?,
        Some(change) => {
            let resource = format!("{}/{}", required("apiversion")?, required("kind")?);
            let key = required("subject")?;
            let content = match (change, data) {
                (ChangeKind::Deleted, _) => Content::None,
                (_, None | Some(Value::Null)) => return Err(Bad::new(Reason::MissingAttribute, "no data")),
                (_, Some(data)) if attribute("datacontenttype")?.as_deref() == Some(PATCH) => {
                    let patch = serde_json::from_value(data).map_err(|e| Bad::new(Reason::WrongType, format!("the data is not a JSON Patch: {e}")))?;
                    Content::Patch(patch)
                }
                (_, Some(data @ Value::Object(_))) => Content::Whole(data),
                (_, Some(other)) => return Err(Bad::new(Reason::WrongType, format!("the data is {}, not an object", kind_of(&other)))),
            };
            // The count-and-digest terms' identity: absent is "" (only a marker's state reads it).
            let uid = attribute("uid")?.unwrap_or_default();
            let resource_version = attribute("resourceversion")?.unwrap_or_default();
            Body::Object { change, resource, key, content, uid, resource_version }
        }
    };
    Ok(Step::Event(Received { id, cluster, partition, body }))
}

/// A marker's data: `syncId`, `mode`, `resource` {group, version, kind}, `namespace`, and on
/// `completed` the `state` to check (vectors/README.md, "Count and digest").
fn marker(started: bool, data: Option<Value>) -> Result<Body, Bad> {
    let data = data.filter(|d| !d.is_null()).ok_or_else(|| Bad::new(Reason::MissingAttribute, "a marker without data"))?;
    let field = |path: &str, required: bool| -> Result<Option<String>, Bad> {
        match data.pointer(path) {
            None | Some(Value::Null) if required => Err(Bad::new(Reason::MissingAttribute, format!("a marker without {path}"))),
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(Bad::new(Reason::WrongType, format!("a marker's {path} is {}, not a string", kind_of(other)))),
        }
    };
    let sync_id = field("/syncId", true)?.unwrap_or_default();
    let version = field("/resource/version", true)?.unwrap_or_default();
    let kind = field("/resource/kind", true)?.unwrap_or_default();
    let apiversion = match field("/resource/group", false)?.filter(|g| !g.is_empty()) {
        Some(group) => format!("{group}/{version}"),
        None => version,
    };
    Ok(Body::Marker {
        started,
        sync_id,
        full: field("/mode", false)?.as_deref() == Some("full"),
        resource: format!("{apiversion}/{kind}"),
        namespace: field("/namespace", false)?,
        state: if started { None } else { state(&data)? },
    })
}

/// A `completed` marker's `state`: absent or null, or `{"count": <integer from 0>, "digest":
/// "<32 lowercase hex digits>"}` (absent member: `missing_attribute`; anything else:
/// `wrong_type`).
fn state(data: &Value) -> Result<Option<Figures>, Bad> {
    let state = match data.get("state") {
        None | Some(Value::Null) => return Ok(None),
        Some(s @ Value::Object(_)) => s,
        Some(other) => return Err(Bad::new(Reason::WrongType, format!("a marker's /state is {}, not an object", kind_of(other)))),
    };
    let count = match state.get("count") {
        None | Some(Value::Null) => return Err(Bad::new(Reason::MissingAttribute, "a marker without /state/count")),
        Some(c) => c.as_u64().ok_or_else(|| Bad::new(Reason::WrongType, format!("a marker's /state/count is {c}, not an integer from 0")))?,
    };
    let digest = match state.get("digest") {
        None | Some(Value::Null) => return Err(Bad::new(Reason::MissingAttribute, "a marker without /state/digest")),
        Some(Value::String(d)) if d.len() == 32 && d.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) => {
            u128::from_str_radix(d, 16).expect("32 hex digits")
        }
        Some(d) => return Err(Bad::new(Reason::WrongType, format!("a marker's /state/digest is {d}, not 32 lowercase hex digits"))),
    };
    Ok(Some(Figures { count, digest }))
}

/// JSON of at most MAX_DEPTH levels, or why not.
fn parse(bytes: &[u8]) -> Result<Value, Bad> {
    serde_json::from_slice(bytes).map_err(|e| {
        let reason = match e.classify() {
            serde_json::error::Category::Eof => Reason::Truncated,
            // serde_json stops at its recursion limit (MAX_DEPTH) with this error.
            _ if e.to_string().starts_with("recursion limit exceeded") => Reason::TooDeep,
            _ => Reason::NotJson,
        };
        Bad::new(reason, e.to_string())
    })
}

/// The nesting depth of `v` (0 for a scalar, 1 for `{}` or `[1]`).
pub fn depth(v: &Value) -> usize {
    match v {
        Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
        Value::Object(o) => 1 + o.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

pub(super) fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Undoes the NATS binding's percent-encoding of header values.
fn percent_decode(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = b.get(i + 1..i + 3).filter(|h| h.iter().all(u8::is_ascii_hexdigit)).and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok());
        match (b[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn kafka(headers: &[(&str, &str)], value: &[u8]) -> Result<Step, Bad> {
        let headers: Vec<(&[u8], &[u8])> = headers.iter().map(|(k, v)| (k.as_bytes(), v.as_bytes())).collect();
        decode(Binding::Kafka, &headers, Some(value), 0)
    }

    const ADDED: &[(&str, &str)] =
        &[("ce_id", "1"), ("ce_type", "dev.deltaship.object.added"), ("ce_apiversion", "v1"), ("ce_kind", "ConfigMap"), ("ce_subject", "ns/a")];

    fn reason(r: Result<Step, Bad>) -> Reason {
        r.expect_err("a bad record").reason
    }

    fn nested(levels: usize) -> Vec<u8> {
        format!("{{\"a\":{}1{}}}", "[".repeat(levels - 1), "]".repeat(levels - 1)).into_bytes()
    }

    #[test]
    fn each_kind_of_bad_value_has_its_reason() {
        assert_eq!(reason(kafka(ADDED, b"")), Reason::Empty);
        let large = format!("{{\"v\":\"{}\"}}", "x".repeat(MAX_RECORD_BYTES));
        assert_eq!(reason(kafka(ADDED, large.as_bytes())), Reason::TooLarge);
        assert!(matches!(kafka(ADDED, &large.as_bytes()[large.len() - MAX_RECORD_BYTES..]), Err(Bad { reason: Reason::NotJson, .. })), "at the limit: parsed");
        assert_eq!(reason(kafka(ADDED, b"\xff\x00garbage")), Reason::NotJson);
        assert_eq!(reason(kafka(ADDED, b"{\"metadata\": {\"name\": \"a")), Reason::Truncated);
        assert_eq!(reason(kafka(ADDED, &nested(1000))), Reason::TooDeep);
        assert!(matches!(kafka(ADDED, &nested(MAX_DEPTH)), Ok(Step::Event(_))), "as deep as the limit is fine");
        assert_eq!(reason(kafka(ADDED, &nested(MAX_DEPTH + 1))), Reason::TooDeep);
        assert_eq!(reason(kafka(ADDED, b"42")), Reason::WrongType);
        assert_eq!(reason(kafka(&ADDED[1..], b"{}")), Reason::MissingAttribute, "no ce_id");
        assert_eq!(reason(kafka(&ADDED[..4], b"{}")), Reason::MissingAttribute, "no ce_subject");
        for empty in ["ce_id", "ce_type", "ce_subject", "ce_apiversion", "ce_kind"] {
            let headers: Vec<(&str, &str)> = ADDED.iter().map(|&(k, v)| (k, if k == empty { "" } else { v })).collect();
            assert_eq!(reason(kafka(&headers, b"{}")), Reason::MissingAttribute, "empty {empty}");
        }
        let not_utf8: Vec<(&[u8], &[u8])> = vec![(b"ce_id", b"\xff"), (b"ce_type", b"dev.deltaship.object.added")];
        assert_eq!(reason(decode(Binding::Kafka, &not_utf8, Some(b"{}"), 0)), Reason::WrongType);
        let patch = [ADDED, &[("content-type", "application/json-patch+json")]].concat();
        assert_eq!(reason(kafka(&patch, b"{\"op\": 1}")), Reason::WrongType, "not a JSON Patch");
        assert!(matches!(decode(Binding::Kafka, &[], None, 0), Ok(Step::Tombstone)));
    }

    #[test]
    fn foreign_types_are_not_bad_and_not_parsed() {
        for ty in ["com.example.other", "dev.deltaship.object.exploded", "dev.deltaship."] {
            assert!(matches!(kafka(&[("ce_type", ty)], b"not json"), Ok(Step::Foreign)), "{ty}");
        }
    }

    #[test]
    fn structured_events_and_markers_are_checked_for_types() {
        let structured = [("content-type", "application/cloudevents+json; charset=UTF-8")];
        let event = |e: serde_json::Value| kafka(&structured, &serde_json::to_vec(&e).unwrap());
        let marker = |data: serde_json::Value| event(json!({"id": "m", "type": "dev.deltaship.sync.started", "data": data}));
        assert_eq!(reason(event(json!([1]))), Reason::WrongType);
        assert_eq!(reason(event(json!({"id": 5, "type": "dev.deltaship.object.added"}))), Reason::WrongType);
        assert_eq!(reason(marker(json!({"syncId": 7, "resource": {"version": "v1", "kind": "ConfigMap"}}))), Reason::WrongType);
        assert_eq!(reason(marker(json!({"syncId": "s"}))), Reason::MissingAttribute);
        let Ok(Step::Event(Received { body: Body::Marker { resource, full, .. }, .. })) =
            marker(json!({"syncId": "s", "mode": "full", "resource": {"group": "apps", "version": "v1", "kind": "Deployment"}}))
        else {
            panic!("a marker")
        };
        assert_eq!((resource.as_str(), full), ("apps/v1/Deployment", true));
    }

    #[test]
    fn nats_header_values_are_percent_decoded() {
        let headers: Vec<(&[u8], &[u8])> = vec![
            (b"ce-id", b"1"),
            (b"ce-type", b"dev.deltaship.object.added"),
            (b"ce-apiversion", b"v1"),
            (b"ce-kind", b"ConfigMap"),
            (b"ce-subject", b"ns/caf%C3%A9%20x"),
        ];
        let Ok(Step::Event(Received { body: Body::Object { key, .. }, .. })) = decode(Binding::Nats, &headers, Some(b"{}"), 0) else { panic!("an event") };
        assert_eq!(key, "ns/caf\u{e9} x");
        assert_eq!(percent_decode(b"%zz%4"), b"%zz%4", "not an escape: kept");
    }

    /// Header names a decoder looks for, and others.
    fn header_name() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            prop::sample::select(vec![
                "ce_id",
                "ce_type",
                "ce_subject",
                "ce_apiversion",
                "ce_kind",
                "ce_datacontenttype",
                "content-type",
                "ce-id",
                "ce-type",
                "ce-subject",
                "ce-apiversion",
                "ce-kind",
                "ce-datacontenttype",
                "Content-Type"
            ])
            .prop_map(|n| n.as_bytes().to_vec()),
            prop::collection::vec(any::<u8>(), 0..12),
        ]
    }

    /// Header values that mean something, and anything.
    fn header_value() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            prop::sample::select(vec![
                "dev.deltaship.object.added",
                "dev.deltaship.object.updated",
                "dev.deltaship.object.deleted",
                "dev.deltaship.sync.started",
                "dev.deltaship.sync.completed",
                "application/json-patch+json",
                "application/cloudevents+json",
                "%",
                "%E2%82",
                "v1",
            ])
            .prop_map(|v| v.as_bytes().to_vec()),
            prop::collection::vec(any::<u8>(), 0..24),
        ]
    }

    /// JSON documents (possibly truncated), and arbitrary bytes.
    fn value() -> impl Strategy<Value = Option<Vec<u8>>> {
        let leaf = prop_oneof![Just(json!(null)), any::<bool>().prop_map(|b| json!(b)), any::<i64>().prop_map(|n| json!(n)), ".{0,8}".prop_map(|s| json!(s))];
        let json = leaf.prop_recursive(6, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::from),
                prop::collection::btree_map(
                    prop::sample::select(vec!["id", "type", "data", "syncId", "resource", "kind", "version", "op", "path", "value", "subject"])
                        .prop_map(String::from),
                    inner,
                    0..6
                )
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        });
        prop::option::of(prop_oneof![
            (json, any::<prop::sample::Index>()).prop_map(|(v, cut)| {
                let bytes = serde_json::to_vec(&v).unwrap();
                let keep = if bytes.len() > 1 { cut.index(bytes.len() + 1) } else { bytes.len() };
                bytes[..keep].to_vec()
            }),
            prop::collection::vec(any::<u8>(), 0..64),
        ])
    }

    proptest! {
        #[test]
        fn decoding_any_record_never_panics(
            nats in any::<bool>(),
            headers in prop::collection::vec((header_name(), header_value()), 0..10),
            value in value(),
            partition in any::<i32>(),
        ) {
            let binding = if nats { Binding::Nats } else { Binding::Kafka };
            let headers: Vec<(&[u8], &[u8])> = headers.iter().map(|(k, v)| (&k[..], &v[..])).collect();
            let _ = decode(binding, &headers, value.as_deref(), partition);
        }
    }
}
