//! How an event is laid out in a message: CloudEvents' binary or structured content mode.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ContentMode {
    #[default]
    Binary,
    Structured,
}
