//! The metrics of a watch's redaction: the fields each rule redacted.

use metrics::Counter;

use crate::telemetry::metrics::{self as m, label};

/// The handles of one watch's redactor: a counter per field rule, by rule position
/// (rules with the same action get handles of the same counter).
#[derive(Default)]
pub struct RedactionMeters(Vec<Counter>);

impl RedactionMeters {
    /// The handles of a watch of `resource` (its metric label) whose rules have `actions`
    /// (`RedactAction::as_str`), in rule order.
    pub fn new(resource: &str, actions: impl Iterator<Item = &'static str>) -> RedactionMeters {
        RedactionMeters(actions.map(|action| metrics::counter!(m::REDACTED_FIELDS, label::RESOURCE => resource.to_string(), label::ACTION => action)).collect())
    }

    /// Rule `rule` redacted `fields` fields.
    pub fn redacted(&self, rule: usize, fields: u64) {
        self.0[rule].increment(fields);
    }
}
