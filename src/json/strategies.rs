//! Property-test strategies for JSON objects, shared by the scanner's tests and the
//! decoder's (raw path against tree path).

use proptest::prelude::*;
use serde_json::Value;

/// Strings, escapes and separators included.
pub(crate) fn text() -> impl Strategy<Value = String> {
    prop_oneof![any::<String>(), "[a-z0-9./-]{0,12}", Just("<b>&\"\\/\n\t\u{0}\u{1F600}\u{2028}é".to_string())]
}

/// Member names, among them the ones the tests' pointers name.
pub(crate) fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("a"),
        Just("a/b"),
        Just("~x"),
        Just("0"),
        Just("1"),
        Just("x"),
        Just("list"),
        Just("status"),
        Just("managedFields"),
        Just("resourceVersion"),
        Just("metadata"),
        Just("é\"\\\n<>"),
    ]
    .prop_map(String::from)
}

/// Any JSON value serde_json reads back as it wrote it.
pub(crate) fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        // Floats that serde_json reads back exactly (it parses without float_roundtrip).
        prop_oneof![Just(0.5), Just(-2.25), Just(1e21), Just(3.0e-5)].prop_map(Value::from),
        text().prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 40, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(key(), inner, 0..5).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}
