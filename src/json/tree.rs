//! The tree path: an object that must change in ways a splice cannot do (redaction) is
//! parsed, changed, and written back as the API server writes JSON, with its fingerprint
//! taken in the same walk. Where nothing changed, the bytes and the fingerprint are those
//! of the raw-bytes path (`scan`): property-tested there.

use std::io;

use bytes::Bytes;
use serde::Serialize;
use serde_json::Value;
use serde_json::ser::Formatter;
use xxhash_rust::xxh3::Xxh3Default;

use super::scan::ALWAYS_IGNORED;

/// Serializes objects and fingerprints them without the ignored JSON pointers.
#[derive(Debug, Clone)]
pub struct Fingerprinter {
    /// The ignored pointers as unescaped reference tokens.
    ignored: Vec<Vec<String>>,
}

/// An object's JSON (as the API server writes it: compact, members in the tree's order,
/// `<`, `>`, `&`, U+2028 and U+2029 escaped) and its fingerprint.
#[derive(Debug)]
pub struct Serialized {
    pub json: Bytes,
    pub fingerprint: u128,
}

impl Fingerprinter {
    pub fn new(extra_ignored: &[String]) -> Fingerprinter {
        let ignored = ALWAYS_IGNORED.iter().copied().chain(extra_ignored.iter().map(String::as_str)).filter_map(tokens).collect();
        Fingerprinter { ignored }
    }

    /// Serializes `value` once. The fingerprint hashes the same bytes, except those the
    /// ignored fields (and the commas before them) take: equal to hashing the JSON of the
    /// value with those fields removed.
    pub fn serialize(&self, value: &Value) -> Serialized {
        let mut json = Vec::with_capacity(4096);
        let mut skipped = Vec::new();
        let paths: Vec<&[String]> = self.ignored.iter().map(Vec::as_slice).collect();
        write(&mut json, value, &paths, &mut skipped);
        // The bytes may wait in a queue for long: hold no more memory than they need.
        json.shrink_to_fit();
        let mut hasher = Xxh3Default::new();
        let mut at = 0;
        for (start, end) in skipped {
            hasher.update(&json[at..start]);
            at = end;
        }
        hasher.update(&json[at..]);
        Serialized { json: json.into(), fingerprint: hasher.digest128() }
    }
}

/// The reference tokens of a JSON pointer (RFC 6901); None if it is not one.
fn tokens(pointer: &str) -> Option<Vec<String>> {
    let rest = pointer.strip_prefix('/')?;
    Some(rest.split('/').map(|t| t.replace("~1", "/").replace("~0", "~")).collect())
}

/// Writes `value` into `out` exactly as serde_json's compact serializer does, and notes in
/// `skipped` the byte ranges that would be missing had the object fields at `paths`
/// (relative to `value`) been removed. Only the parts on the way to an ignored field are
/// walked here; everything else goes to serde_json whole.
fn write(out: &mut Vec<u8>, value: &Value, paths: &[&[String]], skipped: &mut Vec<(usize, usize)>) {
    match value {
        Value::Object(map) if !paths.is_empty() && !map.is_empty() => {
            out.push(b'{');
            let mut kept_one = false;
            for (i, (key, field)) in map.iter().enumerate() {
                let start = out.len();
                if i > 0 {
                    out.push(b',');
                }
                json_into(out, key);
                out.push(b':');
                if paths.iter().any(|p| p.len() == 1 && p[0] == *key) {
                    json_into(out, field);
                    skipped.push((start, out.len()));
                    continue;
                }
                if !kept_one && i > 0 {
                    // The first field kept: without the ones skipped before it, no comma.
                    skipped.push((start, start + 1));
                }
                kept_one = true;
                write(out, field, &below(paths, |t| t == key.as_str()), skipped);
            }
            out.push(b'}');
        }
        Value::Array(items) if paths.iter().any(|p| p.len() > 1) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write(out, item, &below(paths, |t| array_index(t) == Some(i)), skipped);
            }
            out.push(b']');
        }
        _ => json_into(out, value),
    }
}

/// The rest of the `paths` whose first token `token` accepts.
fn below<'a>(paths: &[&'a [String]], token: impl Fn(&str) -> bool) -> Vec<&'a [String]> {
    paths.iter().filter(|p| p.len() > 1 && token(&p[0])).map(|p| &p[1..]).collect()
}

fn json_into(out: &mut Vec<u8>, value: &(impl Serialize + ?Sized)) {
    let mut ser = serde_json::Serializer::with_formatter(out, GoEscapes);
    value.serialize(&mut ser).expect("JSON values always serialize");
}

/// serde_json's compact writer with the escapes of Go's `encoding/json` (which writes the
/// API server's responses): `<`, `>` and `&` as `\u003c`, `\u003e`, `\u0026`, and the line
/// and paragraph separators U+2028 and U+2029 as `\u2028` and `\u2029`.
struct GoEscapes;

impl Formatter for GoEscapes {
    fn write_string_fragment<W: ?Sized + io::Write>(&mut self, writer: &mut W, fragment: &str) -> io::Result<()> {
        let mut start = 0;
        for (i, c) in fragment.char_indices() {
            let escape: &[u8] = match c {
                '<' => b"\\u003c",
                '>' => b"\\u003e",
                '&' => b"\\u0026",
                '\u{2028}' => b"\\u2028",
                '\u{2029}' => b"\\u2029",
                _ => continue,
            };
            writer.write_all(&fragment.as_bytes()[start..i])?;
            writer.write_all(escape)?;
            start = i + c.len_utf8();
        }
        writer.write_all(&fragment.as_bytes()[start..])
    }
}

/// An array index token as serde_json's `pointer` reads it (no sign, no leading zero).
fn array_index(token: &str) -> Option<usize> {
    if token.starts_with('+') || (token.starts_with('0') && token.len() != 1) {
        return None;
    }
    token.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The fingerprint as defined: the hash of the JSON of `value` without the fields.
    fn hash_without(value: &Value, pointers: &[&str]) -> u128 {
        let mut v = value.clone();
        for p in pointers {
            let (parent, last) = p.rsplit_once('/').unwrap();
            let name = last.replace("~1", "/").replace("~0", "~");
            if let Some(Value::Object(m)) = v.pointer_mut(parent) {
                m.shift_remove(&name);
            }
        }
        xxhash_rust::xxh3::xxh3_128(&serde_json::to_vec(&v).unwrap())
    }

    #[test]
    fn the_json_is_serde_jsons_and_the_fingerprint_that_of_the_json_without_the_ignored_fields() {
        let extra = ["/status", "/metadata/annotations/a~1b", "/spec/list/1/x", "/spec/list/0", "/a", "/nothing/here"];
        let f = Fingerprinter::new(&extra.map(String::from));
        let mut all = ALWAYS_IGNORED.to_vec();
        all.extend(extra);
        for value in [
            json!({"metadata": {"resourceVersion": "1", "annotations": {"a/b": "x", "c": "d"}}, "spec": 1, "status": {"n": 1}}),
            json!({"a": 1, "b": {"c": "\u{20AC}\"\n"}}),
            json!({"a": 1}),
            json!({"metadata": {"managedFields": [], "resourceVersion": "2"}, "spec": {"list": [{"x": 1, "y": 2}, {"x": 1, "y": 2}]}}),
            json!({"metadata": {}, "spec": {"list": []}, "z": [1, {"status": 2}]}),
            json!([1, 2]),
        ] {
            let s = f.serialize(&value);
            assert_eq!(&s.json[..], serde_json::to_vec(&value).unwrap(), "{value}");
            assert_eq!(s.fingerprint, hash_without(&value, &all), "{value}");
        }
    }

    #[test]
    fn ignored_fields_do_not_change_the_fingerprint() {
        let f = Fingerprinter::new(&["/status".into(), "/metadata/annotations/a~1b".into()]);
        let a = json!({"metadata": {"resourceVersion": "1", "annotations": {"a/b": "x", "c": "d"}}, "spec": 1, "status": {"n": 1}});
        let b = json!({"metadata": {"resourceVersion": "2", "annotations": {"a/b": "y", "c": "d"}}, "spec": 1, "status": {"n": 2}});
        assert_eq!(f.serialize(&a).fingerprint, f.serialize(&b).fingerprint);
        let c = json!({"metadata": {"resourceVersion": "3", "annotations": {"a/b": "y", "c": "e"}}, "spec": 1});
        assert_ne!(f.serialize(&a).fingerprint, f.serialize(&c).fingerprint);
        let without_status = json!({"metadata": {"annotations": {"c": "d"}}, "spec": 1});
        assert_eq!(f.serialize(&a).fingerprint, f.serialize(&without_status).fingerprint, "an absent ignored field is as an ignored one");
    }
}
