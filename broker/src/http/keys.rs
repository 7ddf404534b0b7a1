//! API keys for HTTP publish, each with its own token bucket (capacity and
//! refill: the account plan's burst and rate, §5).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::config::Config;
use crate::limiter::TokenBucket;
use crate::protocol::glob::GlobSet;

#[derive(Debug)]
pub struct KeyState {
    pub account: String,
    pub publish: GlobSet,
    bucket: Mutex<TokenBucket>,
}

/// A take from a key's bucket, with what the `X-RateLimit-*` headers show.
#[derive(Debug, Clone, Copy)]
pub struct Charge {
    pub allowed: bool,
    pub limit: u64,
    pub remaining: u64,
    pub reset: Duration,
    pub retry_after: Duration,
}

impl KeyState {
    pub fn charge(&self, cost: f64, now: Instant) -> Charge {
        let mut b = self.bucket.lock();
        let result = b.try_take(cost, now);
        Charge {
            allowed: result.is_ok(),
            limit: b.capacity() as u64,
            remaining: b.remaining(now).max(0.0) as u64,
            reset: b.time_to_full(now),
            retry_after: result.err().unwrap_or_default(),
        }
    }
}

#[derive(Debug, Default)]
pub struct ApiKeys(HashMap<String, Arc<KeyState>>);

impl ApiKeys {
    pub fn new(config: &Config) -> ApiKeys {
        ApiKeys::rebuild(config, None)
    }

    /// Keys from a new config; a key that survives a reload keeps its
    /// bucket balance.
    pub fn rebuild(config: &Config, old: Option<&ApiKeys>) -> ApiKeys {
        let now = Instant::now();
        let map = config
            .api_keys
            .iter()
            .map(|k| {
                let limits = config.account_limits(&k.account);
                let mut bucket = old
                    .and_then(|o| o.0.get(&k.key))
                    .map(|s| s.bucket.lock().clone())
                    .unwrap_or_else(|| {
                        TokenBucket::new(
                            f64::from(limits.account_burst),
                            limits.account_messages_per_sec,
                            now,
                        )
                    });
                bucket.reconfigure(
                    f64::from(limits.account_burst),
                    limits.account_messages_per_sec,
                    now,
                );
                let state = KeyState {
                    account: k.account.clone(),
                    publish: GlobSet::new(&k.pub_channels),
                    bucket: Mutex::new(bucket),
                };
                (k.key.clone(), Arc::new(state))
            })
            .collect();
        ApiKeys(map)
    }

    pub fn get(&self, key: &str) -> Option<Arc<KeyState>> {
        self.0.get(key).cloned()
    }
}
