//! The Standard Webhooks signature (§9): `webhook-signature` is
//! `v1,<base64 of HMAC-SHA256(key, "<id>.<timestamp>.<body>")>`, one
//! space-separated entry per secret during a rotation, so a receiver that
//! still knows only the old secret keeps verifying. The key of a
//! `whsec_<base64>` secret is its decoded bytes, as the Standard Webhooks
//! libraries take it (`config::webhook_key`); a test in the SDK's tree has
//! the `standardwebhooks` npm package verify a real delivery.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// `X-Pusher-Signature` (§16): the hex HMAC-SHA256 of the body under the
/// app's secret, as Pusher's server libraries verify it.
pub fn pusher_signature(secret: &[u8], body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC accepts any key length");
    mac.update(body);
    mac.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The `webhook-signature` value for one attempt.
pub fn signature(secrets: &[Vec<u8>], id: &str, timestamp: u64, body: &[u8]) -> String {
    let ts = timestamp.to_string();
    let mut out = String::new();
    for secret in secrets {
        // HMAC takes keys of any length; this cannot fail.
        let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC accepts any key length");
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(ts.as_bytes());
        mac.update(b".");
        mac.update(body);
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str("v1,");
        out.push_str(&STANDARD.encode(mac.finalize().into_bytes()));
    }
    out
}

/// Whether `header` carries a valid `v1` signature of this request under
/// `secret`: what a receiver does (used by the tests and the docs' example).
pub fn verify(secret: &[u8], header: &str, id: &str, timestamp: u64, body: &[u8]) -> bool {
    let expected = signature(&[secret.to_vec()], id, timestamp, body);
    header.split(' ').any(|entry| entry == expected)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_standard_webhooks_example() {
        // The example of the Standard Webhooks specification: secret
        // "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" (base64 after the prefix).
        let secret = STANDARD.decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let sig = signature(
            &[secret],
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn a_whsec_secret_signs_with_its_decoded_bytes() {
        // The example above's secret as its specification writes it.
        let key = crate::config::webhook_key("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        assert_eq!(
            key,
            STANDARD.decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap()
        );
        // Any other text is its own bytes (the libraries' "raw" format).
        assert_eq!(
            crate::config::webhook_key("a-raw-secret-of-24-bytes!").unwrap(),
            b"a-raw-secret-of-24-bytes!"
        );
        assert!(crate::config::webhook_key("whsec_not*base64").is_err());
    }

    #[test]
    fn one_entry_per_secret_and_each_verifies() {
        let new = b"new-secret-at-least-24-bytes".to_vec();
        let old = b"old-secret-at-least-24-bytes".to_vec();
        let sig = signature(&[new.clone(), old.clone()], "evt_1", 7, b"{}");
        assert_eq!(sig.split(' ').count(), 2);
        assert!(verify(&new, &sig, "evt_1", 7, b"{}"));
        assert!(verify(&old, &sig, "evt_1", 7, b"{}"));
        assert!(!verify(&old, &sig, "evt_1", 8, b"{}"));
        assert!(!verify(
            b"another-secret-of-24-bytes!",
            &sig,
            "evt_1",
            7,
            b"{}"
        ));
    }
}
