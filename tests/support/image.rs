//! deltaship's OCI image of this test build's binary, as deploy/image/build makes it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `deploy/image/build --binary <this test build's deltaship>` into the OCI layout
/// `<target tmpdir>/NAME` (replaced), image TAG: the image a release build would make, with
/// the binary `cargo test` built already (no second, release build). Needs root, as the
/// build does.
pub fn build(name: &str, tag: &str) -> PathBuf {
    let id = Command::new("id").arg("-u").output().expect("run id -u");
    assert_eq!(String::from_utf8_lossy(&id.stdout).trim(), "0", "deploy/image/build needs root: the image's files are owned by root and 65532");
    let layout = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let built = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/image/build"))
        .args(["--binary", env!("CARGO_BIN_EXE_deltaship"), "--out", layout.to_str().unwrap(), "--tag", tag])
        .output()
        .expect("run deploy/image/build");
    assert!(built.status.success(), "deploy/image/build failed:\n{}", String::from_utf8_lossy(&built.stderr));
    layout
}
