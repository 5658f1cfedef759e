//! `${VAR}` and `${VAR:-default}` in the string values of the config file, replaced by the
//! environment's values before the file is deserialized. Only values: keys, and the
//! `DELTASHIP_` overrides, are taken as they are. `$${` stands for a literal `${`.

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
        Value::String(_, text) if text.contains('$') => match interpolate(text, lookup) {
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

/// `text` with each `${NAME}` replaced by the variable's value, `${NAME:-default}` by the
/// default when the variable is unset or empty, `$${` by `${`. A `$` before anything else
/// stays. The problem never shows a value, only names.
fn interpolate(text: &str, lookup: &impl Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(escaped) = after.strip_prefix("${") {
            out.push_str("${");
            rest = escaped;
        } else if let Some(reference) = after.strip_prefix('{') {
            let end =
                reference.find('}').ok_or_else(|| "`${` without its closing `}`; fix: close the reference, or write `$${` for a literal `${`".to_string())?;
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

#[cfg(test)]
// figment::Jail's closures return figment's (large) error type; not ours to shrink.
#[allow(clippy::result_large_err)]
mod tests {
    use figment::providers::{Format, Toml, Yaml};
    use figment::{Figment, Jail};

    use super::*;

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
        assert_eq!(interpolate("${BROKERS}", &env).unwrap(), "kafka-0:9092,kafka-1:9092");
        assert_eq!(interpolate("nats://${HOST:-nats}:4222", &env).unwrap(), "nats://nats:4222");
        assert_eq!(interpolate("${EMPTY:-fallback}", &env).unwrap(), "fallback", "an empty variable takes the default");
        assert_eq!(
            interpolate("${EMPTY}", &env).unwrap_err(),
            "the environment variable EMPTY is not set; fix: set it, or give a default: `${EMPTY:-default}`"
        );
        assert_eq!(interpolate("$${BROKERS} costs $5", &env).unwrap(), "${BROKERS} costs $5");
        assert_eq!(interpolate("${HOST:-}", &env).unwrap(), "", "an empty default");
        assert_eq!(interpolate("a ${TOKEN} b ${TOKEN}", &env).unwrap(), "a s3cret-token b s3cret-token");
    }

    #[test]
    fn a_bad_reference_names_what_is_wrong_and_never_a_value() {
        assert!(interpolate("${UNSET}", &env).unwrap_err().contains("UNSET is not set"));
        assert!(interpolate("${BROKERS", &env).unwrap_err().contains("without its closing"));
        assert!(interpolate("${1X}", &env).unwrap_err().contains("`${1X}` is not a variable name"));
        assert!(interpolate("${}", &env).unwrap_err().contains("is not a variable name"));
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
