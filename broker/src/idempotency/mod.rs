//! Idempotency keys (§17): the node's table of the keys it has published
//! (or is publishing) within the window, so a retry is answered with the
//! first `seq` instead of publishing again.
//!
//! The table is keyed by (publisher, channel, key) ([`Scope`]); an
//! entry is in flight (its publisher is publishing; duplicates wait for
//! its answer) or done (`seq`, and when it went out). The window runs from
//! the publish that went out: duplicates do not extend it. A claim whose
//! publish never happened (its future was dropped) removes its entry, so
//! a retry may publish; fronts charge before they claim, so a refused
//! publish never claims at all.
//!
//! In cluster mode this table is only the node's fast path: the key is
//! recorded in the same Redis script that assigns the `seq` (the bridge),
//! so two nodes never both publish one key; the table coalesces a node's
//! concurrent duplicates and answers the ones it knows without a round
//! trip.
//!
//! Bounded: at most `idempotency_max_keys` published entries (oldest first
//! out, an eviction before the window passed counted) plus the keys in
//! flight (each a publish paid for and in progress), each expiring
//! `idempotency_window_ms` after its publish; the age queue holds one item
//! per entry plus the tombstones of dropped claims, compacted past twice
//! the cap.

mod key;

use std::collections::hash_map::Entry as MapEntry;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use siphasher::sip128::{Hasher128, SipHasher13};
use tokio::sync::watch;

pub use key::{KeyError, Keyed, MAX_KEY_BYTES, Scope, unquoted, validate};

use crate::metrics::idempotency::IdempotencyMetrics;

/// A publish's outcome: its `seq`, and whether an earlier publish with the
/// same key had it (so this one was not published).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Published {
    pub seq: u64,
    pub duplicate: bool,
}

impl Published {
    pub fn first(seq: u64) -> Published {
        Published {
            seq,
            duplicate: false,
        }
    }
}

/// What [`Idempotency::claim`] found.
#[derive(Debug)]
pub enum Claim {
    /// Nobody holds the key: publish, then [`First::done`].
    First(First),
    /// Published in the window, with this `seq`.
    Known(u64),
    /// Being published now: its answer is coming.
    Wait(Waiter),
}

/// What a look without claiming found (to price a duplicate before it is
/// charged).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    New,
    /// Published in the window, or being published.
    Held,
}

enum State {
    /// Being published. The sender exists once a duplicate waits (made on
    /// demand: a publish nobody repeats allocates no channel).
    InFlight(Option<watch::Sender<Option<u64>>>),
    Done {
        seq: u64,
        at: Instant,
    },
}

struct Entry {
    /// Tells this entry from a later one under the same scope (the age
    /// queue's items and a claim's own entry).
    id: u64,
    state: State,
}

/// A scope's name in the table: a 128-bit keyed hash of its parts
/// ([`Scope`]), not a string. SipHash-1-3 with a 128-bit output, under a
/// key drawn at start, is a keyed pseudo-random function: a client that
/// chooses keys cannot aim one at another scope's name without the
/// node's key, and two of the table's at most `idempotency_max_keys`
/// names meet by chance with odds of about n²/2¹²⁹ (10⁻²⁹ at the default
/// 100,000). In exchange the table holds no string per key and evicting
/// the oldest key touches no cold string: the key cost the publish path
/// 1.3 µs of a 3.4 µs socket publish when the map was keyed by the
/// scope's string. One pass of the 128-bit variant, not two of std's
/// 64-bit `RandomState` (bench/README.md, idempotency).
type Digest = u128;

/// The map's hasher: a digest is already a uniform keyed hash, so its
/// low 64 bits are the bucket hash.
#[derive(Default)]
struct Low64(u64);

impl Hasher for Low64 {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only digests are hashed here; any other input still hashes.
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }

    fn write_u128(&mut self, v: u128) {
        self.0 = v as u64;
    }
}

#[derive(Default)]
struct Table {
    /// Bounded by `max_keys` plus the keys in flight (see
    /// [`Idempotency::claim`]).
    map: HashMap<Digest, Entry, BuildHasherDefault<Low64>>,
    /// Entries oldest first, with their id; items whose entry is gone or
    /// replaced are tombstones, compacted past twice `max_keys`.
    order: VecDeque<(Digest, u64)>,
    next_id: u64,
}

/// The node's idempotency table.
pub struct Idempotency {
    table: Mutex<Table>,
    /// The SipHash key of a [`Digest`], drawn at start.
    digest: (u64, u64),
    /// Tells this table's digests from another's in the thread's memo
    /// ([`MEMO`]).
    serial: u64,
    window_ms: AtomicU64,
    max_keys: AtomicU64,
    metrics: Arc<IdempotencyMetrics>,
}

impl std::fmt::Debug for Idempotency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Idempotency { .. }")
    }
}

impl Idempotency {
    pub fn new(window_ms: u64, max_keys: u64, metrics: Arc<IdempotencyMetrics>) -> Arc<Self> {
        Arc::new(Idempotency {
            table: Mutex::default(),
            digest: (rand::random(), rand::random()),
            serial: SERIALS.fetch_add(1, Ordering::Relaxed),
            window_ms: AtomicU64::new(window_ms),
            max_keys: AtomicU64::new(max_keys),
            metrics,
        })
    }

    /// A reloaded `[publish]`: a new window applies to the keys held too
    /// (from their publish); a smaller cap evicts on the next claim.
    pub fn reconfigure(&self, window_ms: u64, max_keys: u64) {
        self.window_ms.store(window_ms, Ordering::Relaxed);
        self.max_keys.store(max_keys, Ordering::Relaxed);
    }

    /// The window, as the Redis key's time to live.
    pub fn window_ms(&self) -> u64 {
        self.window_ms.load(Ordering::Relaxed)
    }

    fn window(&self) -> Duration {
        Duration::from_millis(self.window_ms())
    }

    /// The name of `scope`. A publish asks twice (priced, then claimed),
    /// on one thread: the second time is answered from the thread's memo
    /// of the last scope, compared in place, so the hash runs once a
    /// publish.
    fn digest(&self, scope: Scope<'_>) -> Digest {
        MEMO.with(|memo| {
            let Ok(mut memo) = memo.try_borrow_mut() else {
                let mut bytes = Vec::new();
                scope.write(&mut bytes);
                return self.digest_of(&bytes);
            };
            let Memo {
                serial,
                bytes,
                name,
            } = &mut *memo;
            if *serial == self.serial && scope.wrote(bytes) {
                return *name;
            }
            scope.write(bytes);
            *serial = self.serial;
            *name = self.digest_of(bytes);
            *name
        })
    }

    fn digest_of(&self, bytes: &[u8]) -> Digest {
        let mut h = SipHasher13::new_with_keys(self.digest.0, self.digest.1);
        h.write(bytes);
        h.finish128().as_u128()
    }

    /// Whether `scope` is held (published in the window or in flight),
    /// without claiming it.
    pub fn seen(&self, scope: Scope<'_>, now: Instant) -> Seen {
        let window = self.window();
        let name = self.digest(scope);
        let t = self.table.lock();
        match t.map.get(&name).map(|e| &e.state) {
            Some(State::InFlight(_)) => Seen::Held,
            Some(State::Done { at, .. }) if now < *at + window => Seen::Held,
            _ => Seen::New,
        }
    }

    /// Claims `scope` for a publish, or says who has it. One lookup for
    /// the key, then the oldest keys past the cap go.
    pub fn claim(self: &Arc<Self>, scope: Scope<'_>, now: Instant) -> Claim {
        let window = self.window();
        let max = usize::try_from(self.max_keys.load(Ordering::Relaxed)).unwrap_or(usize::MAX);
        let name = self.digest(scope);
        let mut t = self.table.lock();
        let id = t.next_id;
        let fresh = Entry {
            id,
            state: State::InFlight(None),
        };
        match t.map.entry(name) {
            MapEntry::Occupied(mut o) => match &mut o.get_mut().state {
                State::InFlight(tx) => {
                    let tx = tx.get_or_insert_with(|| watch::channel(None).0);
                    return Claim::Wait(Waiter { rx: tx.subscribe() });
                }
                State::Done { seq, at } if now < *at + window => return Claim::Known(*seq),
                // Its window passed: claimed anew (its queue item is now a
                // tombstone).
                State::Done { .. } => {
                    o.insert(fresh);
                }
            },
            MapEntry::Vacant(v) => {
                v.insert(fresh);
            }
        }
        t.next_id += 1;
        t.order.push_back((name, id));
        if t.map.len() > max.max(1) {
            self.evict(&mut t, max.max(1).saturating_sub(batch(max)), now, window);
        }
        if t.order.len() > max.saturating_mul(2).max(64) {
            let Table { map, order, .. } = &mut *t;
            order.retain(|(n, id)| map.get(n).is_some_and(|e| e.id == *id));
        }
        self.metrics.keys.set(t.map.len() as i64);
        Claim::First(First {
            table: self.clone(),
            name: Some(name),
            id,
        })
    }

    /// Brings the keys held down to `max`: the oldest published keys go
    /// first (counted when their window had not passed yet). A key in
    /// flight is never evicted (its duplicates wait on it); it goes to the
    /// back of the queue, so the keys held can pass `max` by the publishes
    /// in flight at most, each one paid for and in progress. Keys whose
    /// window passed under the cap go with the node's sweep.
    fn evict(&self, t: &mut Table, max: usize, now: Instant, window: Duration) {
        let Table { map, order, .. } = t;
        let mut turns = order.len();
        while map.len() > max && turns > 0 {
            turns -= 1;
            let Some((name, id)) = order.pop_front() else {
                break;
            };
            if let MapEntry::Occupied(o) = map.entry(name)
                && o.get().id == id
            {
                match o.get().state {
                    State::InFlight(_) => order.push_back((*o.key(), id)),
                    State::Done { at, .. } => {
                        if now < at + window {
                            self.metrics.evictions.inc();
                        }
                        o.remove();
                    }
                }
            }
        }
    }

    /// Drops the entries whose window has passed, oldest first (an entry
    /// still in flight stops the walk: it is young).
    fn expire(&self, t: &mut Table, now: Instant, window: Duration) {
        while let Some((name, id)) = t.order.front() {
            let gone = match t.map.get(name) {
                Some(e) if e.id == *id => match e.state {
                    State::Done { at, .. } => now >= at + window,
                    State::InFlight(_) => false,
                },
                _ => true,
            };
            if !gone {
                break;
            }
            if let Some((name, id)) = t.order.pop_front()
                && t.map.get(&name).is_some_and(|e| e.id == id)
            {
                t.map.remove(&name);
            }
        }
    }

    /// Forgets the keys whose window has passed (the node's sweep).
    pub fn sweep(&self, now: Instant) {
        let window = self.window();
        let mut t = self.table.lock();
        self.expire(&mut t, now, window);
        self.metrics.keys.set(t.map.len() as i64);
    }

    /// Keys held now.
    pub fn len(&self) -> usize {
        self.table.lock().map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Ends claim `id` of `name`: done with `seq` at `at`, or given up
    /// (`None`: the entry goes). The waiters' sender, to answer them once
    /// the lock is released.
    fn settle(
        &self,
        name: Digest,
        id: u64,
        done: Option<(u64, Instant)>,
    ) -> Option<watch::Sender<Option<u64>>> {
        let mut t = self.table.lock();
        let e = t.map.get_mut(&name).filter(|e| e.id == id)?;
        let old = match done {
            Some((seq, at)) => std::mem::replace(&mut e.state, State::Done { seq, at }),
            None => t.map.remove(&name).map(|e| e.state)?,
        };
        self.metrics.keys.set(t.map.len() as i64);
        match old {
            State::InFlight(tx) => tx,
            State::Done { .. } => None,
        }
    }
}

/// How far below the cap a claim that passes it evicts (1/64 of the cap,
/// at most 64): the held keys stay at or under the cap, and the oldest
/// keys, whose memory is cold, are removed in one pass every `batch`
/// claims instead of one at every claim, so their cache misses overlap.
fn batch(max: usize) -> usize {
    (max / 64).min(64)
}

/// Numbers the tables of a process (see [`Idempotency::digest`]).
static SERIALS: AtomicU64 = AtomicU64::new(1);

/// The last scope a thread named ([`Idempotency::digest`]): the table
/// it was named for, its bytes ([`Scope::write`]) and its name.
struct Memo {
    serial: u64,
    bytes: Vec<u8>,
    name: Digest,
}

thread_local! {
    /// One scope's bytes, bounded by the longest scope (a channel, an
    /// account and a key, each bounded by the contract).
    static MEMO: std::cell::RefCell<Memo> = const {
        std::cell::RefCell::new(Memo {
            serial: 0,
            bytes: Vec::new(),
            name: 0,
        })
    };
}

/// A claimed key: the claimer publishes, then says the `seq`. Dropped
/// without [`First::done`] (the publish never happened), the key is
/// released and whoever waited claims it again.
pub struct First {
    table: Arc<Idempotency>,
    name: Option<Digest>,
    id: u64,
}

impl std::fmt::Debug for First {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("First").field("id", &self.id).finish()
    }
}

impl First {
    /// The key's publish got `seq`; `at` is when it went out (now, or
    /// earlier for a duplicate another node published).
    pub fn done(mut self, seq: u64, at: Instant) {
        if let Some(name) = self.name.take()
            && let Some(tx) = self.table.settle(name, self.id, Some((seq, at)))
        {
            tx.send_replace(Some(seq));
        }
    }
}

impl Drop for First {
    fn drop(&mut self) {
        if let Some(name) = self.name.take() {
            // The sender drops with the entry: waiters learn it was given up.
            drop(self.table.settle(name, self.id, None));
        }
    }
}

/// A duplicate waiting for the first publish's answer.
#[derive(Debug)]
pub struct Waiter {
    rx: watch::Receiver<Option<u64>>,
}

impl Waiter {
    /// The first one's `seq`; `None`: it was given up (claim again).
    pub async fn wait(mut self) -> Option<u64> {
        match self.rx.wait_for(Option::is_some).await {
            Ok(v) => *v,
            Err(_) => None,
        }
    }
}

#[cfg(test)]
mod tests;
