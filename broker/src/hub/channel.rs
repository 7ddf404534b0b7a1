//! A channel's state under its lock: the subscribers to fan out over, the
//! `seq` it is at, and the history a reconnecting subscriber recovers from.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use parking_lot::Mutex;

use super::Subscriber;
use crate::config::Conflation;

/// A channel's subscribers: a list to fan out over, and, once there are
/// more than [`INDEXED`], each one's place in it, so joining and leaving
/// cost O(1) instead of a scan of the list under the channel lock (a
/// 10,000-subscriber channel scanned 10,000 entries per leave, and a storm
/// of leaves held the lock for seconds). A channel of a few subscribers
/// (most of them: a socket's own channels) scans its short list instead
/// and keeps no index, and its list is allocated at the size it needs:
/// the index and a list grown for four were a third of what an idle
/// socket's one subscription cost (issue 42).
/// Leaving moves the last subscriber into the gap: fan-out order across
/// subscribers is not part of the contract (each one's own order is).
#[derive(Debug, Default)]
pub(super) struct Subscribers {
    list: Vec<Subscriber>,
    /// Empty, or every subscriber's place in `list`: filled when the list
    /// grows past [`INDEXED`], dropped when it empties. Bounded by the
    /// list.
    index: std::collections::HashMap<u64, usize, foldhash::fast::RandomState>,
}

/// Up to this many subscribers, a channel finds one by a scan of its list.
const INDEXED: usize = 8;

impl Subscribers {
    fn position(&self, conn: u64) -> Option<usize> {
        if self.index.is_empty() {
            self.list.iter().position(|s| s.conn == conn)
        } else {
            self.index.get(&conn).copied()
        }
    }

    /// Adds `sub`, replacing an earlier subscription of the same socket.
    pub(super) fn insert(&mut self, sub: Subscriber) {
        if let Some(i) = self.position(sub.conn) {
            self.list[i] = sub;
            return;
        }
        if self.list.capacity() == 0 {
            self.list.reserve_exact(1);
        }
        if !self.index.is_empty() {
            self.index.insert(sub.conn, self.list.len());
        }
        self.list.push(sub);
        if self.index.is_empty() && self.list.len() > INDEXED {
            self.index = self
                .list
                .iter()
                .enumerate()
                .map(|(i, s)| (s.conn, i))
                .collect();
        }
    }

    pub(super) fn remove(&mut self, conn: u64) {
        let indexed = !self.index.is_empty();
        let at = if indexed {
            self.index.remove(&conn)
        } else {
            self.position(conn)
        };
        let Some(i) = at else {
            return;
        };
        self.list.swap_remove(i);
        if indexed && let Some(moved) = self.list.get(i) {
            self.index.insert(moved.conn, i);
        }
        if self.list.is_empty() {
            *self = Subscribers::default();
        }
    }

    pub(super) fn iter(&self) -> std::slice::Iter<'_, Subscriber> {
        self.list.iter()
    }

    pub(super) fn contains(&self, conn: u64) -> bool {
        self.position(conn).is_some()
    }

    pub(super) fn len(&self) -> usize {
        self.list.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}

#[derive(Debug)]
pub(super) struct Held {
    pub(super) seq: u64,
    pub(super) frame: Bytes,
    pub(super) at: Instant,
}

#[derive(Debug)]
pub(super) struct ChannelState {
    /// Last `seq` assigned or seen; 0 while this node knows none.
    pub(super) seq: u64,
    pub(super) subscribers: Subscribers,
    pub(super) history: VecDeque<Held>,
    /// How a conflating namespace keys its messages; `None`: queue.
    pub(super) conflate: Option<Arc<Conflation>>,
    /// Set when the sweeper removed the channel from the map; a caller
    /// holding a stale `Arc` looks the channel up again.
    pub(super) dead: bool,
}

#[derive(Debug)]
pub(super) struct Channel {
    pub(super) name: Arc<str>,
    pub(super) state: Mutex<ChannelState>,
}

/// Appends the held messages after `since` to `out` and says whether they
/// are all of them. `since` at or past the last seq: nothing was missed.
pub(super) fn recover(st: &mut ChannelState, since: u64, out: &mut Vec<(u64, Bytes)>) -> bool {
    if st.seq == 0 {
        // No state for this channel: nothing to vouch for.
        return false;
    }
    if since == st.seq {
        return true;
    }
    if since > st.seq {
        // The client saw a seq this node never issued: its state is from a
        // history we no longer have.
        return false;
    }
    let complete = st.history.front().is_some_and(|h| h.seq <= since + 1);
    if complete {
        out.extend(
            st.history
                .iter()
                .filter(|h| h.seq > since)
                .map(|h| (h.seq, h.frame.clone())),
        );
    }
    complete
}
