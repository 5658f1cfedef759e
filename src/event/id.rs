//! Deterministic event ids: the same change of the same object always gets the same id.

use sha2::{Digest, Sha256};

/// 32 hex digits of SHA-256 over the parts, each terminated by a NUL (no part contains
/// one), so that ("ab","c") and ("a","bc") differ.
pub fn event_id(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0]);
    }
    crate::hex::encode("", &h.finalize()[..16])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_and_part_boundaries_matter() {
        let a = event_id(&["c", "configmaps", "uid-1", "42", "dev.deltaship.object.updated"]);
        assert_eq!(a, event_id(&["c", "configmaps", "uid-1", "42", "dev.deltaship.object.updated"]));
        assert_eq!(a.len(), 32);
        assert_ne!(event_id(&["ab", "c"]), event_id(&["a", "bc"]));
        // The id of this change before hex was built in one allocation: ids never change.
        assert_eq!(event_id(&["c", "configmaps", "uid-1", "42", "dev.deltaship.object.updated", ""]), "d1663f191e609909656ae5aca860682c");
    }
}
