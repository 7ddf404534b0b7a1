//! Token buckets by key (an IP, an account, a rule's key), shared by every
//! worker. A bucket is created full on first use, follows the capacity and
//! rate it is given (so a config reload applies on the next take), and is
//! forgotten by [`KeyedBuckets::sweep`] once it is full again (a full
//! bucket is indistinguishable from a missing one).

use std::borrow::Borrow;
use std::hash::Hash;
use std::time::{Duration, Instant};

use dashmap::DashMap;

use super::TokenBucket;

#[derive(Debug)]
pub struct KeyedBuckets<K: Eq + Hash> {
    map: DashMap<K, TokenBucket, foldhash::fast::RandomState>,
}

impl<K: Eq + Hash> Default for KeyedBuckets<K> {
    fn default() -> Self {
        KeyedBuckets {
            map: DashMap::with_hasher(foldhash::fast::RandomState::default()),
        }
    }
}

impl<K: Eq + Hash + Clone> KeyedBuckets<K> {
    /// Takes `cost` from `key`'s bucket of `capacity`, refilled at `rate`
    /// per second; on refusal, how long until it would succeed.
    pub fn try_take<Q>(
        &self,
        key: &Q,
        cost: f64,
        capacity: f64,
        rate: f64,
        now: Instant,
    ) -> Result<(), Duration>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        if let Some(mut b) = self.map.get_mut(key) {
            if b.capacity() != capacity || b.rate() != rate {
                b.reconfigure(capacity, rate, now);
            }
            return b.try_take(cost, now);
        }
        let mut bucket = TokenBucket::new(capacity, rate, now);
        let result = bucket.try_take(cost, now);
        self.map.entry(key.to_owned()).or_insert(bucket);
        result
    }

    /// Takes `cost` from `key`'s bucket even below zero (a debt for what
    /// was delivered already: a recovery's history, `charge::recovery`).
    pub fn force_take<Q>(&self, key: &Q, cost: f64, capacity: f64, rate: f64, now: Instant)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let mut b = match self.map.get_mut(key) {
            Some(b) => b,
            None => self
                .map
                .entry(key.to_owned())
                .or_insert_with(|| TokenBucket::new(capacity, rate, now)),
        };
        if b.capacity() != capacity || b.rate() != rate {
            b.reconfigure(capacity, rate, now);
        }
        b.force_take(cost, now);
    }

    /// Gives back tokens a later check refused.
    pub fn refund<Q>(&self, key: &Q, cost: f64)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if let Some(mut b) = self.map.get_mut(key) {
            b.refund(cost);
        }
    }

    /// Tokens left in `key`'s bucket (a missing bucket is full).
    pub fn remaining<Q>(&self, key: &Q, capacity: f64, now: Instant) -> f64
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.map
            .get_mut(key)
            .map_or(capacity, |mut b| b.remaining(now))
    }

    /// Forgets every bucket that has refilled completely.
    pub fn sweep(&self, now: Instant) {
        self.map.retain(|_, b| b.remaining(now) < b.capacity());
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_per_key_and_swept_when_full() {
        let t0 = Instant::now();
        let k: KeyedBuckets<String> = KeyedBuckets::default();
        assert!(k.try_take("a", 2.0, 2.0, 1.0, t0).is_ok());
        assert_eq!(
            k.try_take("a", 1.0, 2.0, 1.0, t0),
            Err(Duration::from_secs(1))
        );
        assert!(
            k.try_take("b", 2.0, 2.0, 1.0, t0).is_ok(),
            "another key has its own bucket"
        );
        k.sweep(t0 + Duration::from_secs(1));
        assert_eq!(k.len(), 2, "not full yet");
        k.sweep(t0 + Duration::from_secs(2));
        assert!(k.is_empty());
    }

    #[test]
    fn new_parameters_apply_on_the_next_take() {
        let t0 = Instant::now();
        let k: KeyedBuckets<String> = KeyedBuckets::default();
        k.try_take("a", 10.0, 10.0, 1.0, t0).unwrap();
        assert_eq!(
            k.try_take("a", 1.0, 10.0, 100.0, t0),
            Err(Duration::from_millis(10))
        );
        k.refund("a", 5.0);
        assert_eq!(k.remaining("a", 10.0, t0), 5.0);
    }
}
