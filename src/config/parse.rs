//! Strings deserialized into the configuration's own types (templates, addresses, JSON
//! pointers), refused with the problem and the fix.

use serde::de::{self, Deserializer, Visitor};

/// Deserializes a string parsed by `parse` into one of our own types (a template, an
/// address); `expecting` describes the string. A refusal is `(problem, fix)`, written
/// `problem; fix: fix`, which `describe_figment_error` shows with the key and the source.
pub(super) fn parse_str<'de, D: Deserializer<'de>, T>(
    d: D,
    expecting: &'static str,
    parse: impl FnOnce(&str) -> Result<T, (String, String)>,
) -> Result<T, D::Error> {
    struct Parsed<F> {
        expecting: &'static str,
        parse: F,
    }
    impl<T, F: FnOnce(&str) -> Result<T, (String, String)>> Visitor<'_> for Parsed<F> {
        type Value = T;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.expecting)
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
            (self.parse)(v).map_err(|(problem, fix)| E::custom(format!("{problem}; fix: {fix}")))
        }
    }
    d.deserialize_str(Parsed { expecting, parse })
}
