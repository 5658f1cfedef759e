//! The configuration's JSON Schema (draft 2020-12), generated from the config types and
//! their doc comments: `deltaship schema` prints it, `schemas/config.schema.json` is it,
//! and the chart's `values.schema.json` checks its `config` value with it.

use schemars::generate::SchemaSettings;

use super::model::Config;

/// The JSON Schema of a configuration file (TOML or YAML read as JSON): every key, its
/// type, its default and its description. What the schema cannot say (a template's
/// placeholders, a route's resources naming a watched resource, files that must exist)
/// `deltaship check` does.
pub fn schema() -> serde_json::Value {
    let mut root = SchemaSettings::draft2020_12().into_generator().into_root_schema_for::<Config>();
    root.insert("title".into(), "deltaship configuration".into());
    root.to_value()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_describes_every_top_level_key_and_refuses_others() {
        let s = schema();
        let keys: Vec<&str> = s["properties"].as_object().unwrap().keys().map(String::as_str).collect();
        let parsed: Config = serde_json::from_value(serde_json::json!({"sink": {"type": "stdout"}})).unwrap();
        let config = serde_json::to_value(parsed).unwrap();
        for key in config.as_object().unwrap().keys() {
            assert!(keys.contains(&key.as_str()), "{key} missing from the schema: {keys:?}");
        }
        assert_eq!(s["additionalProperties"], false);
        assert_eq!(s["properties"]["cluster"]["default"], "local");
    }
}
