//! The test broker's secured listeners and their files (tests/env/kafka/ctl lists them).

use std::path::PathBuf;

/// The mutual-TLS and SASL_SSL listeners and the folder of their files, as tests/env/up
/// exported them: missing variables are a failure with the command to run, never a skip
/// (like support::env).
pub struct Secured {
    pub mtls: String,
    pub sasl_ssl: String,
    pub dir: PathBuf,
}

pub fn secured() -> Secured {
    super::env();
    let var = super::var;
    Secured { mtls: var("DELTASHIP_TEST_KAFKA_MTLS"), sasl_ssl: var("DELTASHIP_TEST_KAFKA_SASL_SSL"), dir: PathBuf::from(var("DELTASHIP_TEST_KAFKA_TLS_DIR")) }
}

impl Secured {
    /// A file of the test CA's set.
    pub fn file(&self, name: &str) -> PathBuf {
        let path = self.dir.join(name);
        assert!(path.is_file(), "{} is missing: restart the broker with `tests/env/kafka/ctl restart`", path.display());
        path
    }

    /// The content of a file of the set (user names and passwords have no newline).
    pub fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.file(name)).unwrap()
    }
}
