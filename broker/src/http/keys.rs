//! API keys for backend services (HTTP publish, the gRPC API). Each key's token bucket (capacity and refill:
//! its account plan's burst and rate, §5) lives behind the bridge, keyed by
//! a fingerprint of the key, so it is shared by every node of a cluster
//! without the key itself leaving this process.

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

/// FNV-1a, 64 bit: stable across builds and nodes, which a bucket name must
/// be; not a security boundary (the key is checked before this is used).
fn fingerprint(key: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
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
                        id: fingerprint(&k.key),
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

    #[test]
    fn fingerprints_are_stable_and_distinct() {
        assert_eq!(
            fingerprint("tidegate-sample-publish-key"),
            fingerprint("tidegate-sample-publish-key")
        );
        assert_ne!(
            fingerprint("key-a-0123456789"),
            fingerprint("key-b-0123456789")
        );
        assert_eq!(fingerprint("").len(), 16);
    }
}
