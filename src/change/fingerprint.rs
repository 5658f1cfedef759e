//! Fingerprints of shipped content, with the configured ignored fields left out.

use std::io::Write;

use serde_json::Value;
use xxhash_rust::xxh3::Xxh3Default;

/// Fields that never make an update worth shipping on their own.
const ALWAYS_IGNORED: [&str; 2] = ["/metadata/resourceVersion", "/metadata/managedFields"];

/// Hashes objects without the ignored JSON pointers.
#[derive(Debug, Clone)]
pub struct Fingerprinter {
    ignored: Vec<String>,
}

impl Fingerprinter {
    pub fn new(extra_ignored: &[String]) -> Fingerprinter {
        let mut ignored: Vec<String> = ALWAYS_IGNORED.iter().map(|s| s.to_string()).collect();
        ignored.extend(extra_ignored.iter().cloned());
        Fingerprinter { ignored }
    }

    /// The fingerprint of `value` as if the ignored fields were absent. The fields are
    /// taken out and put back rather than copying the object.
    pub fn fingerprint(&self, value: &mut Value) -> u128 {
        let mut taken = Vec::new();
        for p in &self.ignored {
            if let Some((parent, field)) = take(value, p) {
                taken.push((parent, field));
            }
        }
        let mut hasher = HashWriter(Xxh3Default::new());
        // serde_json's maps are ordered (no preserve_order feature), so equal objects
        // serialize to equal bytes. Writing into a hasher cannot fail.
        serde_json::to_writer(&mut hasher, value).expect("hashing never fails");
        for ((parent, name), field) in taken.into_iter().rev() {
            if let Some(Value::Object(m)) = value.pointer_mut(&parent) {
                m.insert(name, field);
            }
        }
        hasher.0.digest128()
    }
}

/// Removes the field at `pointer`, returning (parent pointer, field name) and its value.
fn take(value: &mut Value, pointer: &str) -> Option<((String, String), Value)> {
    let (parent, last) = pointer.rsplit_once('/')?;
    let name = last.replace("~1", "/").replace("~0", "~");
    let field = match value.pointer_mut(parent)? {
        Value::Object(m) => m.remove(&name)?,
        _ => return None,
    };
    Some(((parent.to_string(), name), field))
}

struct HashWriter(Xxh3Default);

impl Write for HashWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ignored_fields_do_not_change_the_fingerprint_and_are_restored() {
        let f = Fingerprinter::new(&["/status".into(), "/metadata/annotations/a~1b".into()]);
        let mut a = json!({"metadata": {"resourceVersion": "1", "annotations": {"a/b": "x", "c": "d"}}, "spec": 1, "status": {"n": 1}});
        let mut b = json!({"metadata": {"resourceVersion": "2", "annotations": {"a/b": "y", "c": "d"}}, "spec": 1, "status": {"n": 2}});
        let before = a.clone();
        assert_eq!(f.fingerprint(&mut a), f.fingerprint(&mut b));
        assert_eq!(a, before, "fields are put back");
        let mut c = json!({"metadata": {"resourceVersion": "3", "annotations": {"a/b": "y", "c": "e"}}, "spec": 1});
        assert_ne!(f.fingerprint(&mut a), f.fingerprint(&mut c));
    }
}
