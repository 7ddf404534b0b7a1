//! Pusher's signatures (its "Library auth reference"): pure functions of
//! the app's secret, checked in constant time.
//!
//! - a private or presence subscription's `auth`:
//!   `key:hex(HMAC-SHA256(secret, "socket_id:channel[:channel_data]"))`;
//! - a sign-in's `auth`: the same over `"socket_id::user::user_data"`;
//! - the HTTP API's `auth_signature` and a webhook's `X-Pusher-Signature`:
//!   hex HMAC-SHA256 of the request's string (`http.rs`) or of the body.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// hex(HMAC-SHA256(secret, text)).
pub fn hmac_hex(secret: &[u8], text: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(text);
    hex(&mac.finalize().into_bytes())
}

/// `bytes` as lowercase hex digits (signatures and digests on Pusher's wire).
pub(super) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 15)] as char);
    }
    out
}

/// Whether `given` equals `expected`, in time that depends only on their
/// lengths (the expected one is public: 64 hex digits).
pub fn equal(given: &[u8], expected: &[u8]) -> bool {
    if given.len() != expected.len() {
        return false;
    }
    given
        .iter()
        .zip(expected)
        .fold(0u8, |acc, (a, b)| acc | (a ^ b))
        == 0
}

/// Whether `auth` (`key:signature`) signs a subscription of `socket_id`
/// to `channel` (with `channel_data` on a presence channel) for the app.
pub fn channel_auth_ok(
    key: &str,
    secret: &[u8],
    socket_id: &str,
    channel: &str,
    channel_data: Option<&str>,
    auth: &str,
) -> bool {
    let mut text = format!("{socket_id}:{channel}");
    if let Some(d) = channel_data {
        text.push(':');
        text.push_str(d);
    }
    signed_by(key, secret, &text, auth)
}

/// Whether `auth` signs a sign-in of `socket_id` with `user_data`.
pub fn user_auth_ok(
    key: &str,
    secret: &[u8],
    socket_id: &str,
    user_data: &str,
    auth: &str,
) -> bool {
    signed_by(
        key,
        secret,
        &format!("{socket_id}::user::{user_data}"),
        auth,
    )
}

fn signed_by(key: &str, secret: &[u8], text: &str, auth: &str) -> bool {
    let Some((given_key, signature)) = auth.split_once(':') else {
        return false;
    };
    given_key == key
        && equal(
            signature.as_bytes(),
            hmac_hex(secret, text.as_bytes()).as_bytes(),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    // The worked examples of Pusher's "Authentication and authorization
    // signatures" page.
    const KEY: &str = "278d425bdf160c739803";
    const SECRET: &[u8] = b"7ad3773142a6692b25b8";

    #[test]
    fn a_private_channel_signature_matches_pushers_example() {
        let auth =
            "278d425bdf160c739803:58df8b0c36d6982b82c3ecf6b4662e34fe8c25bba48f5369f135bf843651c3a4";
        assert!(channel_auth_ok(
            KEY,
            SECRET,
            "1234.1234",
            "private-foobar",
            None,
            auth
        ));
        assert!(!channel_auth_ok(
            KEY,
            SECRET,
            "1234.1235",
            "private-foobar",
            None,
            auth
        ));
        assert!(!channel_auth_ok(
            KEY,
            SECRET,
            "1234.1234",
            "private-foobaz",
            None,
            auth
        ));
        assert!(!channel_auth_ok(
            "other",
            SECRET,
            "1234.1234",
            "private-foobar",
            None,
            auth
        ));
        assert!(!channel_auth_ok(
            KEY,
            SECRET,
            "1234.1234",
            "private-foobar",
            None,
            "nokey"
        ));
    }

    #[test]
    fn a_user_signature_matches_pushers_example() {
        let auth =
            "278d425bdf160c739803:4708d583dada6a56435fb8bc611c77c359a31eebde13337c16ab43aa6de336ba";
        assert!(user_auth_ok(
            KEY,
            SECRET,
            "1234.1234",
            r#"{"id":"12345"}"#,
            auth
        ));
        assert!(!user_auth_ok(
            KEY,
            SECRET,
            "1234.1234",
            r#"{"id":"12346"}"#,
            auth
        ));
    }

    #[test]
    fn equal_needs_every_byte() {
        assert!(equal(b"abc", b"abc"));
        assert!(!equal(b"abc", b"abd"));
        assert!(!equal(b"ab", b"abc"));
    }
}
