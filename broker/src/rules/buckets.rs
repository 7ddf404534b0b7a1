//! The buckets rules count in. A shared rule (account, channel, pair) has
//! one bucket per key on the node, in [`RuleBuckets`]; each socket keeps
//! handles to the few shared buckets it used last, in [`ConnRules`], so an
//! admitted frame reaches its bucket without building a key, hashing it or
//! locking a map shard. Connection rules' buckets live in the socket.
//!
//! A handle must never outlive its bucket's place in the map, or its socket
//! would count alone in an orphan: the sweep retires a bucket (under the
//! bucket's own lock) as it removes it, and a socket that finds its handle
//! retired fetches the key's current bucket from the map again.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dashmap::DashMap;
use parking_lot::Mutex;

use crate::config::{Rule, TrackBy};
use crate::limiter::TokenBucket;

/// Shared-bucket handles a socket keeps: enough for the rules of a plan on
/// the channels a socket is busy on, small enough to scan on every frame
/// and to bound a socket that touches many channels.
pub(super) const CACHED: usize = 8;

/// A rule's token bucket, following the rule's capacity and window: a
/// config reload applies on the next take. The parameters it was built
/// for are kept so that the rate is divided out only when they change.
#[derive(Debug)]
struct Tokens {
    bucket: TokenBucket,
    capacity: u32,
    window_ms: u64,
}

impl Tokens {
    fn new(rule: &Rule, now: Instant) -> Tokens {
        Tokens {
            bucket: TokenBucket::new(f64::from(rule.capacity), rule.refill_per_sec(), now),
            capacity: rule.capacity,
            window_ms: rule.window_ms,
        }
    }

    #[inline]
    fn take(&mut self, rule: &Rule, now: Instant) -> Result<(), Duration> {
        if self.capacity != rule.capacity || self.window_ms != rule.window_ms {
            let capacity = f64::from(rule.capacity);
            self.bucket
                .reconfigure(capacity, rule.refill_per_sec(), now);
            self.capacity = rule.capacity;
            self.window_ms = rule.window_ms;
        }
        self.bucket.try_take(1.0, now)
    }
}

/// One shared bucket; `retired` once the sweep has removed it from the map.
#[derive(Debug)]
struct Shared {
    tokens: Tokens,
    retired: bool,
}

type RuleBucket = Arc<Mutex<Shared>>;

/// Node-wide rule buckets, by key. Sockets come here only for a bucket
/// they hold no live handle to.
#[derive(Debug)]
pub struct RuleBuckets {
    map: DashMap<String, RuleBucket, foldhash::fast::RandomState>,
}

impl Default for RuleBuckets {
    fn default() -> Self {
        RuleBuckets {
            map: DashMap::with_hasher(foldhash::fast::RandomState::default()),
        }
    }
}

impl RuleBuckets {
    /// Forgets every bucket that has refilled completely (a full bucket is
    /// indistinguishable from a missing one), retiring it so that sockets
    /// holding a handle to it fetch the key's bucket anew.
    pub fn sweep(&self, now: Instant) {
        self.map.retain(|_, b| {
            let mut b = b.lock();
            let keep = b.tokens.bucket.remaining(now) < b.tokens.bucket.capacity();
            b.retired = !keep;
            keep
        });
    }

    /// `key`'s bucket, created full for `rule` if there is none.
    fn get_or_create(&self, key: &str, rule: &Rule, now: Instant) -> RuleBucket {
        if let Some(b) = self.map.get(key) {
            return b.clone();
        }
        let b = self.map.entry(key.to_owned()).or_insert_with(|| {
            Arc::new(Mutex::new(Shared {
                tokens: Tokens::new(rule, now),
                retired: false,
            }))
        });
        b.clone()
    }

    fn get(&self, key: &str) -> Option<RuleBucket> {
        self.map.get(key).map(|b| b.clone())
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Tokens left in `key`'s bucket (a missing bucket is full).
    #[cfg(test)]
    pub(super) fn remaining(&self, key: &str, capacity: f64, now: Instant) -> f64 {
        self.get(key)
            .map_or(capacity, |b| b.lock().tokens.bucket.remaining(now))
    }
}

/// A socket's handle to a shared bucket. The parts of the key it was
/// fetched for are kept apart, to be compared on every frame; the key is
/// for fetching the bucket again after a sweep.
#[derive(Debug)]
struct Handle {
    track_by: TrackBy,
    rule: Box<str>,
    account: Box<str>,
    channel: Box<str>,
    key: Box<str>,
    bucket: RuleBucket,
}

impl Handle {
    /// Whether this handle is for the bucket [`key`] names.
    #[inline]
    fn is_for(&self, rule: &Rule, account: &str, channel: &str) -> bool {
        let account = || same(self.account.as_bytes(), account.as_bytes());
        let channel = || same(self.channel.as_bytes(), channel.as_bytes());
        self.track_by == rule.track_by
            && match rule.track_by {
                TrackBy::Account => account(),
                TrackBy::Channel => channel(),
                TrackBy::AccountChannel | TrackBy::Connection => account() && channel(),
            }
            && same(self.rule.as_bytes(), rule.id.as_bytes())
    }
}

/// A connection rule's bucket, by rule id.
#[derive(Debug)]
struct Own {
    id: Box<str>,
    tokens: Tokens,
}

/// A socket's rule state: its own buckets (`track_by = "connection"`) and
/// its handles to the shared buckets it used last.
#[derive(Debug, Default)]
pub struct ConnRules {
    handles: Vec<Handle>,
    /// The handle replaced next once `CACHED` are held (the oldest).
    oldest: usize,
    own: Vec<Own>,
    /// The buffer keys are built in on a handle miss.
    key: String,
}

/// Writes `rule`'s shared-bucket key for this operation into `buf`.
pub(super) fn key(buf: &mut String, rule: &Rule, account: &str, channel: &str) {
    buf.clear();
    buf.push_str(&rule.id);
    buf.push('\u{0}');
    match rule.track_by {
        TrackBy::Account => buf.push_str(account),
        TrackBy::Channel => {
            buf.push('\u{0}');
            buf.push_str(channel);
        }
        TrackBy::AccountChannel | TrackBy::Connection => {
            buf.push_str(account);
            buf.push('\u{0}');
            buf.push_str(channel);
        }
    }
}

/// `a == b` for the short strings keys are made of, compared in place: a
/// call to `memcmp` costs more than the comparison.
#[inline]
pub(super) fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let (mut x, mut y) = (a.chunks_exact(8), b.chunks_exact(8));
    let words = (&mut x).zip(&mut y).all(|(p, q)| {
        u64::from_ne_bytes(p.try_into().unwrap()) == u64::from_ne_bytes(q.try_into().unwrap())
    });
    words && x.remainder().iter().zip(y.remainder()).all(|(p, q)| p == q)
}

impl ConnRules {
    /// Takes one token from `rule`'s bucket for this operation.
    #[inline]
    pub(super) fn take(
        &mut self,
        rule: &Rule,
        account: &str,
        channel: &str,
        shared: &RuleBuckets,
        now: Instant,
    ) -> Result<(), Duration> {
        if rule.track_by == TrackBy::Connection {
            return self.take_own(rule, now);
        }
        let i = match self.find(rule, account, channel) {
            Some(i) => i,
            None => self.fetch(rule, account, channel, shared, now),
        };
        loop {
            let h = &mut self.handles[i];
            {
                let mut b = h.bucket.lock();
                if !b.retired {
                    return b.tokens.take(rule, now);
                }
            }
            // Swept since: the key's bucket is a new one (or none yet).
            h.bucket = shared.get_or_create(&h.key, rule, now);
        }
    }

    /// Gives back the token [`ConnRules::take`] took for `rule`, to the
    /// key's current bucket (none if it was swept meanwhile).
    pub(super) fn refund(
        &mut self,
        rule: &Rule,
        account: &str,
        channel: &str,
        shared: &RuleBuckets,
    ) {
        if rule.track_by == TrackBy::Connection {
            if let Some(o) = self
                .own
                .iter_mut()
                .find(|o| same(o.id.as_bytes(), rule.id.as_bytes()))
            {
                o.tokens.bucket.refund(1.0);
            }
            return;
        }
        if let Some(i) = self.find(rule, account, channel) {
            let mut b = self.handles[i].bucket.lock();
            if !b.retired {
                b.tokens.bucket.refund(1.0);
                return;
            }
        }
        key(&mut self.key, rule, account, channel);
        if let Some(b) = shared.get(&self.key) {
            let mut b = b.lock();
            if !b.retired {
                b.tokens.bucket.refund(1.0);
            }
        }
    }

    fn take_own(&mut self, rule: &Rule, now: Instant) -> Result<(), Duration> {
        if let Some(o) = self
            .own
            .iter_mut()
            .find(|o| same(o.id.as_bytes(), rule.id.as_bytes()))
        {
            return o.tokens.take(rule, now);
        }
        let mut tokens = Tokens::new(rule, now);
        let result = tokens.take(rule, now);
        self.own.push(Own {
            id: rule.id.as_str().into(),
            tokens,
        });
        result
    }

    #[inline]
    fn find(&self, rule: &Rule, account: &str, channel: &str) -> Option<usize> {
        self.handles
            .iter()
            .position(|h| h.is_for(rule, account, channel))
    }

    /// Fetches (or creates) the key's bucket from the map and keeps a
    /// handle to it, in place of the oldest once `CACHED` are held.
    #[cold]
    fn fetch(
        &mut self,
        rule: &Rule,
        account: &str,
        channel: &str,
        shared: &RuleBuckets,
        now: Instant,
    ) -> usize {
        key(&mut self.key, rule, account, channel);
        let handle = Handle {
            track_by: rule.track_by,
            rule: rule.id.as_str().into(),
            account: account.into(),
            channel: channel.into(),
            bucket: shared.get_or_create(&self.key, rule, now),
            key: self.key.as_str().into(),
        };
        if self.handles.len() < CACHED {
            self.handles.push(handle);
            return self.handles.len() - 1;
        }
        let i = self.oldest;
        self.handles[i] = handle;
        self.oldest = (i + 1) % CACHED;
        i
    }

    /// Shared-bucket handles held.
    #[cfg(test)]
    pub(super) fn handles(&self) -> usize {
        self.handles.len()
    }
}
