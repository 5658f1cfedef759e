//! Build script: the commit deltaship is built from, for `--version` and
//! `deltaship_build_info`. `BUILD_REVISION` wins (an image build has no .git);
//! otherwise `git rev-parse`, and `unknown` without git or a checkout. (Not a `DELTASHIP_`
//! name: cargo passes it on to `cargo run` and `cargo test`, where that prefix is config.)

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=BUILD_REVISION");
    let revision = std::env::var("BUILD_REVISION").ok().filter(|r| !r.is_empty()).or_else(git_revision).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=BUILD_REVISION={revision}");
}

/// The short commit of HEAD, watching the files that change with it.
fn git_revision() -> Option<String> {
    let git = |args: &[&str]| {
        let out = Command::new("git").args(args).output().ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let revision = git(&["rev-parse", "--short=12", "HEAD"])?;
    // A commit or a branch switch moves HEAD, or the ref it names (loose or packed):
    // rebuild then. Only files that exist: a missing one would rerun this on every build.
    let reference = git(&["symbolic-ref", "-q", "HEAD"]);
    let watched = ["HEAD", "packed-refs"].into_iter().map(str::to_string).chain(reference);
    for path in watched.filter_map(|name| git(&["rev-parse", "--git-path", &name])) {
        if std::path::Path::new(&path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    Some(revision)
}
