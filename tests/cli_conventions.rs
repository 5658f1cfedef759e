//! The command line by convention: `--version` names the commit, usage errors and invalid
//! configurations exit with different codes, completions for the common shells, logs
//! without colour codes when stderr is not a terminal, and output to a pipe closed early
//! (`| head`) is no error.

mod support;

use std::process::Command;
use std::time::Duration;

use support::bridge::{EXIT_CONFIG, command, run_to_exit};

fn deltaship(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_deltaship")).args(args).output().expect("run deltaship");
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn version_names_the_release_and_the_commit() {
    let (code, stdout, _) = deltaship(&["--version"]);
    assert_eq!(code, Some(0));
    let version = stdout.trim().strip_prefix(concat!("deltaship ", env!("CARGO_PKG_VERSION"), " (")).and_then(|v| v.strip_suffix(')'));
    let revision = version.unwrap_or_else(|| panic!("not `deltaship <version> (<commit>)`: {stdout}"));
    let head = Command::new("git").args(["rev-parse", "--short=12", "HEAD"]).output().ok().filter(|o| o.status.success());
    match head {
        // Built from this checkout: the commit it was built at (HEAD, unless committed since).
        Some(head) => assert!(revision.len() == 12 && revision.chars().all(|c| c.is_ascii_hexdigit()), "{revision} vs HEAD {head:?}"),
        None => assert_eq!(revision, "unknown"),
    }
}

#[test]
fn a_usage_error_and_an_invalid_config_exit_with_different_codes() {
    let (code, _, stderr) = deltaship(&["run", "--no-such-flag"]);
    assert_eq!(code, Some(2), "a usage error: {stderr}");
    let (status, _, stderr) = command(&["check"], "[[resources]]\nversion = \"v1\"\nkind = \"ConfigMap\"\n[delivery]\nqueue_capacity = 0\n", &[]);
    assert_eq!(status.code(), Some(EXIT_CONFIG), "an invalid config: {stderr}");
    let (_, stdout, _) = deltaship(&["--help"]);
    assert!(stdout.contains("Exit codes: 0 done, 1 failed, 2 usage error, 78 invalid configuration."), "{stdout}");
    assert!(stdout.contains("NATS"), "--help names every sink: {stdout}");
}

#[test]
fn completions_cover_every_subcommand_for_each_shell() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let (code, stdout, stderr) = deltaship(&["completions", shell]);
        assert_eq!(code, Some(0), "{shell}: {stderr}");
        for sub in ["run", "check", "print-config", "rebuild", "completions"] {
            assert!(stdout.contains(sub), "{shell} completions lack {sub}");
        }
    }
    let (code, _, stderr) = deltaship(&["completions", "tcsh"]);
    assert_eq!(code, Some(2), "an unknown shell is a usage error: {stderr}");
}

/// `deltaship schema | head -3`: the reader closes the pipe before the output ends; the
/// command stops quietly with 0, as `cat` does, instead of panicking.
#[test]
fn output_to_a_pipe_closed_early_ends_quietly() {
    for args in [&["schema"][..], &["completions", "bash"]] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = Command::new(env!("CARGO_BIN_EXE_deltaship")).args(args).stdout(writer).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert_eq!(String::from_utf8_lossy(&out.stderr), "", "{args:?}");
    }
}

#[test]
fn logs_to_a_file_or_pipe_carry_no_colour_codes() {
    // A run that fails at once (its kubeconfig is missing) logs the failure as text.
    let config = "[[resources]]\nversion = \"v1\"\nkind = \"ConfigMap\"\n[kubernetes]\nkubeconfig = \"/nonexistent/kubeconfig\"\n[log]\nformat = \"text\"\n";
    let (status, _, log) = run_to_exit(config, Duration::from_secs(30));
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(log.contains("ERROR") && log.contains("/nonexistent/kubeconfig"), "{log}");
    assert!(!log.contains('\u{1b}'), "escape codes in a piped log: {log:?}");
}
