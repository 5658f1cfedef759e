//! Lower-case hex of digests (event ids, checkpoint digests, redaction digests).

const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// `prefix` then two lower-case hex digits per byte of `bytes`, in one allocation (a
/// `format!` per byte allocated a string per byte).
pub fn encode(prefix: &str, bytes: &[u8]) -> String {
    let mut out = String::with_capacity(prefix.len() + 2 * bytes.len());
    out.push_str(prefix);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_is_encoded_as_format_02x_did() {
        let bytes: Vec<u8> = (0..=255).collect();
        let formatted: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(encode("", &bytes), formatted);
        assert_eq!(encode("sha256:", &[0x0f, 0xa0]), "sha256:0fa0");
    }

    #[test]
    fn the_string_is_allocated_once_at_its_final_size() {
        let out = encode("hmac-sha256:", &[0xab; 32]);
        assert_eq!(out.capacity(), out.len(), "no reallocation, no spare room");
    }
}
