//! An idempotency key as the wire carries it (§17): the one check every
//! front (socket, HTTP, gRPC, GraphQL) applies.

/// The longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 64;

/// Why a key was refused (`bad_request`, with this sentence).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("idempotency key must not be empty")]
    Empty,
    #[error("idempotency key is {0} bytes long; it must be at most 64")]
    TooLong(usize),
    #[error(
        "idempotency key may hold only A-Z, a-z, 0-9, '_', '.', ':' and '-' (byte {0} is not one)"
    )]
    BadByte(usize),
}

/// The bytes a key may hold, as a table: one load a byte (every keyed
/// publish checks its key).
const ALLOWED: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b':' | b'-');
        b += 1;
    }
    t
};

/// Checks a key: 1–64 bytes of `[A-Za-z0-9_.:-]`.
pub fn validate(key: &str) -> Result<(), KeyError> {
    if key.is_empty() {
        return Err(KeyError::Empty);
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(KeyError::TooLong(key.len()));
    }
    match key.bytes().position(|b| !ALLOWED[usize::from(b)]) {
        Some(at) => Err(KeyError::BadByte(at)),
        None => Ok(()),
    }
}

/// A key given as a JSON string (`raw`: the value's JSON text), when it
/// is one as written: a key's bytes never need an escape, so a valid key
/// is the text between the quotes, read in place. `None` for anything
/// else (escapes, not a string, a bad key): the caller's JSON decoder
/// then reads it and [`validate`] says what is wrong. Spares a keyed
/// frame a second JSON parse of its key.
pub fn unquoted(raw: &str) -> Option<&str> {
    let inner = raw.strip_prefix('"')?.strip_suffix('"')?;
    validate(inner).ok().map(|()| inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_as_written_is_read_in_place_and_anything_else_is_left_to_json() {
        assert_eq!(unquoted(r#""k-1.a:b_C""#), Some("k-1.a:b_C"));
        // An escape may spell a valid key: decoded by the caller, not here.
        assert_eq!(unquoted(r#""\u0041""#), None);
        for raw in [r#""""#, "\"", "17", "null", r#"["k"]"#, r#""a b""#] {
            assert_eq!(unquoted(raw), None, "{raw}");
        }
        assert_eq!(unquoted(&format!("\"{}\"", "a".repeat(65))), None);
    }

    #[test]
    fn keys_follow_the_contract() {
        assert_eq!(validate("k1"), Ok(()));
        assert_eq!(validate("A-z_0.9:x"), Ok(()));
        assert_eq!(validate(&"a".repeat(64)), Ok(()));
        assert_eq!(validate(""), Err(KeyError::Empty));
        assert_eq!(validate(&"a".repeat(65)), Err(KeyError::TooLong(65)));
        assert_eq!(validate("a b"), Err(KeyError::BadByte(1)));
        assert_eq!(validate("é"), Err(KeyError::BadByte(0)));
        assert_eq!(validate("a/b"), Err(KeyError::BadByte(1)));
    }
}
