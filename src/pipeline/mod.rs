//! Wires the stages with a bounded queue per route; owns start-up checks, backpressure
//! and the shutdown order.

mod bridge;
mod delivery;
mod dispatch;
mod error;
mod resume;
mod retry;
mod sequencer;
mod startup;
mod tail;
mod tasks;
mod worker;

pub use bridge::run;
pub use dispatch::{DispatchError, Dispatcher};
pub use error::RunError;
pub use retry::RetryPolicy;
pub use startup::{Started, start};
pub use worker::Worker;
