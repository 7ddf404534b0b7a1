//! A socket's `bufferedAmount`: the unsent outbound bytes the hub checks
//! before queueing and the socket's outbox releases as bytes leave.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// A socket's unsent outbound bytes, shared between the hub (which reserves
/// before queueing) and the socket's outbox (which releases as the HTTP
/// layer takes bytes for the wire). This is the broker's `bufferedAmount`.
#[derive(Debug)]
pub struct OutboundGauge {
    pending: AtomicUsize,
    high_water: AtomicUsize,
    dropped: AtomicU64,
    congested: AtomicBool,
}

impl OutboundGauge {
    pub fn new(high_water: usize) -> OutboundGauge {
        OutboundGauge {
            pending: AtomicUsize::new(0),
            high_water: AtomicUsize::new(high_water),
            dropped: AtomicU64::new(0),
            congested: AtomicBool::new(false),
        }
    }

    /// Counts `len` bytes for a message about to be queued, unless the
    /// socket is at or over its mark, or in a drop episode the socket has
    /// not reported yet: then counts a drop. The first drop of an episode
    /// returns `Reserve::FirstDrop` so the caller wakes the socket.
    ///
    /// Dropping until the episode is reported (not merely until the socket
    /// is back under its mark) keeps every message queued after a drop
    /// behind the `slow_consumer` frame that reports it, so a client that
    /// recovers with `since` on that frame has delivered nothing past the
    /// hole yet.
    #[inline]
    pub fn try_reserve(&self, len: usize) -> Reserve {
        if self.pending.load(Ordering::Relaxed) >= self.high_water.load(Ordering::Relaxed)
            || self.congested.load(Ordering::Relaxed)
        {
            self.record_drop()
        } else {
            self.pending.fetch_add(len, Ordering::Relaxed);
            Reserve::Queued
        }
    }

    /// Counts one dropped message (the hub's, or a conflating socket's
    /// own when its distinct keys outgrow the mark).
    pub fn record_drop(&self) -> Reserve {
        self.record_drops(1)
    }

    /// Counts `n` dropped messages at once (recovered history that left a
    /// cluster's history before its page was read), as one episode.
    pub fn record_drops(&self, n: u64) -> Reserve {
        self.dropped.fetch_add(n, Ordering::Relaxed);
        if self.congested.swap(true, Ordering::AcqRel) {
            Reserve::Dropped
        } else {
            Reserve::FirstDrop
        }
    }

    /// Counts bytes that are queued regardless of the mark (acks, errors:
    /// answers the client asked for, each priced or bucketed when asked).
    pub fn add(&self, len: usize) {
        self.pending.fetch_add(len, Ordering::Relaxed);
    }

    /// Counts `len` bytes of an answer that must be queued (an ack, an
    /// error, a `budget` reply, a slice of recovered history) and, if they
    /// take the socket over its mark, starts a drop episode without
    /// counting a drop: live messages are then dropped until the socket
    /// drains, and the socket's slow-consumer grace runs. Returns whether
    /// this started the episode (the caller wakes the socket). So a client
    /// that keeps asking and never reads is closed with 4008 like any
    /// reader that stopped.
    pub fn add_answer(&self, len: usize) -> bool {
        let before = self.pending.fetch_add(len, Ordering::Relaxed);
        before + len > self.high_water.load(Ordering::Relaxed)
            && !self.congested.swap(true, Ordering::AcqRel)
    }

    /// Bytes handed to the HTTP layer (or discarded). Returns what is left.
    pub fn release(&self, len: usize) -> usize {
        self.pending.fetch_sub(len, Ordering::Relaxed) - len
    }

    pub fn pending(&self) -> usize {
        self.pending.load(Ordering::Relaxed)
    }

    pub fn high_water(&self) -> usize {
        self.high_water.load(Ordering::Relaxed)
    }

    pub fn set_high_water(&self, bytes: usize) {
        self.high_water.store(bytes, Ordering::Relaxed);
    }

    pub fn is_congested(&self) -> bool {
        self.congested.load(Ordering::Acquire)
    }

    /// Takes the messages dropped so far in this episode, to report them
    /// now, without ending it: live messages go on being dropped (and
    /// counted for the report that ends it) until the socket drains.
    pub fn take_dropped(&self) -> u64 {
        self.dropped.swap(0, Ordering::AcqRel)
    }

    /// Ends a congestion episode; returns the messages dropped in it.
    pub fn clear_congestion(&self) -> u64 {
        self.congested.store(false, Ordering::Release);
        self.dropped.swap(0, Ordering::AcqRel)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reserve {
    Queued,
    Dropped,
    FirstDrop,
}
