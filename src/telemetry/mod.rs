//! Observability: logs, metrics, and the /metrics /healthz /readyz server.

mod health;
mod http;
mod listener;
mod logging;
pub mod metrics;

pub use health::{Health, RouteHealth, WatchHealth};
pub use http::{HttpError, serve};
pub use logging::init as init_logging;
