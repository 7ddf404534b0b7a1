//! API keys for backend services (HTTP publish, the gRPC API). Each key's token bucket (capacity and refill:
//! its account plan's burst and rate, §5) lives behind the bridge, keyed by
//! a fingerprint of the key, so it is shared by every node of a cluster
//! without the key itself leaving this process.
//!
//! The fingerprint is HMAC-SHA256 keyed with the config's fingerprint key
//! (`auth.fingerprint_secret`, else derived from `cluster.secret`): the
//! same on every node of a cluster, neither reversible nor guessable
//! offline by someone who can read Redis but not the config, and
//! independent of the JWT keys, so rotating those keeps every bucket.
//! Changing the fingerprint key renames the buckets (they start full
//! again).

use std::collections::HashMap;
use std::sync::Arc;

use crate::config::Config;
use crate::protocol::glob::GlobSet;

#[derive(Debug)]
pub struct KeyState {
    pub account: String,
    pub publish: GlobSet,
    /// What the key may `Subscribe` to over gRPC (empty: nothing).
    pub subscribe: GlobSet,
    /// Stable fingerprint of the key: its bucket's name.
    pub id: String,
}

/// The first 128 bits of HMAC-SHA256(secret, key), in hex: stable across
/// builds and nodes, which a bucket name must be, and one-way.
fn fingerprint(secret: &[u8], key: &str) -> String {
    use hmac::{KeyInit, Mac};
    let mut mac =
        hmac::Hmac::<sha2::Sha256>::new_from_slice(secret).expect("HMAC takes a key of any length");
    mac.update(key.as_bytes());
    let digest = mac.finalize().into_bytes();
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

#[derive(Debug, Default)]
pub struct ApiKeys(HashMap<String, Arc<KeyState>>);

impl ApiKeys {
    pub fn new(config: &Config) -> ApiKeys {
        ApiKeys(
            config
                .api_keys
                .iter()
                .map(|k| {
                    let state = KeyState {
                        account: k.account.clone(),
                        publish: GlobSet::new(&k.pub_channels),
                        subscribe: GlobSet::new(&k.sub_channels),
                        id: fingerprint(&config.fingerprint_key.0, &k.key),
                    };
                    (k.key.clone(), Arc::new(state))
                })
                .collect(),
        )
    }

    pub fn get(&self, key: &str) -> Option<Arc<KeyState>> {
        self.0.get(key).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::fingerprint;

    const SECRET: &[u8] = b"a-secret-of-sixteen-bytes";

    #[test]
    fn fingerprints_are_stable_distinct_and_keyed() {
        let key = "tidegate-sample-publish-key";
        assert_eq!(fingerprint(SECRET, key), fingerprint(SECRET, key));
        assert_ne!(
            fingerprint(SECRET, "key-a-0123456789"),
            fingerprint(SECRET, "key-b-0123456789")
        );
        assert_ne!(
            fingerprint(SECRET, key),
            fingerprint(b"another-secret-0123", key),
            "without the secret the name cannot be recomputed from a guess"
        );
        let id = fingerprint(SECRET, "");
        assert_eq!(id.len(), 32);
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()));
        // RFC 4231 test case 2 (key "Jefe"), truncated to 128 bits.
        assert_eq!(
            fingerprint(b"Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c7"
        );
    }
}
