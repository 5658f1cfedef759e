//! deltaship: Kubernetes changes as CloudEvents on Kafka, NATS or stdout, in order per object,
//! with sync markers so that consumers can rebuild cluster state.

/// The version of the event contract (docs/reference/event-contract.md) this build ships and
/// its `rebuild` follows.
pub const CONTRACT_VERSION: u32 = 2;

pub mod address;
pub mod broker;
pub mod change;
pub mod check;
pub mod checkpoint;
pub mod config;
pub mod event;
mod hex;
pub mod json;
pub mod leader;
pub mod memory;
pub mod model;
pub mod pipeline;
pub mod plan;
pub mod rebuild;
pub mod redact;
pub mod sink;
pub mod telemetry;
pub mod watch;
