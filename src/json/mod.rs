//! The JSON of watched objects: read from the API server's bytes without building a tree
//! (`scan`, the raw-bytes path), or parsed, changed and written back where a splice cannot
//! do the change (`tree`). Both give the same bytes and fingerprint for the same object.

mod scan;
#[cfg(test)]
pub(crate) mod strategies;
mod tree;

pub use scan::{ALWAYS_IGNORED, Found, MANAGED_FIELDS, Member, Meta, ScanError, Scanned, Scanner};
pub use tree::{Fingerprinter, Serialized};
