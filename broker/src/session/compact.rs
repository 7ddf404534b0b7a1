//! [`Subscription`]: the state machine (`Machine`) boxed only while it
//! has something rare to keep.
//!
//! A subscription joins and recovers briefly and is live for the rest of
//! its life, and a socket keeps one per channel in its map: every entry
//! of that map is as large as the type (the machine is about 200 bytes;
//! a socket's map of one channel allocates four entries). So a live
//! subscription with nothing held, lost or waiting is its position and its
//! last `seq` queued, 24 bytes, and the live path (a message above the
//! position goes out) touches no box; the machine is boxed while it joins,
//! recovers, hands held messages over, or after a loss (issue 42: idle
//! memory per subscribed socket).

use std::sync::Arc;

use bytes::Bytes;

use super::subscription::Machine;
use super::{Filled, Joining, Left, Next, Offer, OnLoss, Phase, Report};
use crate::hub::{Joined, Page, PageRead, Pages};

/// One subscription's position and what it holds: see
/// `session/subscription.rs` for its states, and `Machine` for what
/// each call does (the same here).
pub struct Subscription(Repr);

enum Repr {
    /// Live with nothing held, lost or waiting.
    Live {
        on_loss: OnLoss,
        /// The highest `seq` handled.
        last: u64,
        /// See [`Report::last_seq`].
        sent: u64,
    },
    Boxed(Box<Machine>),
}

impl Subscription {
    /// A subscription joining.
    pub fn new(on_loss: OnLoss) -> Subscription {
        Subscription(Repr::Boxed(Box::new(Machine::new(on_loss))))
    }

    /// The machine, boxed if it was not (a loss, an end).
    fn machine(&mut self) -> &mut Machine {
        if let Repr::Live {
            on_loss,
            last,
            sent,
        } = self.0
        {
            self.0 = Repr::Boxed(Box::new(Machine::live(on_loss, last, sent)));
        }
        match &mut self.0 {
            Repr::Boxed(m) => m,
            Repr::Live { .. } => unreachable!("boxed above"),
        }
    }

    /// Unboxes a machine that has nothing rare left to keep.
    fn settle(&mut self) {
        if let Repr::Boxed(m) = &self.0
            && let Some((on_loss, last, sent)) = m.settled()
        {
            self.0 = Repr::Live {
                on_loss,
                last,
                sent,
            };
        }
    }

    pub fn phase(&self) -> Phase {
        match &self.0 {
            Repr::Live { .. } => Phase::Live,
            Repr::Boxed(m) => m.phase(),
        }
    }

    /// Live with nothing to hand over: its position (nothing at or below
    /// it goes out live).
    pub fn live_at(&self) -> Option<u64> {
        match &self.0 {
            Repr::Live { last, .. } => Some(*last),
            Repr::Boxed(m) => m.settled().map(|(_, last, _)| last),
        }
    }

    /// Whether a message was lost ([`OnLoss::Break`]): it breaks as soon
    /// as it is live.
    pub fn is_broken(&self) -> bool {
        match &self.0 {
            Repr::Live { .. } => false,
            Repr::Boxed(m) => m.is_broken(),
        }
    }

    /// How many were lost, and the last `seq` queued.
    pub fn report(&self) -> Report {
        match &self.0 {
            Repr::Live { sent, .. } => Report {
                dropped: 0,
                last_seq: *sent,
            },
            Repr::Boxed(m) => m.report(),
        }
    }

    /// Bytes held or waiting in a page: what the front's room for backlog
    /// leaves out (they are counted already).
    pub fn waiting(&self) -> usize {
        match &self.0 {
            Repr::Live { .. } => 0,
            Repr::Boxed(m) => m.waiting(),
        }
    }

    /// A live message `seq` the hub handed over (its bytes reserved).
    #[inline]
    pub fn offer(&mut self, seq: u64, frame: &Bytes, key: Option<&Arc<str>>) -> Offer {
        match &mut self.0 {
            Repr::Live { last, .. } if seq > *last => {
                *last = seq;
                Offer::Deliver
            }
            Repr::Live { .. } => Offer::Release,
            Repr::Boxed(m) => m.offer(seq, frame, key),
        }
    }

    /// A frame of the front's own: see `Machine::hold_own`. Live with
    /// nothing waiting, it goes out now.
    pub fn hold_own(&mut self, frame: &Bytes) -> Offer {
        match &mut self.0 {
            Repr::Live { .. } => Offer::Deliver,
            Repr::Boxed(m) => m.hold_own(frame),
        }
    }

    /// The front queued `seq` for its client.
    #[inline]
    pub fn queued(&mut self, seq: u64) {
        match &mut self.0 {
            Repr::Live { sent, .. } => *sent = seq,
            Repr::Boxed(m) => m.queued(seq),
        }
    }

    /// The hub dropped message `seq` for this subscription (at the mark).
    pub fn lost(&mut self, seq: u64) {
        match self.0 {
            Repr::Live {
                on_loss: OnLoss::Continue,
                ..
            } => {}
            Repr::Live { last, .. } if seq <= last => {}
            _ => self.machine().lost(seq),
        }
    }

    /// The front's queue would not take message `seq` it was told to
    /// deliver (a conflating queue's new key past the mark).
    pub fn refused(&mut self, seq: u64) {
        if let Repr::Live {
            on_loss: OnLoss::Continue,
            ..
        } = self.0
        {
            return;
        }
        self.machine().refused(seq);
    }

    /// The bridge answered: see `Machine::joined`.
    pub fn joined(&mut self, joined: Joined) -> Joining {
        let Repr::Boxed(m) = &mut self.0 else {
            return Joining::Ignored;
        };
        let joining = m.joined(joined);
        self.settle();
        joining
    }

    /// The next thing to hand the front: see `Machine::pump`.
    pub fn pump(&mut self, room: &mut dyn FnMut(usize) -> bool) -> Next {
        let Repr::Boxed(m) = &mut self.0 else {
            return Next::Done;
        };
        let next = m.pump(room);
        self.settle();
        next
    }

    /// Whether the ready history is used up, more is to be read, and no
    /// page is being read.
    pub fn wants_page(&self) -> bool {
        matches!(&self.0, Repr::Boxed(m) if m.wants_page())
    }

    /// Starts reading the next page of history: see `Machine::next_page`.
    pub fn next_page(&mut self, budget: usize) -> Option<PageRead> {
        match &mut self.0 {
            Repr::Boxed(m) => m.next_page(budget),
            Repr::Live { .. } => None,
        }
    }

    /// Where the pages are read from (a cluster's history).
    pub fn source(&self) -> Option<Arc<dyn Pages>> {
        match &self.0 {
            Repr::Boxed(m) => m.source(),
            Repr::Live { .. } => None,
        }
    }

    /// A page read from `source` arrived: see `Machine::filled`.
    pub fn filled(&mut self, source: &Arc<dyn Pages>, page: Option<Page>) -> Filled {
        let Repr::Boxed(m) = &mut self.0 else {
            return Filled::default();
        };
        let filled = m.filled(source, page);
        self.settle();
        filled
    }

    /// Ends it: nothing more goes out. Returns where it stood and the
    /// bytes it held, which the front releases where it counted them.
    pub fn end(&mut self) -> Left {
        self.machine().end()
    }

    /// Whether it keeps its machine boxed (for tests of its size).
    #[cfg(test)]
    pub(super) fn is_boxed(&self) -> bool {
        matches!(self.0, Repr::Boxed(_))
    }
}
