//! `${VAR}` and `${VAR:-default}` in the string values of the config file, replaced by the
//! environment's values before the file is deserialized; a default may hold references
//! itself (`${A:-${B}}`). Only values: keys, and the `DELTASHIP_` overrides, are taken as
//! they are. `$${` stands for a literal `${`.

use figment::value::{Dict, Map, Value};
use figment::{Error, Metadata, Profile, Provider};

/// The file's data with every reference replaced, under the file's own name (errors of
/// later stages still say the value came from the file).
pub struct Interpolated {
    metadata: Metadata,
    data: Map<Profile, Dict>,
}

impl Provider for Interpolated {
    fn metadata(&self) -> Metadata {
        self.metadata.clone()
    }

    fn data(&self) -> Result<Map<Profile, Dict>, Error> {
        Ok(self.data.clone())
    }
}

impl Interpolated {
    /// The data of `file` with its references replaced through `lookup`; Err with each
    /// reference that cannot be (its key, the variable, the fix); Ok(None) when the file
    /// cannot be read as data (the caller reports that as it always did).
    pub fn new(file: &impl Provider, lookup: impl Fn(&str) -> Option<String>) -> Result<Option<Interpolated>, Vec<String>> {
        let Ok(mut data) = file.data() else { return Ok(None) };
        let mut problems = Vec::new();
        for dict in data.values_mut() {
            for (key, value) in dict.iter_mut() {
                replace(value, key, &lookup, &mut problems);
            }
        }
        if problems.is_empty() { Ok(Some(Interpolated { metadata: file.metadata(), data })) } else { Err(problems) }
    }
}

/// Replaces the references in `value` (at `path`) and below it.
fn replace(value: &mut Value, path: &str, lookup: &impl Fn(&str) -> Option<String>, problems: &mut Vec<String>) {
    match value {
        Value::String(_, text) if text.contains('$') => match interpolate(text, lookup, 0) {
            Ok(replaced) => *text = replaced,
            Err(problem) => problems.push(format!("`{path}`: {problem}")),
        },
        Value::Dict(_, dict) => {
            for (key, inner) in dict.iter_mut() {
                replace(inner, &format!("{path}.{key}"), lookup, problems);
            }
        }
        Value::Array(_, items) => {
            for (i, inner) in items.iter_mut().enumerate() {
                replace(inner, &format!("{path}.{i}"), lookup, problems);
            }
        }
        _ => {}
    }
}

/// How deep defaults may nest references (`${A:-${B:-${C}}}` is 3): deeper is a mistake,
/// and each level is a call on the stack.
const MAX_NESTING: usize = 8;

/// `text` with each `${NAME}` replaced by the variable's value, `${NAME:-default}` by the
/// default (its own references replaced, `nesting` levels deep already) when the variable
/// is unset or empty, `$${` by `${`. A `$` before anything else stays. The problem never
/// shows a value, only names.
fn interpolate(text: &str, lookup: &impl Fn(&str) -> Option<String>, nesting: usize) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(escaped) = after.strip_prefix("${") {
            out.push_str("${");
            rest = escaped;
        } else if let Some(reference) = after.strip_prefix('{') {
            let end = closing_brace(reference)
                .ok_or_else(|| "`${` without its closing `}`; fix: close the reference, or write `$${` for a literal `${`".to_string())?;
            let (name, default) = match reference[..end].split_once(":-") {
                Some((name, default)) => (name, Some(default)),
                None => (&reference[..end], None),
            };
            let valid = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_') && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                return Err(format!(
                    "`${{{name}}}` is not a variable name (letters, digits and `_`, not starting with a digit); fix: correct it, or write `$${{` for a literal `${{`"
                ));
            }
            match (lookup(name).filter(|v| !v.is_empty()), default) {
                (Some(value), _) => out.push_str(&value),
                (None, Some(default)) if default.contains('$') => {
                    if nesting + 1 >= MAX_NESTING {
                        return Err(format!("the default of `${{{name}:-...}}` nests references more than {MAX_NESTING} deep; fix: nest fewer defaults"));
                    }
                    out.push_str(&interpolate(default, lookup, nesting + 1)?)
                }
                (None, Some(default)) => out.push_str(default),
                (None, None) => return Err(format!("the environment variable {name} is not set; fix: set it, or give a default: `${{{name}:-default}}`")),
            }
            rest = &reference[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// Where the reference that starts `text` (just after its `${`) ends: its `}`, past the
/// `${...}` references its default holds and the `$${` escapes in it.
fn closing_brace(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let (mut depth, mut i) = (0usize, 0);
    while i < bytes.len() {
        if text[i..].starts_with("$${") {
            i += 3;
        } else if text[i..].starts_with("${") {
            depth += 1;
            i += 2;
        } else if bytes[i] == b'}' {
            if depth == 0 {
                return Some(i);
            }
            depth -= 1;
            i += 1;
        } else {
            i += 1;
        }
    }
    None
}

#[cfg(test)]
// figment::Jail's closures return figment's (large) error type; not ours to shrink.
#[allow(clippy::result_large_err)]
mod tests {
    use figment::providers::{Format, Toml};
    use figment::{Figment, Jail};
    use serde_saphyr::figment::Yaml;

    use super::*;

    fn interpolate_(text: &str, lookup: &impl Fn(&str) -> Option<String>) -> Result<String, String> {
        interpolate(text, lookup, 0)
    }

    fn env(name: &str) -> Option<String> {
        match name {
            "BROKERS" => Some("kafka-0:9092,kafka-1:9092".into()),
            "EMPTY" => Some(String::new()),
            "TOKEN" => Some("s3cret-token".into()),
            _ => None,
        }
    }

    #[test]
    fn references_defaults_and_escapes_are_replaced() {
        assert_eq!(interpolate_("${BROKERS}", &env).unwrap(), "kafka-0:9092,kafka-1:9092");
        assert_eq!(interpolate_("nats://${HOST:-nats}:4222", &env).unwrap(), "nats://nats:4222");
        assert_eq!(interpolate_("${EMPTY:-fallback}", &env).unwrap(), "fallback", "an empty variable takes the default");
        assert_eq!(
            interpolate_("${EMPTY}", &env).unwrap_err(),
            "the environment variable EMPTY is not set; fix: set it, or give a default: `${EMPTY:-default}`"
        );
        assert_eq!(interpolate_("$${BROKERS} costs $5", &env).unwrap(), "${BROKERS} costs $5");
        assert_eq!(interpolate_("${HOST:-}", &env).unwrap(), "", "an empty default");
        assert_eq!(interpolate_("a ${TOKEN} b ${TOKEN}", &env).unwrap(), "a s3cret-token b s3cret-token");
    }

    #[test]
    fn a_default_may_hold_references_of_its_own() {
        // Before, `${A:-${B}}` gave the text `${B}`.
        assert_eq!(interpolate_("${UNSET:-${BROKERS}}", &env).unwrap(), "kafka-0:9092,kafka-1:9092");
        assert_eq!(interpolate_("${UNSET:-${NOPE:-x}}/${EMPTY:-y}", &env).unwrap(), "x/y");
        assert_eq!(interpolate_("${BROKERS:-${NOPE}}", &env).unwrap(), "kafka-0:9092,kafka-1:9092", "an unused default is not resolved");
        assert_eq!(interpolate_("${UNSET:-$${B}}", &env).unwrap(), "${B}", "an escape in a default");
        assert!(interpolate_("${UNSET:-${NOPE}}", &env).unwrap_err().contains("NOPE is not set"));
        assert!(interpolate_("${UNSET:-${NOPE}", &env).unwrap_err().contains("without its closing"));
        let deep = format!("{}x{}", "${UNSET:-".repeat(9), "}".repeat(9));
        assert!(interpolate_(&deep, &env).unwrap_err().contains("more than 8 deep"), "{deep}");
        let eight = format!("{}x{}", "${UNSET:-".repeat(8), "}".repeat(8));
        assert_eq!(interpolate_(&eight, &env).unwrap(), "x");
    }

    #[test]
    fn a_bad_reference_names_what_is_wrong_and_never_a_value() {
        assert!(interpolate_("${UNSET}", &env).unwrap_err().contains("UNSET is not set"));
        assert!(interpolate_("${BROKERS", &env).unwrap_err().contains("without its closing"));
        assert!(interpolate_("${1X}", &env).unwrap_err().contains("`${1X}` is not a variable name"));
        assert!(interpolate_("${}", &env).unwrap_err().contains("is not a variable name"));
    }

    #[test]
    fn only_string_values_are_replaced_and_problems_name_their_key() {
        Jail::expect_with(|jail| {
            jail.create_file("c.yaml", "sink:\n  brokers: ${BROKERS}\n  auth: {token: \"${TOKEN}\"}\nresources:\n  - kind: ConfigMap\n    namespaces: [\"${NS:-default}\", \"$${NS}\"]\n\"${KEY}\": 1\n")?;
            let file = Yaml::file_exact("c.yaml");
            let data = Interpolated::new(&file, env).unwrap().unwrap();
            let value: serde_json::Value = Figment::from(data).extract()?;
            assert_eq!(value["sink"]["brokers"], "kafka-0:9092,kafka-1:9092");
            assert_eq!(value["sink"]["auth"]["token"], "s3cret-token");
            assert_eq!(value["resources"][0]["namespaces"], serde_json::json!(["default", "${NS}"]));
            assert_eq!(value["${KEY}"], 1, "keys are taken as they are");

            jail.create_file("bad.toml", "[sink]\nurl = \"${NATS_URL}\"\n[[routes]]\nname = \"${ROUTE\"\n")?;
            let problems = Interpolated::new(&Toml::file_exact("bad.toml"), env).err().unwrap();
            assert_eq!(problems.len(), 2, "{problems:?}");
            assert!(problems.iter().any(|p| p.starts_with("`sink.url`: the environment variable NATS_URL is not set")), "{problems:?}");
            assert!(problems.iter().any(|p| p.starts_with("`routes.0.name`: `${` without its closing `}`")), "{problems:?}");
            Ok(())
        });
    }
}
