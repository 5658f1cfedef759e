//! The event contract's version is stated in one place (docs/reference/event-contract.md,
//! its **Version.** paragraph), and exported by deltaship and by every consumer library as
//! that number: `deltaship::CONTRACT_VERSION`, Python's `deltaship_consumer.CONTRACT_VERSION`,
//! Go's `consumer.ContractVersion`, Java's `Consumer.CONTRACT_VERSION`.

use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The number after `prefix` on the one line of `path` that starts with it.
fn stated(path: &str, prefix: &str) -> u32 {
    let text = read(path);
    let lines: Vec<&str> = text.lines().map(str::trim_start).filter(|l| l.starts_with(prefix)).collect();
    assert_eq!(lines.len(), 1, "{path}: one line starting with {prefix:?}, found {lines:?}");
    let digits: String = lines[0][prefix.len()..].chars().skip_while(|c| !c.is_ascii_digit()).take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap_or_else(|_| panic!("{path}: no number after {prefix:?} in {:?}", lines[0]))
}

#[test]
fn every_library_exports_the_version_the_contract_states() {
    let contract = stated("docs/reference/event-contract.md", "**Version.** This is the event contract version");
    assert_eq!(deltaship::CONTRACT_VERSION, contract, "deltaship::CONTRACT_VERSION");
    for (path, prefix) in [
        ("consumers/python/deltaship_consumer/__init__.py", "CONTRACT_VERSION ="),
        ("consumers/go/consumer.go", "const ContractVersion ="),
        ("consumers/java/src/main/java/dev/deltaship/consumer/Consumer.java", "public static final int CONTRACT_VERSION ="),
    ] {
        assert_eq!(stated(path, prefix), contract, "{path}");
    }
}
