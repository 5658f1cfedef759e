//! Raw input checked before it is parsed: the nesting depth of the config file and the
//! names of `DELTASHIP_` environment variables.

use std::ffi::OsString;

/// Environment variables with this prefix override file settings; `__` separates levels,
/// e.g. `DELTASHIP_SINK__BROKERS=host:9092` sets `sink.brokers`.
pub const ENV_PREFIX: &str = "DELTASHIP_";

/// Variables under the prefix that are not configuration: the test environment's
/// (`DELTASHIP_TEST_*`) and the CLI's own (`DELTASHIP_CONFIG`).
pub(super) const ENV_NOT_CONFIG: [&str; 2] = ["test_", "config"];

/// The deepest nesting accepted in a config file. The deepest option is about 7 levels down
/// (`routes`, an entry, `sink`, `create_topics`, `config`, ...); a parser needs time and
/// stack for every level, so a deeper file is refused before it is parsed.
pub const MAX_DEPTH: usize = 32;

/// The most `__`-separated levels of an environment variable's name: no option is deeper.
const MAX_ENV_LEVELS: usize = 8;

/// The nesting depth of a TOML or YAML text (`yaml`: indentation nests too), an upper bound
/// computed in one pass over the text: open `[` and `{` outside quotes and comments, plus
/// for YAML the indentation levels (each `- ` a level), plus for TOML the dots of a key.
/// Stops counting once past `MAX_DEPTH`: Err with the line (1-based) where it got deeper.
pub fn check_depth(text: &str, yaml: bool) -> Result<(), String> {
    let mut flow = 0usize;
    let mut indents: Vec<usize> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let content = line.trim_start();
        if content.is_empty() || content.starts_with('#') {
            continue;
        }
        let mut block = 0;
        if yaml && flow == 0 {
            // The columns where this line's nodes start: its indentation, then after each `- `.
            let mut column = line.len() - content.len();
            let mut rest = content;
            loop {
                while indents.last().is_some_and(|top| *top >= column) {
                    indents.pop();
                }
                indents.push(column);
                let Some(after) = rest.strip_prefix("- ").or_else(|| rest.strip_prefix("-\t")) else { break };
                let inner = after.trim_start();
                column += rest.len() - inner.len();
                rest = inner;
            }
            block = indents.len();
        }
        let mut quote = None;
        let mut dots = 0;
        let mut in_key = !yaml;
        for c in content.chars() {
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), _) => {}
                (None, '"' | '\'') => quote = Some(c),
                (None, '#') => break,
                (None, '[' | '{') => flow += 1,
                (None, ']' | '}') => flow = flow.saturating_sub(1),
                (None, '=') => in_key = false,
                (None, '.') if in_key => dots += 1,
                _ => {}
            }
            if block + flow + dots > MAX_DEPTH {
                return Err(format!("nests deeper than {MAX_DEPTH} levels at line {}", n + 1));
            }
        }
    }
    Ok(())
}

/// What is wrong with the names of environment variables that look meant for deltaship:
/// a prefix not in capitals (`deltaship_cluster`), lower-case letters, or a malformed path
/// (`DELTASHIP___X`: an empty level, a level starting or ending with `_`, characters other
/// than capitals, digits and `_`, too many levels). Each names the variable and the spelling
/// that works.
pub fn check_env_names(names: impl IntoIterator<Item = OsString>) -> Vec<String> {
    let mut out = Vec::new();
    for name in names {
        let Some(name) = name.to_str() else { continue };
        let Some(head) = name.get(..ENV_PREFIX.len()).filter(|p| p.eq_ignore_ascii_case(ENV_PREFIX)) else { continue };
        let rest = &name[head.len()..];
        if ENV_NOT_CONFIG.iter().any(|p| rest.to_ascii_lowercase().starts_with(p)) && rest.to_ascii_uppercase() == rest {
            continue;
        }
        let levels: Vec<&str> = rest.split("__").collect();
        let well_formed =
            levels.iter().all(|l| !l.is_empty() && !l.starts_with('_') && !l.ends_with('_') && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'));
        let spelled = levels
            .iter()
            .map(|l| l.trim_matches(|c: char| !c.is_ascii_alphanumeric()).to_ascii_uppercase())
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join("__");
        let right = format!("{ENV_PREFIX}{spelled}");
        if !well_formed || levels.len() > MAX_ENV_LEVELS {
            out.push(format!(
                "the environment variable `{name}` is not a configuration key: `{ENV_PREFIX}` is followed by key names in capitals, digits and single `_`, with `__` between levels (at most {MAX_ENV_LEVELS}); fix: rename it (e.g. `{right}`) or unset it"
            ));
        } else if head != ENV_PREFIX || rest.bytes().any(|b| b.is_ascii_lowercase()) {
            out.push(format!("the environment variable `{name}` is not in capitals; fix: rename it `{right}`"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn ordinary_configs_are_shallow_enough() {
        let yaml = "cluster: a\nresources:\n  - version: v1\n    kind: ConfigMap\n    filter: {types: [updated], changed_paths: ['/a']}\nroutes:\n  - name: r\n    sink:\n      type: kafka\n      create_topics:\n        config:\n          cleanup.policy: compact\n";
        assert_eq!(check_depth(yaml, true), Ok(()));
        let toml = "[[resources]]\nkind = \"ConfigMap\" # [[[[ a comment\ntopic = \"t.{cluster}.[\"\n[sink.create_topics.config]\n\"a.b.c\" = \"x\"\n";
        assert_eq!(check_depth(toml, false), Ok(()));
    }

    #[test]
    fn deep_nesting_is_refused_at_once_with_its_line() {
        let started = Instant::now();
        let indented: String = (0..100_000).map(|i| format!("{}a:\n", " ".repeat(i % 200))).collect();
        let deep = [
            (indented.as_str(), true),
            (&"- ".repeat(100_000), true),
            (&format!("x: {}", "[".repeat(100_000)), true),
            (&format!("x = {}", "{a=".repeat(100_000)), false),
            (&format!("{} = 1", "a.".repeat(100_000)), false),
        ];
        for (text, yaml) in deep {
            let e = check_depth(text, yaml).unwrap_err();
            assert!(e.contains("deeper than 32 levels at line"), "{e}");
        }
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    }

    fn names(list: &[&str]) -> Vec<String> {
        check_env_names(list.iter().map(OsString::from))
    }

    #[test]
    fn environment_names_must_be_capitals_with_single_levels() {
        assert!(names(&["DELTASHIP_CLUSTER", "DELTASHIP_SINK__BROKERS", "DELTASHIP_TEST_KAFKA", "DELTASHIP_CONFIG", "PATH", "DELTA"]).is_empty());
        let e = names(&["deltaship_cluster", "DELTASHIP_Sink__BROKERS", "DELTASHIP___X", "DELTASHIP_SINK___BROKERS", "DELTASHIP_", "DELTASHIP_SINK-BROKERS"]);
        assert_eq!(e.len(), 6, "{e:?}");
        assert!(e[0].contains("`deltaship_cluster` is not in capitals") && e[0].contains("rename it `DELTASHIP_CLUSTER`"), "{}", e[0]);
        assert!(e[1].contains("rename it `DELTASHIP_SINK__BROKERS`"), "{}", e[1]);
        assert!(e[2].contains("`DELTASHIP___X` is not a configuration key") && e[2].contains("`DELTASHIP_X`"), "{}", e[2]);
        assert!(e[3].contains("`DELTASHIP_SINK__BROKERS`"), "{}", e[3]);
        let deep = format!("DELTASHIP_{}", "A__".repeat(50_000));
        assert_eq!(names(&[&deep]).len(), 1);
    }
}
