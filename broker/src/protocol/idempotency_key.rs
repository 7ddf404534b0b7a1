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

/// Checks a key: 1–64 bytes of `[A-Za-z0-9_.:-]`.
pub fn validate(key: &str) -> Result<(), KeyError> {
    if key.is_empty() {
        return Err(KeyError::Empty);
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(KeyError::TooLong(key.len()));
    }
    match key
        .bytes()
        .position(|b| !(b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-')))
    {
        Some(at) => Err(KeyError::BadByte(at)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
