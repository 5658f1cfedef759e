//! The metrics' owners: each thing that writes metrics (a route's dispatcher, a watch's
//! worker, classifier and decoding, a checkpoint writer, the Kafka sink, health...) holds
//! one struct of these, with its handles registered once with its labels, so that its hot
//! path only counts and sets. Only these files register metrics, each metric in one of
//! them, with the label keys of `telemetry::metrics::label` (`tests/architecture.rs`).
//! Every gauge has one writer; a counter whose labels do not tell its owners apart (the
//! watches of one resource in several namespaces, the Kafka routes' doubtful records) is
//! their sum.

mod build;
mod checkpoint;
mod classifier;
mod counters;
mod decode;
mod dispatch;
mod health;
mod kafka;
mod lease;
mod redaction;
mod requests;
mod resume;
mod worker;

pub use build::build_info;
pub use checkpoint::CheckpointMeters;
pub use classifier::ClassifierMeters;
pub use decode::DecodeMeters;
pub use dispatch::DispatchMeters;
pub use health::HealthMeters;
pub use kafka::{DoubtMeters, RecoveryMeters, TransactionMeters};
pub use lease::LeaseMeters;
pub use redaction::RedactionMeters;
pub use requests::RequestMeters;
pub use resume::{ResumeMeters, held_elsewhere};
pub use worker::WorkerMeters;
