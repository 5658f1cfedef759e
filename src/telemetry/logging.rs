//! Logs on stderr (stdout belongs to the stdout sink), as text or JSON.

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// `RUST_LOG` wins over the configured level when set.
pub fn init(format: LogFormat, level: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}
