//! docs/operations/troubleshooting.md quotes deltaship's own messages, and each one is still in the
//! code (`…` stands for what varies). Quoted commands, settings and metric names are not
//! messages: a quote is one when it has a space, no `=`, and names no command or metric.

mod support;

#[test]
fn every_quoted_message_is_one_deltaship_prints() {
    let doc = std::fs::read_to_string("docs/operations/troubleshooting.md").unwrap();
    let code = support::docs::rust_sources("src");
    let mut checked = 0;
    for (i, quote) in doc.split('`').enumerate() {
        // Odd parts are inside backticks.
        let command = ["deltaship", "kubectl", "time("].iter().any(|c| quote.starts_with(c));
        if i % 2 == 0 || !quote.contains(' ') || quote.contains('=') || command {
            continue;
        }
        for fragment in quote.split('…').map(str::trim).filter(|f| f.len() >= 6) {
            let fragment = fragment.replace('\n', " ");
            assert!(code.contains(&fragment), "docs/operations/troubleshooting.md quotes {fragment:?}, which no source file has");
            checked += 1;
        }
    }
    assert!(checked >= 15, "only {checked} quotes found: the document's shape changed");
}
