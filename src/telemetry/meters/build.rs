//! The metric of the build: its version and revision.

use crate::telemetry::metrics::{self as m, label};

/// Sets `deltaship_build_info`, once the recorder is installed.
pub fn build_info() {
    metrics::gauge!(m::BUILD_INFO, label::VERSION => env!("CARGO_PKG_VERSION"), label::REVISION => m::REVISION).set(1.0);
}
