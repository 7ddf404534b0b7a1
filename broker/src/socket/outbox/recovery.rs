//! Recovered history delivered in slices under the high-water mark.
//!
//! A `subscribe` with `since` used to copy its whole backlog into the
//! outbox at once, whatever the mark: a client that subscribed with `since`
//! to channels with long histories and never read made the broker hold all
//! of it, and with no live traffic nothing was dropped, so 4008 never came.
//! Now the backlog waits in its subscription (a recovering
//! [`Subscription`], frames the hub's history already holds, not copies of
//! them in memory mode) and is
//! queued only while the socket's unsent bytes are under half its mark;
//! the transport queues the next slice as the kernel takes bytes. Live
//! messages of that channel are held behind it (counted in the gauge, so
//! the hub drops at the mark as for any subscriber), and the channel goes
//! live once its backlog is queued: each `seq` once, in order, no gap.
//!
//! A backlog that cannot move because the socket does not read runs the
//! slow-consumer grace (`Congested`), and one that moves again stops it
//! (`Drained`): a reader that stopped is closed with 4008 like any other.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::Congested;
use super::{Drained, Outbox, Shared, State};
use crate::dialect::Backlog;
#[cfg(doc)]
use crate::session::Subscription;
use crate::session::{Next, Phase, Pumped};
use crate::socket::Nudge;

impl Outbox {
    /// The room a backlog may fill: half the mark, so live messages of
    /// other channels still fit while a channel recovers.
    fn backlog_room(&self, s: &Shared) -> bool {
        self.room_beside(s.held_bytes + s.paged_bytes)
    }

    /// Whether a backlog may queue more, `held` bytes (already in the
    /// gauge, waiting behind or in backlogs: held live messages, pages
    /// read) left out.
    pub(super) fn room_beside(&self, held: usize) -> bool {
        self.gauge.pending().saturating_sub(held) < self.gauge.high_water() / 2
    }

    /// A dialect subscription's backlog ([`crate::dialect::Outlet::recover`]):
    /// recovering from now on, like a socket subscription, and pumped at
    /// once.
    pub(super) fn recover_feed(&self, feed: Arc<dyn Backlog>) {
        let mut s = self.lock();
        s.feeds.push(feed);
        self.recovering.fetch_add(1, Ordering::AcqRel);
        drop(s);
        let pumped = self.pump_feeds();
        self.signal(pumped, None);
    }

    /// Pumps every dialect backlog under the same rule as [`Outbox::pump`],
    /// outside this outbox's lock (each takes its own lock, then queues
    /// here, as for its live messages); one that is done is forgotten.
    pub(super) fn pump_feeds(&self) -> Pumped {
        let feeds: Vec<Arc<dyn Backlog>> = {
            let s = self.lock();
            if s.closing || s.state != State::Open {
                return Pumped::default();
            }
            s.feeds.clone()
        };
        let mut pumped = Pumped::default();
        for feed in feeds {
            let step = feed.pump(&|held| self.room_beside(held));
            if step.done {
                self.forget_feed(&feed, false);
            }
            pumped = pumped.and(step);
        }
        pumped
    }

    /// A dialect backlog is all queued, or `ended` before (then see
    /// [`Outbox::forget_recovery`]; one all queued moved, so the pump's
    /// signal ends the grace as for a socket subscription going live).
    pub(super) fn forget_feed(&self, feed: &Arc<dyn Backlog>, ended: bool) {
        let mut s = self.lock();
        let at = s
            .feeds
            .iter()
            .position(|f| std::ptr::addr_eq(Arc::as_ptr(f), Arc::as_ptr(feed)));
        if let Some(i) = at {
            s.feeds.swap_remove(i);
            if ended {
                self.forget_recovery(&mut s, 0, 0);
            } else {
                self.recovering.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// A subscription acked with a backlog: recovering from now on, and
    /// what fits now is queued (the rest waits in the subscription).
    pub(super) fn recover(&self, s: &mut Shared) -> Pumped {
        self.recovering.fetch_add(1, Ordering::AcqRel);
        self.pump(s)
    }

    /// Queues what the recovering subscriptions hand over while there is
    /// room ([`Subscription::pump`]): their backlogs, then, as each goes
    /// live, its held live messages. One whose page is used up reads its
    /// next (`socket/outbox/pages.rs`).
    pub(super) fn pump(&self, s: &mut Shared) -> Pumped {
        let mut done = Pumped::default();
        if s.closing || s.state != State::Open {
            return done;
        }
        let subs: Vec<Arc<str>> = s
            .subs
            .iter()
            .filter(|(_, sub)| sub.sub.phase() == Phase::Recovering)
            .map(|(name, _)| name.clone())
            .collect();
        for name in subs {
            loop {
                let room = self.backlog_room(s);
                let Some(sub) = s.subs.get_mut(&name) else {
                    break;
                };
                match sub.sub.pump(&mut |_| room) {
                    Next::Recovered { frame, paged, .. } => {
                        if paged {
                            // Counted in the gauge since it was read.
                            s.paged_bytes -= frame.len();
                        } else {
                            self.gauge.add(frame.len());
                        }
                        s.queue.push(frame);
                        done.moved = true;
                    }
                    // Held behind the backlog, which is all queued.
                    Next::Live(h) => {
                        s.held_bytes -= h.frame.len();
                        done.congested |= self.queue_live(s, &name, h.frame, h.key);
                    }
                    Next::Release(h) => {
                        s.held_bytes -= h.frame.len();
                        self.gauge.release(h.frame.len());
                    }
                    // A socket holds no frames of its own: were one handed
                    // over, its bytes would leave the gauge.
                    Next::Own(frame) => {
                        self.gauge.release(frame.len());
                    }
                    Next::Stalled => {
                        done.stalled = true;
                        break;
                    }
                    Next::Page => {
                        self.read_page(s, &name);
                        break;
                    }
                    // Live from now on.
                    Next::Done => {
                        self.recovering.fetch_sub(1, Ordering::AcqRel);
                        break;
                    }
                }
            }
        }
        done
    }

    /// Tells the socket what a pump changed: a backlog that moved again
    /// ends the grace it was running (`drained`, when the caller has the
    /// socket's mailbox for it), one that cannot move starts it.
    pub(super) fn signal(&self, pumped: Pumped, drained: Option<&Nudge<Drained>>) {
        if (pumped.moved || !pumped.stalled)
            && let Some(d) = drained
            && self.stalled.swap(false, Ordering::AcqRel)
        {
            d.do_send(Drained);
        }
        if pumped.stalled && !self.stalled.swap(true, Ordering::AcqRel) || pumped.congested {
            self.control.do_send(Congested);
        }
    }

    /// A subscription left while recovering: its held messages (and the
    /// page of history it had read) leave the gauge, and a backlog that was
    /// the only one waiting no longer keeps the grace running: the socket
    /// hears so, as when a backlog moves again, or its grace would stay
    /// started and a later stall would start none.
    pub(super) fn forget_recovery(&self, s: &mut Shared, held: usize, paged: usize) {
        s.held_bytes -= held;
        s.paged_bytes -= paged;
        self.gauge.release(held + paged);
        let over = self.gauge.is_congested() && self.gauge.pending() >= self.gauge.high_water();
        if self.recovering.fetch_sub(1, Ordering::AcqRel) == 1
            && self.stalled.swap(false, Ordering::AcqRel)
            && !over
        {
            self.drained.do_send(Drained);
        }
    }

    /// Whether a backlog is waiting for room (the grace's reason to close).
    pub(in crate::socket) fn is_stalled(&self) -> bool {
        self.stalled.load(Ordering::Acquire)
    }
}
