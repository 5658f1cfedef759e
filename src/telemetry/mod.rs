//! Observability: logs, metrics and their owners, and the /metrics /healthz /readyz server.

mod health;
mod http;
mod listener;
mod logging;
pub mod meters;
pub mod metrics;
mod process;

pub use health::{Health, RouteHealth, WatchHealth};
pub use http::{HttpError, install_recorder, serve};
pub use logging::init as init_logging;
pub use process::{heap_allocated_bytes, resident_bytes};
