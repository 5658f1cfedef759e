//! NATS subject tokens: every template value becomes exactly one token, reversibly.
//!
//! A token may not contain `.` (the separator), `*` or `>` (wildcards) or whitespace, and
//! Kubernetes names may contain `.`. Encoding: those characters, `%`, and every byte
//! outside printable ASCII become `%XX` (upper-case hex of each UTF-8 byte); an absent value
//! (the core group, the namespace of a cluster-scoped object) is `_`, and a value that is
//! exactly `_` is written `%5F`, so decoding is unambiguous.

/// The token for `value` (`None`: absent).
pub fn encode_token(value: Option<&str>) -> String {
    let Some(value) = value else { return "_".into() };
    if value == "_" {
        return "%5F".into();
    }
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_graphic() && !matches!(b, b'.' | b'*' | b'>' | b'%') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The value of a token written by `encode_token` (`None` for `_`).
pub fn decode_token(token: &str) -> Result<Option<String>, String> {
    if token == "_" {
        return Ok(None);
    }
    let bytes = token.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = token.get(i + 1..i + 3).ok_or_else(|| format!("truncated escape in `{token}`"))?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| format!("bad escape `%{hex}` in `{token}`"))?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map(Some).map_err(|_| format!("`{token}` is not UTF-8 once decoded"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn kubernetes_names_round_trip_as_single_tokens() {
        let longest = "a".repeat(253);
        for name in ["a.b", "x-y", "_", "%", "a b", "ünï", "*", ">", longest.as_str()] {
            let t = encode_token(Some(name));
            assert!(!t.contains(['.', '*', '>', ' ']) && !t.is_empty(), "{name} -> {t}");
            assert_eq!(decode_token(&t).unwrap().as_deref(), Some(name));
        }
        assert_eq!(encode_token(Some("a.b")), "a%2Eb");
        assert_eq!(encode_token(None), "_");
        assert_eq!(decode_token("_").unwrap(), None);
        assert!(decode_token("%G1").is_err());
    }

    proptest! {
        #[test]
        fn any_string_round_trips(s in ".{0,80}") {
            let t = encode_token(Some(&s));
            prop_assert!(t.bytes().all(|b| b.is_ascii_graphic() && b != b'.' && b != b'*' && b != b'>'));
            prop_assert_eq!(decode_token(&t).unwrap(), Some(s));
        }
    }
}
