//! The chart's README (deploy/helm/deltaship/README.md) is generated from values.yaml: every
//! value with its default and the comment above it. A change to values.yaml without the
//! README fails here; regenerate with `DELTASHIP_BLESS=1 cargo test --test chart_readme`.

use serde_json::Value;

const VALUES: &str = "deploy/helm/deltaship/values.yaml";
const README: &str = "deploy/helm/deltaship/README.md";

/// Values whose keys are settings of their own, listed one row each; any other value (a
/// Kubernetes object, deltaship's `config`, a list) is one row.
const GROUPS: [&str; 10] = [
    "image",
    "digestKeySecret",
    "serviceAccount",
    "rbac",
    "service",
    "serviceMonitor",
    "prometheusRule",
    "grafanaDashboard",
    "podDisruptionBudget",
    "networkPolicy",
];

/// The longest default shown in the table; longer ones point to values.yaml.
const MAX_DEFAULT: usize = 60;

/// A key line of values.yaml: its indentation and name.
fn key_of(line: &str) -> Option<(usize, &str)> {
    let name = line.trim_start();
    let indent = line.len() - name.len();
    let key = name.split(':').next()?;
    (name.contains(':') && !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')).then_some((indent, key))
}

/// The comment block above a key: prose lines joined, example lines (indented inside the
/// comment) as inline code.
fn describe(comment: &[&str]) -> String {
    let mut parts: Vec<String> = Vec::new();
    for line in comment {
        let text = line.trim_start().trim_start_matches('#');
        let text = text.strip_prefix(' ').unwrap_or(text);
        if text.starts_with(' ') {
            // Markdown code with a backtick inside needs a double fence.
            let code = text.trim();
            parts.push(if code.contains('`') { format!("`` {code} ``") } else { format!("`{code}`") });
        } else if !text.is_empty() {
            parts.push(text.to_string());
        }
    }
    parts.join(" ").replace('|', "\\|")
}

fn default_of(values: &Value, path: &[&str]) -> String {
    let value = path.iter().fold(values, |v, k| &v[*k]);
    let shown = serde_json::to_string(value).unwrap();
    if shown.len() > MAX_DEFAULT { "see values.yaml".into() } else { format!("`{}`", shown.replace('|', "\\|")) }
}

fn generate() -> String {
    let text = std::fs::read_to_string(VALUES).unwrap();
    let values: Value = serde_saphyr::from_str(&text).unwrap();
    let chart: Value = serde_saphyr::from_str(&std::fs::read_to_string("deploy/helm/deltaship/Chart.yaml").unwrap()).unwrap();
    let mut rows = Vec::new();
    let (mut comment, mut group): (Vec<&str>, Option<&str>) = (Vec::new(), None);
    for line in text.lines() {
        if line.trim_start().starts_with('#') {
            comment.push(line);
            continue;
        }
        match key_of(line) {
            Some((0, key)) => {
                group = GROUPS.contains(&key).then_some(key);
                if group.is_none() || !comment.is_empty() {
                    let default = if group.is_some() { String::new() } else { default_of(&values, &[key]) };
                    rows.push(format!("| `{key}` | {default} | {} |", describe(&comment)));
                }
            }
            Some((2, key)) if group.is_some() => {
                let parent = group.unwrap();
                rows.push(format!("| `{parent}.{key}` | {} | {} |", default_of(&values, &[parent, key]), describe(&comment)));
            }
            _ => {}
        }
        comment.clear();
    }
    format!(
        "# deltaship Helm chart\n\n\
         <!-- Generated from values.yaml by tests/chart_readme.rs; regenerate with\n     DELTASHIP_BLESS=1 cargo test --test chart_readme -->\n\n\
         {}\n\n\
         Chart version {}, deltaship {}. How to install it, the RBAC it grants and what was tested: the\n\
         repository's docs/setup/install.md; the dashboard and alerts: docs/operations/monitoring.md.\n\
         `values.schema.json` refuses unknown keys and wrong types.\n\n\
         ## Values\n\n| value | default | description |\n|---|---|---|\n{}\n",
        chart["description"].as_str().unwrap().trim(),
        chart["version"].as_str().unwrap(),
        chart["appVersion"].as_str().unwrap(),
        rows.join("\n")
    )
}

#[test]
fn the_chart_readme_lists_every_value_as_values_yaml_says() {
    let fresh = generate();
    if std::env::var_os("DELTASHIP_BLESS").is_some() {
        std::fs::write(README, &fresh).unwrap();
    }
    let committed = std::fs::read_to_string(README).unwrap_or_default();
    assert!(committed == fresh, "{README} is not what values.yaml says; regenerate it with: DELTASHIP_BLESS=1 cargo test --test chart_readme");
    // Every top-level value has a row.
    let values: Value = serde_saphyr::from_str(&std::fs::read_to_string(VALUES).unwrap()).unwrap();
    for key in values.as_object().unwrap().keys() {
        assert!(fresh.contains(&format!("| `{key}")), "no row for {key}");
    }
}
