//! The count and digest of a set of objects (event contract, section 4): what a
//! `sync.completed` marker carries so that a consumer can check that the state it holds is
//! deltaship's. A sum, so it does not depend on order and can be kept as events apply.

use sha2::{Digest, Sha256};

/// One object's term: the first 16 bytes of SHA-256(key, "\n", uid, "\n",
/// resourceVersion), read as a big-endian number.
pub fn term(key: &str, uid: &str, resource_version: &str) -> u128 {
    let mut h = Sha256::new();
    for (i, part) in [key, uid, resource_version].into_iter().enumerate() {
        if i > 0 {
            h.update(b"\n");
        }
        h.update(part.as_bytes());
    }
    let hash = h.finalize();
    u128::from_be_bytes(hash[..16].try_into().expect("SHA-256 has 32 bytes"))
}

/// The count and digest of a set of objects, from their terms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StateSum {
    pub count: u64,
    /// The terms' sum modulo 2^128.
    pub digest: u128,
}

impl StateSum {
    pub fn add(&mut self, term: u128) {
        self.count += 1;
        self.digest = self.digest.wrapping_add(term);
    }

    /// The marker's `state` member: `{"count": N, "digest": "<32 lowercase hex digits>"}`.
    pub fn to_json(self) -> serde_json::Value {
        serde_json::json!({"count": self.count, "digest": format!("{:032x}", self.digest)})
    }
}

impl FromIterator<u128> for StateSum {
    fn from_iter<I: IntoIterator<Item = u128>>(terms: I) -> StateSum {
        let mut sum = StateSum::default();
        for t in terms {
            sum.add(t);
        }
        sum
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_is_the_sum_of_the_objects_terms_in_any_order_modulo_2_128() {
        // `printf 'ns/a\nu1\n7' | sha256sum`: 9003c859063459a282b3019b4296357b 34f4...
        let a = term("ns/a", "u1", "7");
        assert_eq!(a, 0x9003c859063459a282b3019b4296357b);
        let b = term("ns/b", "u2", "8");
        let one: StateSum = [a, b].into_iter().collect();
        let other: StateSum = [b, a].into_iter().collect();
        assert_eq!(one, other);
        assert_eq!(one.count, 2);
        assert_eq!(one.digest, a.wrapping_add(b));
        let wrapped: StateSum = [u128::MAX, 2].into_iter().collect();
        assert_eq!(wrapped.digest, 1, "modulo 2^128");
        assert_eq!(wrapped.to_json(), serde_json::json!({"count": 2, "digest": "00000000000000000000000000000001"}));
        assert_eq!(StateSum::default().to_json()["digest"], "0".repeat(32), "the empty set");
    }
}
