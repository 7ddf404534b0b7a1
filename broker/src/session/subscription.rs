//! One subscription's state machine, the same on every front:
//! Joining → Recovering → Live → Broken.
//!
//! - **Joining**: the bridge has not answered; live messages the hub hands
//!   over are held (their bytes stay counted in the subscriber's gauge).
//! - **Recovering**: the history after `since` is handed to the front in
//!   slices, while the front says there is room (under half its mark), a
//!   page at a time from a cluster's history; live messages above the
//!   position wait behind it.
//! - **Live**: each `seq` above the last handled goes out once, in order.
//!   Frames of the front's own that must keep their place among the live
//!   messages (a Pusher presence member event) wait with them while they
//!   wait ([`Subscription::hold_own`]).
//! - **Broken** (a front that breaks at a loss, [`OnLoss::Break`]): a
//!   message was lost; nothing newer goes out, and the front ends the
//!   subscription with its [`Report`].
//!
//! The type holds no lock and does no I/O: the front keeps it under its
//! own lock beside its queue (so a hub's delivery and the join's
//! completion cannot interleave), asks it what to do with each message
//! ([`Subscription::offer`], [`Subscription::pump`]), and renders and
//! queues in its own words.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;

#[cfg(doc)]
use super::Subscription;
use super::{Filled, Held, Joining, Left, Next, Offer, OnLoss, Phase, Report};
use crate::hub::{Joined, Page, PageRead, Pages, Recovery};

/// What waits for its turn while the subscription joins, recovers or
/// hands held messages over: a live message of the hub's, or a frame of
/// the front's own ([`Subscription::hold_own`]), which has no `seq` and is
/// said so by its variant, not by a reserved number.
enum Waiting {
    Hub(Held),
    Own(Bytes),
}

impl Waiting {
    fn len(&self) -> usize {
        match self {
            Waiting::Hub(h) => h.frame.len(),
            Waiting::Own(frame) => frame.len(),
        }
    }
}

enum State {
    Joining(Vec<Waiting>),
    Recovering {
        backlog: Recovery,
        held: Vec<Waiting>,
        /// The position: live messages are those above it.
        last: u64,
    },
    /// The highest `seq` handled (sent, held to send, or lost).
    Live(u64),
    Broken(u64),
    Ended,
}

/// One subscription's position and what it holds, in full: what
/// [`Subscription`] boxes while it joins, recovers, hands held messages
/// over, or after a loss. Bounded: what it holds is counted in the
/// subscriber's gauge, whose mark the hub drops at (held live messages),
/// or is one page of history of at most the budget the front chose (or
/// one message).
pub(super) struct Machine {
    state: State,
    on_loss: OnLoss,
    /// Held messages (and frames of the front's own) being handed over as
    /// the subscription goes live, before any newer one.
    flush: VecDeque<Waiting>,
    /// Bytes of held messages and own frames (in `state` and `flush`).
    held_bytes: usize,
    /// Bytes of the page of history waiting.
    page_bytes: usize,
    /// See [`Report::last_seq`].
    sent: u64,
    /// The first `seq` lost ([`OnLoss::Break`] only).
    lost_at: Option<u64>,
    dropped: u64,
}

impl Machine {
    /// A subscription joining.
    pub(super) fn new(on_loss: OnLoss) -> Machine {
        Machine {
            state: State::Joining(Vec::new()),
            on_loss,
            flush: VecDeque::new(),
            held_bytes: 0,
            page_bytes: 0,
            sent: 0,
            lost_at: None,
            dropped: 0,
        }
    }

    pub fn phase(&self) -> Phase {
        match self.state {
            State::Joining(_) => Phase::Joining,
            State::Recovering { .. } => Phase::Recovering,
            State::Live(_) => Phase::Live,
            State::Broken(_) => Phase::Broken,
            State::Ended => Phase::Ended,
        }
    }

    /// Whether a message was lost ([`OnLoss::Break`]): it breaks as soon
    /// as it is live.
    pub fn is_broken(&self) -> bool {
        self.lost_at.is_some()
    }

    /// How many were lost, and the last `seq` queued.
    pub fn report(&self) -> Report {
        Report {
            dropped: self.dropped,
            last_seq: self.sent,
        }
    }

    /// Bytes held or waiting in a page: what the front's room for backlog
    /// leaves out (they are counted already).
    pub fn waiting(&self) -> usize {
        self.held_bytes + self.page_bytes
    }

    /// A live message `seq` the hub handed over (its bytes reserved).
    pub fn offer(&mut self, seq: u64, frame: &Bytes, key: Option<&Arc<str>>) -> Offer {
        let held = |frame: &Bytes| {
            Waiting::Hub(Held {
                seq,
                frame: frame.clone(),
                key: key.cloned(),
            })
        };
        match &mut self.state {
            State::Live(last) if seq > *last && !self.flush.is_empty() => {
                self.held_bytes += frame.len();
                self.flush.push_back(held(frame));
                Offer::Held
            }
            State::Live(last) if seq > *last => {
                *last = seq;
                Offer::Deliver
            }
            State::Broken(last) if seq > *last => {
                *last = seq;
                self.dropped += 1;
                Offer::Release
            }
            State::Joining(waiting) => {
                self.held_bytes += frame.len();
                waiting.push(held(frame));
                Offer::Held
            }
            State::Recovering {
                held: waiting,
                last,
                ..
            } if seq > *last => {
                self.held_bytes += frame.len();
                waiting.push(held(frame));
                Offer::Held
            }
            _ => Offer::Release,
        }
    }

    /// A frame of the front's own for this subscription's client (no hub
    /// message, so no `seq`: a Pusher presence member event), which must
    /// keep its place among the live messages: `Deliver` when nothing
    /// waits (queue it now), `Held` behind what waits (a join, a backlog,
    /// held messages being handed over), handed over by
    /// [`Subscription::pump`] as [`Next::Own`] in arrival order with
    /// them. The front counts its bytes in its gauge before it asks (the
    /// hub reserved nothing for it); held, they are in
    /// [`Subscription::waiting`] and an end's [`Left::held`] like the
    /// hub's. Never deduplicated and never dropped (the hub's mark does
    /// not see it); `Release` once ended, and on a front that breaks at a
    /// loss after the first loss (nothing newer goes out).
    pub fn hold_own(&mut self, frame: &Bytes) -> Offer {
        if self.lost_at.is_some() {
            return Offer::Release;
        }
        let own = Waiting::Own(frame.clone());
        match &mut self.state {
            State::Live(_) if self.flush.is_empty() => return Offer::Deliver,
            State::Live(_) => self.flush.push_back(own),
            State::Joining(waiting) | State::Recovering { held: waiting, .. } => waiting.push(own),
            State::Broken(_) | State::Ended => return Offer::Release,
        }
        self.held_bytes += frame.len();
        Offer::Held
    }

    /// The front queued `seq` for its client.
    pub fn queued(&mut self, seq: u64) {
        self.sent = seq;
    }

    /// The hub dropped message `seq` for this subscription (at the mark).
    pub fn lost(&mut self, seq: u64) {
        if self.on_loss == OnLoss::Continue {
            return;
        }
        match &mut self.state {
            State::Live(last) | State::Broken(last) if seq <= *last => {}
            State::Ended => {}
            State::Broken(last) => {
                *last = seq;
                self.dropped += 1;
            }
            // Held messages still being handed over come before it: they
            // go out (those below the loss), then it breaks (`settle`).
            State::Live(_) if !self.flush.is_empty() => {
                self.lost_at.get_or_insert(seq);
                self.dropped += 1;
            }
            State::Live(_) => {
                self.lost_at.get_or_insert(seq);
                self.dropped += 1;
                self.state = State::Broken(seq);
            }
            State::Joining(_) | State::Recovering { .. } => {
                self.lost_at.get_or_insert(seq);
                self.dropped += 1;
            }
        }
    }

    /// The front's queue would not take message `seq` it was told to
    /// deliver (a conflating queue's new key past the mark).
    pub fn refused(&mut self, seq: u64) {
        if self.on_loss == OnLoss::Continue {
            return;
        }
        self.lost_at.get_or_insert(seq);
        self.dropped += 1;
        if let State::Live(last) = self.state {
            self.state = State::Broken(last);
        }
    }

    /// The bridge answered. Before anything is queued the client holds
    /// everything up to the first recovered `seq`, or up to the position.
    pub fn joined(&mut self, joined: Joined) -> Joining {
        let held = match std::mem::replace(&mut self.state, State::Ended) {
            State::Joining(held) => held,
            other => {
                self.state = other;
                return Joining::Ignored;
            }
        };
        let last = joined.position();
        self.sent = joined.backlog.before_first().unwrap_or(last);
        if joined.backlog.is_done() {
            self.go_live(held, last);
            return Joining::Live;
        }
        self.state = State::Recovering {
            backlog: joined.backlog,
            held,
            last,
        };
        Joining::Recovering
    }

    /// The backlog is all handed over (or given up): the held messages
    /// follow through [`Subscription::pump`], then it is live, or broken.
    fn go_live(&mut self, held: Vec<Waiting>, last: u64) {
        self.flush.extend(held);
        self.state = State::Live(last);
        self.settle();
    }

    /// Live with nothing left to hand over, after a loss: broken.
    fn settle(&mut self) {
        if let State::Live(last) = self.state
            && self.flush.is_empty()
            && self.lost_at.is_some()
        {
            self.state = State::Broken(last);
        }
    }

    /// The next thing to hand the front: recovered history while
    /// `room(waiting)` says so (`waiting`: [`Subscription::waiting`]), then
    /// the held messages. Pump until it says `Stalled`, `Page` or `Done`
    /// under the lock the front keeps the subscription in.
    pub fn pump(&mut self, room: &mut dyn FnMut(usize) -> bool) -> Next {
        loop {
            if let Some(h) = self.flush.pop_front() {
                return self.flushed(h);
            }
            let State::Recovering { backlog, .. } = &mut self.state else {
                self.settle();
                return Next::Done;
            };
            if backlog.is_done() {
                if let State::Recovering { held, last, .. } =
                    std::mem::replace(&mut self.state, State::Ended)
                {
                    self.go_live(held, last);
                }
                continue;
            }
            if !room(self.held_bytes + self.page_bytes) {
                return Next::Stalled;
            }
            let paged = backlog.source().is_some();
            let Some((seq, frame)) = backlog.pop() else {
                return Next::Page;
            };
            if paged {
                self.page_bytes -= frame.len();
            }
            return Next::Recovered { seq, frame, paged };
        }
    }

    /// A held message leaves the flush: handed over unless it is not
    /// above the position, or it comes at or after a loss. A frame of the
    /// front's own always is: it was held before any loss
    /// ([`Subscription::hold_own`] releases the later ones, and a refusal
    /// comes only with nothing held).
    fn flushed(&mut self, w: Waiting) -> Next {
        self.held_bytes -= w.len();
        let h = match w {
            Waiting::Own(frame) => return Next::Own(frame),
            Waiting::Hub(h) => h,
        };
        let before_loss = self.lost_at.is_none_or(|b| h.seq < b);
        match &mut self.state {
            State::Live(last) if h.seq > *last => {
                *last = h.seq;
                if before_loss {
                    return Next::Live(h);
                }
                self.dropped += 1;
                Next::Release(h)
            }
            State::Broken(last) if h.seq > *last => {
                *last = h.seq;
                self.dropped += 1;
                Next::Release(h)
            }
            _ => Next::Release(h),
        }
    }

    /// Whether the ready history is used up, more is to be read, and no
    /// page is being read.
    pub fn wants_page(&self) -> bool {
        matches!(&self.state, State::Recovering { backlog, .. } if backlog.wants_page())
    }

    /// Starts reading the next page of history, of at most `budget` bytes
    /// (or one message), to hand to [`Subscription::filled`].
    pub fn next_page(&mut self, budget: usize) -> Option<PageRead> {
        match &mut self.state {
            State::Recovering { backlog, .. } => backlog.next_page(budget),
            _ => None,
        }
    }

    /// Where the pages are read from (a cluster's history).
    pub fn source(&self) -> Option<Arc<dyn Pages>> {
        match &self.state {
            State::Recovering { backlog, .. } => backlog.source(),
            _ => None,
        }
    }

    /// A page read from `source` arrived (`None`: the history could not
    /// answer). Messages that left the history before it was read are
    /// lost: a subscription that goes on reports them; one that breaks
    /// gives up the rest of its backlog and breaks where its client's
    /// history stops.
    pub fn filled(&mut self, source: &Arc<dyn Pages>, page: Option<Page>) -> Filled {
        let State::Recovering { backlog, .. } = &mut self.state else {
            return Filled::default();
        };
        if !backlog.reads_from(source) {
            return Filled::default();
        }
        let lost = backlog.fill(page);
        let bytes = backlog.ready().1;
        self.page_bytes += bytes;
        let mut filled = Filled {
            lost,
            bytes,
            released: 0,
        };
        if lost > 0 && self.on_loss == OnLoss::Break {
            self.lost_at.get_or_insert(self.sent + 1);
            self.dropped += lost;
            filled.released = std::mem::take(&mut self.page_bytes);
            if let State::Recovering { held, last, .. } =
                std::mem::replace(&mut self.state, State::Ended)
            {
                self.go_live(held, last);
            }
        }
        filled
    }

    /// Live with nothing held, lost or waiting: its position and the last
    /// `seq` queued, all that [`Subscription`] keeps unboxed.
    pub(super) fn settled(&self) -> Option<(OnLoss, u64, u64)> {
        let State::Live(last) = self.state else {
            return None;
        };
        let quiet = self.flush.is_empty() && self.lost_at.is_none() && self.dropped == 0;
        (quiet && self.held_bytes + self.page_bytes == 0).then_some((self.on_loss, last, self.sent))
    }

    /// [`Machine::settled`]'s inverse: a live one boxed again.
    pub(super) fn live(on_loss: OnLoss, last: u64, sent: u64) -> Machine {
        let state = State::Live(last);
        Machine {
            state,
            sent,
            ..Machine::new(on_loss)
        }
    }

    /// Ends it: nothing more goes out. Returns where it stood and the
    /// bytes it held, which the front releases where it counted them.
    pub fn end(&mut self) -> Left {
        let was = self.phase();
        self.state = State::Ended;
        self.flush.clear();
        Left {
            was,
            held: std::mem::take(&mut self.held_bytes),
            paged: std::mem::take(&mut self.page_bytes),
        }
    }
}
