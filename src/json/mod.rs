//! The JSON of watched objects: read from the API server's bytes without building a tree
//! (`scan`, the raw-bytes path), or parsed, changed and written back where a splice cannot
//! do the change (`tree`). Both give the same bytes and fingerprint for the same object.

mod scan;
#[cfg(test)]
pub(crate) mod strategies;
mod tree;

pub use scan::{Found, MANAGED_FIELDS, Member, Meta, ScanError, Scanned, Scanner};
pub use tree::{Fingerprinter, Serialized};

/// Fields that never make an update worth shipping on their own: left out of every
/// fingerprint, whatever `ignore_fields` adds.
pub const ALWAYS_IGNORED: [&str; 2] = ["/metadata/resourceVersion", MANAGED_FIELDS];
