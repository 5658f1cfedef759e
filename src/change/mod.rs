//! The change stage: watch events classified against the index into changes and markers.

mod classify;
mod compact;
mod index;
mod output;

pub use classify::Classifier;
pub use compact::Compact;
pub use index::{Entry, Index};
pub use output::{Change, Marker, ObjectChange, Payload, StateTerms, SyncCounts, Trees};
