//! The consumer libraries of consumers/: where they are, the version their manifests give,
//! and their commands run to success.

use std::borrow::BorrowMut;
use std::path::{Path, PathBuf};
use std::process::Command;

/// consumers/ of the repository.
pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("consumers")
}

/// The Python interpreter of the test environment (tests/env/python), in the Python
/// library's directory and importing it.
pub fn python() -> Command {
    let mut cmd = Command::new(super::var("DELTASHIP_TEST_PYTHON"));
    cmd.current_dir(dir().join("python")).env("PYTHONPATH", dir().join("python"));
    cmd
}

/// The Python library's rebuild command (`python -m deltaship_consumer`), ready for its flags.
pub fn python_rebuild() -> Command {
    let mut cmd = python();
    cmd.args(["-m", "deltaship_consumer"]);
    cmd
}

/// The Java library's version, from its POM (the project's own `<version>`, after its
/// `<artifactId>`).
pub fn java_version() -> String {
    let pom = std::fs::read_to_string(dir().join("java/pom.xml")).expect("consumers/java/pom.xml");
    let own = &pom[pom.find("<artifactId>deltaship-consumer</artifactId>").expect("the POM's artifactId")..];
    own.split("<version>").nth(1).and_then(|v| v.split("</version>").next()).expect("the POM's version").to_string()
}

/// Runs `cmd` (a command or a borrowed one); a failure shows its output. Returns its stdout.
pub fn run(mut cmd: impl BorrowMut<Command>, what: &str) -> String {
    let out = cmd.borrow_mut().output().unwrap_or_else(|e| panic!("{what}: {e}"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{what} failed:\n{text}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}
