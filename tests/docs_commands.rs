//! The commands and configuration blocks of the documentation are ones that work: every
//! `deltaship` command names a subcommand and flags the binary has, and files that exist;
//! every script it runs is in the repository; every `helm` value it sets is one the chart
//! has; every TOML block is a named configuration snippet (each is checked against the
//! schema by tests/config_schema.rs and run by the tests that name it). No test server is
//! needed.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use serde_json::Value;
use support::docs::{Fence, all_fences, read, root};

/// The words of a shell command, quotes removed (no expansion: `$(...)` stays one word).
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut quote: Option<char> = None;
    let mut started = false;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                started = true;
            }
            (None, c) if c.is_whitespace() => {
                if started || !word.is_empty() {
                    out.push(std::mem::take(&mut word));
                }
                started = false;
            }
            (None, c) => {
                word.push(c);
                started = true;
            }
        }
    }
    if started || !word.is_empty() {
        out.push(word);
    }
    out
}

/// The commands of a shell block: continuation lines joined, comments and blank lines left
/// out, each command's words.
fn commands(fence: &Fence) -> Vec<Vec<String>> {
    let joined = fence.text.replace("\\\n", " ");
    joined
        .lines()
        .map(|l| l.find(" #").map_or(l, |at| &l[..at]).trim())
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .flat_map(|l| l.split("&&").map(str::to_string).collect::<Vec<_>>())
        .map(|l| {
            let mut w = words(&l);
            // Output redirections name files that the command makes.
            if let Some(at) = w.iter().position(|w| w == ">") {
                w.truncate(at);
            }
            // `VAR=value` assignments and `sudo` before the program.
            let skip = w.iter().take_while(|w| w.as_str() == "sudo" || (w.contains('=') && !w.starts_with('-'))).count();
            w.split_off(skip)
        })
        .filter(|w| !w.is_empty())
        .collect()
}

/// Programs that are not part of the repository, named as a reader would run them.
const TOOLS: [&str; 11] = ["cargo", "docker", "skopeo", "crane", "kubectl", "source", "syft", "grype", "trivy", "pip", "go"];

fn deltaship_help(subcommand: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_deltaship")).args([subcommand, "--help"]).output().unwrap();
    assert!(out.status.success(), "`deltaship {subcommand} --help` failed: is {subcommand} a subcommand?\n{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// A `deltaship` command's subcommand and flags, and the files it reads.
fn check_deltaship(args: &[String]) -> Vec<String> {
    let mut wrong = Vec::new();
    let Some(sub) = args.first() else { return vec!["no subcommand".into()] };
    let help = deltaship_help(sub);
    for (i, arg) in args.iter().enumerate() {
        if arg.starts_with("--") {
            let flag = arg.split('=').next().unwrap();
            if !help.contains(&format!("{flag} ")) && !help.contains(&format!("{flag}\n")) && !help.contains(&format!("{flag}=")) {
                wrong.push(format!("`deltaship {sub}` has no flag {flag}"));
            }
            if matches!(flag, "--config" | "--records") {
                let file = &args[i + 1];
                if !root().join(file).is_file() {
                    wrong.push(format!("{flag} {file}: no such file in the repository"));
                }
            }
        }
    }
    wrong
}

/// The chart's values and the configuration's top-level keys.
fn chart_values() -> Value {
    serde_saphyr::from_str(&read(std::path::Path::new("deploy/helm/deltaship/values.yaml"))).unwrap()
}

/// A `--set KEY=VALUE` of a `helm` command names a value of the chart (or, under `config.`,
/// a key of the configuration).
fn check_helm(args: &[String]) -> Vec<String> {
    let values = chart_values();
    let schema = deltaship::config::schema();
    let mut wrong = Vec::new();
    if !matches!(args.first().map(String::as_str), Some("install" | "upgrade" | "uninstall" | "rollback" | "test")) {
        wrong.push(format!("helm {args:?}: not a subcommand the documentation should need"));
    }
    for (i, arg) in args.iter().enumerate() {
        if arg.starts_with("--set") {
            let key = args[i + 1].split('=').next().unwrap();
            let mut path = key.split('.');
            let first = path.next().unwrap();
            let known = if first == "config" {
                path.next().is_some_and(|k| schema["properties"].get(k).is_some())
            } else {
                let mut node = &values[first];
                let mut ok = !node.is_null();
                for part in path {
                    // Maps the chart leaves open (labels) take any key.
                    if node.as_object().is_some_and(|o| o.is_empty()) {
                        break;
                    }
                    node = &node[part];
                    ok &= !node.is_null();
                }
                ok
            };
            if !known {
                wrong.push(format!("helm --set {key}: the chart has no such value"));
            }
        }
        if arg.starts_with("deploy/") && !root().join(arg).exists() {
            wrong.push(format!("{arg}: no such path"));
        }
    }
    wrong
}

fn check(command: &[String]) -> Vec<String> {
    let program = command[0].as_str();
    let args = &command[1..];
    match program {
        "deltaship" | "target/release/deltaship" => check_deltaship(args),
        "helm" => check_helm(args),
        "cargo" => {
            let mut wrong = Vec::new();
            for (i, arg) in args.iter().enumerate() {
                if arg == "--test" && !root().join(format!("tests/{}.rs", args[i + 1])).is_file() {
                    wrong.push(format!("cargo test --test {}: no such test", args[i + 1]));
                }
            }
            wrong
        }
        p if TOOLS.contains(&p) => Vec::new(),
        p if p.contains('/') => match std::fs::metadata(root().join(p)) {
            Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => Vec::new(),
            _ => vec![format!("{p}: not an executable file of the repository")],
        },
        p => vec![format!("{p}: a program the documentation does not expect; add it to TOOLS if it is one readers have")],
    }
}

#[test]
fn every_command_in_the_documentation_names_what_exists() {
    let mut wrong = Vec::new();
    let mut checked = 0;
    for fence in all_fences().iter().filter(|f| f.lang == "sh") {
        for command in commands(fence) {
            checked += 1;
            for problem in check(&command) {
                wrong.push(format!("{}:{}: {problem}", fence.page.display(), fence.line));
            }
        }
    }
    assert!(wrong.is_empty(), "commands that would not work:\n{}", wrong.join("\n"));
    assert!(checked >= 30, "only {checked} commands: the pages' shape changed");
}

#[test]
fn a_wrong_command_is_found() {
    let fence = |text: &str| Fence { page: "x.md".into(), line: 1, lang: "sh".into(), text: text.into(), mark: None };
    let all = |text: &str| commands(&fence(text)).iter().flat_map(|c| check(c)).collect::<Vec<_>>();
    assert!(all("DELTASHIP_SINK__BROKERS=k:9092 deltaship check --config config/kafka.toml\n").is_empty());
    assert!(!all("deltaship check --confg config/kafka.toml\n").is_empty());
    assert!(!all("deltaship check --config config/no-such.toml\n").is_empty());
    assert!(!all("helm install deltaship deploy/helm/deltaship \\\n  --set replica=3\n").is_empty());
    assert!(all("helm install d deploy/helm/deltaship --set rbac.scope=namespaced --set-json 'config.sink={\"type\":\"stdout\"}'\n").is_empty());
    assert!(!all("tests/no-such-script\n").is_empty());
    assert!(all("sudo deploy/release REGISTRY # publish\n").is_empty());
}

/// The configuration in the documentation is checked: every TOML block is marked with its
/// name, so that tests/config_schema.rs validates it and the tests that run it find it.
#[test]
fn every_toml_block_is_a_named_config_snippet() {
    let unnamed: Vec<String> = all_fences()
        .iter()
        .filter(|f| f.lang == "toml" && !f.mark.as_deref().is_some_and(|m| m.starts_with("config: ")))
        .map(|f| format!("{}:{}", f.page.display(), f.line))
        .collect();
    assert!(unnamed.is_empty(), "TOML blocks without <!-- config: NAME --> before them:\n{}", unnamed.join("\n"));
    let names = support::docs::marked("config");
    let mut unique: Vec<&String> = names.iter().map(|(n, _)| n).collect();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), names.len(), "a name marks two blocks: {names:?}");
}

/// The README's table of the first metrics to watch repeats rows of the metrics reference:
/// they must be the same rows.
#[test]
fn the_readmes_metric_rows_are_the_references() {
    let reference = read(std::path::Path::new("docs/reference/metrics.md"));
    let rows: Vec<String> = read(std::path::Path::new("README.md")).lines().filter(|l| l.starts_with("| `deltaship_")).map(str::to_string).collect();
    assert!(rows.len() >= 3, "{rows:?}");
    for row in rows {
        assert!(reference.lines().any(|l| l == row), "README's row is not docs/reference/metrics.md's:\n{row}");
    }
}
