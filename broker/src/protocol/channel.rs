//! Channel names: 1–128 bytes of `[A-Za-z0-9_:.@=-]`.

/// Longest channel name, in bytes.
pub const MAX_CHANNEL_LEN: usize = 128;

const fn allowed_table() -> [bool; 256] {
    let mut t = [false; 256];
    let mut c = 0;
    while c < 256 {
        let b = c as u8;
        t[c] = b.is_ascii_alphanumeric()
            || b == b'_'
            || b == b':'
            || b == b'.'
            || b == b'@'
            || b == b'='
            || b == b'-';
        c += 1;
    }
    t
}

static ALLOWED: [bool; 256] = allowed_table();

/// Why a channel name was refused; the text goes into `bad_request`.
pub fn validate(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("channel name is empty");
    }
    if name.len() > MAX_CHANNEL_LEN {
        return Err("channel name is longer than 128 bytes");
    }
    if !name.bytes().all(|b| ALLOWED[b as usize]) {
        return Err("channel name may only contain A-Z a-z 0-9 _ : . @ = -");
    }
    Ok(())
}

/// The start of every hub channel of a Pusher app (§16): `|` is outside
/// the alphabet above, so no Tidegate client can name one, and what is
/// Tidegate's own (§9's webhooks) leaves them out.
pub const PUSHER_PREFIX: &str = "pusher|";

/// Whether a hub channel is a Pusher app's.
pub fn is_pusher(name: &str) -> bool {
    name.starts_with(PUSHER_PREFIX)
}

/// The namespace: the part before the first `:` (the whole name if none).
pub fn namespace(name: &str) -> &str {
    name.split_once(':').map_or(name, |(ns, _)| ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_contract_alphabet() {
        assert!(validate("doc:42").is_ok());
        assert!(validate("a.b@c=d-e_f:G9").is_ok());
        assert!(validate(&"x".repeat(128)).is_ok());
    }

    #[test]
    fn refuses_everything_else() {
        assert!(validate("").is_err());
        assert!(validate(&"x".repeat(129)).is_err());
        for bad in ["doc 42", "doc/42", "doc*", "dóc", "doc\n", "doc\"x"] {
            assert!(validate(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn namespace_is_before_first_colon() {
        assert_eq!(namespace("doc:42:x"), "doc");
        assert_eq!(namespace("lobby"), "lobby");
    }
}
