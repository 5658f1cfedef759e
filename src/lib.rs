//! deltaship: Kubernetes changes as CloudEvents on Kafka or stdout, in order per object,
//! with sync markers so that consumers can rebuild cluster state.

pub mod change;
pub mod check;
pub mod config;
pub mod event;
pub mod leader;
pub mod pipeline;
pub mod rebuild;
pub mod resource;
pub mod route;
pub mod sink;
pub mod telemetry;
pub mod watch;
