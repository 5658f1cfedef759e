//! The checkpoint as a trust boundary: with `resume.key_file`, every record is sealed with
//! an HMAC-SHA256 of its key and value, so that a record written or edited by anyone
//! without the key (a forged position would suppress changes) is refused as corrupt.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// What follows a sealed record's value: its MAC in hex, after a newline (record values
/// are single-line JSON).
const TAG: &[u8] = b"\nhmac-sha256:";

/// The key records are sealed with, if any.
#[derive(Clone, Default)]
pub struct Seal(Option<Hmac<Sha256>>);

impl std::fmt::Debug for Seal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Seal(keyed)" } else { "Seal(none)" })
    }
}

impl Seal {
    /// Records sealed with `key`; `None`: records are written and read as they are.
    pub fn new(key: Option<&[u8]>) -> Seal {
        Seal(key.map(|k| Hmac::new_from_slice(k).expect("HMAC takes keys of any length")))
    }

    fn mac(&self, key: &str, value: &[u8]) -> Option<Hmac<Sha256>> {
        let mut mac = self.0.clone()?;
        mac.update(key.as_bytes());
        mac.update(b"\n");
        mac.update(value);
        Some(mac)
    }

    /// The value as it is written under `key`.
    pub fn seal(&self, key: &str, mut value: Vec<u8>) -> Vec<u8> {
        if let Some(mac) = self.mac(key, &value) {
            let tag = mac.finalize().into_bytes();
            value.extend_from_slice(TAG);
            value.extend_from_slice(crate::hex::encode("", &tag).as_bytes());
        }
        value
    }

    /// The value read under `key`, once its seal is verified; `None` when it is not sealed
    /// by this key (or sealed while this bridge holds no key: it cannot check it).
    pub fn open<'a>(&self, key: &str, stored: &'a [u8]) -> Option<&'a [u8]> {
        let split = stored.windows(TAG.len()).rposition(|w| w == TAG);
        match (&self.0, split) {
            (None, None) => Some(stored),
            (Some(_), Some(at)) => {
                let (value, tag) = (&stored[..at], &stored[at + TAG.len()..]);
                let tag = decode_hex(tag)?;
                self.mac(key, value)?.verify_slice(&tag).ok()?;
                Some(value)
            }
            _ => None,
        }
    }
}

fn decode_hex(text: &[u8]) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    text.chunks(2).map(|pair| u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_record_opens_only_unchanged_under_its_key_with_the_same_secret() {
        let seal = Seal::new(Some(b"0123456789abcdef0123"));
        let value = br#"{"uid":"u","rv":"7","fp":"00"}"#.to_vec();
        let sealed = seal.seal("c.r.x.=.o.ns/a", value.clone());
        assert_eq!(seal.open("c.r.x.=.o.ns/a", &sealed), Some(&value[..]));
        assert_eq!(seal.open("c.r.x.=.o.ns/b", &sealed), None, "moved to another key");
        let edited = String::from_utf8(sealed.clone()).unwrap().replace("\"7\"", "\"9\"");
        assert_eq!(seal.open("c.r.x.=.o.ns/a", edited.as_bytes()), None, "edited");
        assert_eq!(seal.open("c.r.x.=.o.ns/a", &value), None, "not sealed at all");
        assert_eq!(Seal::new(Some(b"another key, sixteen+")).open("c.r.x.=.o.ns/a", &sealed), None, "another key");
        assert_eq!(Seal::default().open("c.r.x.=.o.ns/a", &sealed), None, "sealed, and this bridge holds no key to check it");
        assert_eq!(Seal::default().open("k", &value), Some(&value[..]), "no key: as it is");
        assert_eq!(Seal::default().seal("k", value.clone()), value);
    }
}
