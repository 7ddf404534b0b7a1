//! What the subscription machine (`subscription.rs`) answers a front,
//! and what it hands over: the types a front matches on, apart from the
//! machine that decides them.

use std::sync::Arc;

use bytes::Bytes;

#[cfg(doc)]
use super::Subscription;

/// A live message held while its subscription joins or recovers: its
/// bytes stay counted in the subscriber's gauge (the hub reserved them).
#[derive(Debug)]
pub struct Held {
    pub seq: u64,
    pub frame: Bytes,
    /// The conflation key on a conflating channel (§11).
    pub key: Option<Arc<str>>,
}

/// What a loss does to a subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnLoss {
    /// It goes on: the subscriber's gauge counts the drop episode and the
    /// front reports it once (a `/v1/ws` socket, SSE, a gRPC stream).
    Continue,
    /// It breaks at the first loss: nothing newer goes out, and the front
    /// ends it with how many were lost and the last `seq` it sent (a
    /// GraphQL subscription's `SLOW_CONSUMER`), so a resume with `since`
    /// loses nothing and sees nothing twice.
    Break,
}

/// Where a subscription stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Joining,
    Recovering,
    Live,
    Broken,
    Ended,
}

/// What a broken or ended subscription reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Report {
    /// Messages lost (0: none).
    pub dropped: u64,
    /// The last `seq` the front queued ([`Subscription::queued`]), or
    /// what its client held before anything was queued.
    pub last_seq: u64,
}

/// What to do with a live message the hub handed over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    /// Render and queue it now; then say [`Subscription::queued`], or
    /// [`Subscription::refused`] if the queue would not take it.
    Deliver,
    /// Held behind the join or the backlog; its bytes stay reserved.
    Held,
    /// Not for the client (handed over already, past a break, or ended):
    /// release what was reserved for it.
    Release,
}

/// How a join completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Joining {
    /// Not joining any more (ended, or joined already): nothing changed.
    Ignored,
    /// No backlog: live, once the held messages are pumped.
    Live,
    /// A backlog to pump as room allows.
    Recovering,
}

/// What one [`Subscription::pump`] hands the front.
#[derive(Debug)]
pub enum Next {
    /// A recovered message to render and queue. `paged`: it came from a
    /// page of a cluster's history (its bytes waited in the page since it
    /// was read; in memory mode the hub's history holds them).
    Recovered { seq: u64, frame: Bytes, paged: bool },
    /// A held live message to render and queue (its bytes are reserved).
    Live(Held),
    /// A held frame of the front's own ([`Subscription::hold_own`]) to
    /// queue as it is (its bytes are counted: the front counted them).
    /// Only a front that holds its own frames is handed one.
    Own(Bytes),
    /// A held message not to queue (handed over already, or lost past a
    /// break): release its bytes.
    Release(Held),
    /// No room: the backlog waits (the front's slow-consumer grace runs
    /// while it cannot move).
    Stalled,
    /// The ready history is used up and more is to be read: the front
    /// starts [`Subscription::next_page`] (or one is being read).
    Page,
    /// Nothing more to pump: live, broken or ended.
    Done,
}

/// A page of history arrived ([`Subscription::filled`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Filled {
    /// Messages that left the history before their page was read.
    pub lost: u64,
    /// The page's bytes, now waiting in the subscription.
    pub bytes: usize,
    /// Bytes that no longer wait (a broken subscription gives up the rest
    /// of its backlog): the front releases them where it counted them.
    pub released: usize,
}

/// What an ended subscription held ([`Subscription::end`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Left {
    /// Where it stood.
    pub was: Phase,
    /// Bytes of held live messages (reserved in the gauge by the hub) and
    /// of held frames of the front's own (counted by the front).
    pub held: usize,
    /// Bytes of a page of history waiting.
    pub paged: usize,
}
