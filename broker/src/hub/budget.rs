//! The node-wide history byte budget (`history.max_bytes`): every channel's
//! history counts toward one total, and past it the oldest messages go
//! first, whichever channel holds them.
//!
//! Without it the per-channel bounds (`history.size` messages for
//! `history.ttl_ms`) multiply by the number of channels: one account with a
//! wildcard grant could park gigabytes by publishing 64 KiB messages to
//! fresh channel names.
//!
//! The order in which messages were recorded, across channels, is one
//! queue of (channel, `seq`). A message trimmed from its channel by size,
//! age or the sweeper leaves a stale entry behind; eviction skips those,
//! and the queue is compacted once stale entries outnumber live ones, so
//! it holds at most about twice the node's held messages.
//!
//! Lock order: a channel's lock, then the queue's. Eviction takes an entry
//! out under the queue's lock and only then locks its channel, so the two
//! are never held the other way round.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use dashmap::DashMap;
use parking_lot::Mutex;

use super::HistoryLimits;
use super::channel::{Channel, Held};

/// Compaction waits for at least this many stale entries.
const COMPACT_MIN: usize = 1024;

#[derive(Debug, Default)]
pub(super) struct Budget {
    /// Bytes of every held message on this node.
    bytes: AtomicUsize,
    /// Held messages on this node.
    pub(super) held: AtomicUsize,
    /// Every held message in the order it was recorded (bounded as the
    /// module says: about twice `held`).
    pub(super) order: Mutex<VecDeque<(Arc<str>, u64)>>,
}

impl Budget {
    /// A message was added to `channel`'s history (under its lock).
    pub(super) fn recorded(&self, channel: &Arc<str>, seq: u64, len: usize) {
        self.bytes.fetch_add(len, Ordering::Relaxed);
        self.held.fetch_add(1, Ordering::Relaxed);
        self.order.lock().push_back((channel.clone(), seq));
    }

    /// A message left a channel's history.
    pub(super) fn removed(&self, h: &Held) {
        self.bytes.fetch_sub(h.frame.len(), Ordering::Relaxed);
        self.held.fetch_sub(1, Ordering::Relaxed);
    }

    /// Drops what is past a channel's size or age from its `history`
    /// (under the channel's lock), counting it out of the budget.
    pub(super) fn trim(&self, history: &mut VecDeque<Held>, limits: HistoryLimits, now: Instant) {
        while history.len() > limits.size
            || history
                .front()
                .is_some_and(|h| now.saturating_duration_since(h.at) > limits.ttl)
        {
            if let Some(h) = history.pop_front() {
                self.removed(&h);
            }
        }
    }

    pub(super) fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Evicts the oldest held messages, across channels, until the total is
    /// at most `max` bytes; then compacts the order if it is mostly stale.
    /// Called with no channel lock held.
    pub(super) fn enforce(&self, max: usize, channels: &DashMap<Arc<str>, Arc<Channel>>) {
        while self.bytes() > max {
            let Some((name, seq)) = self.order.lock().pop_front() else {
                break;
            };
            let Some(ch) = channels.get(&name).map(|c| c.clone()) else {
                continue;
            };
            let mut st = ch.state.lock();
            while st.history.front().is_some_and(|h| h.seq <= seq) {
                if let Some(h) = st.history.pop_front() {
                    self.removed(&h);
                }
            }
        }
        let held = self.held.load(Ordering::Relaxed);
        if self.order.lock().len() > 2 * held + COMPACT_MIN {
            self.compact(channels);
        }
    }

    /// Drops the entries whose message is gone. The entries are taken out
    /// and checked channel by channel without the queue's lock; entries
    /// recorded meanwhile stay behind the kept ones, in order.
    fn compact(&self, channels: &DashMap<Arc<str>, Arc<Channel>>) {
        let old = std::mem::take(&mut *self.order.lock());
        let kept: VecDeque<(Arc<str>, u64)> = old
            .into_iter()
            .filter(|(name, seq)| {
                let Some(ch) = channels.get(name).map(|c| c.clone()) else {
                    return false;
                };
                let st = ch.state.lock();
                !st.dead && st.history.front().is_some_and(|h| h.seq <= *seq)
            })
            .collect();
        let mut order = self.order.lock();
        let newer = std::mem::replace(&mut *order, kept);
        order.extend(newer);
    }
}
