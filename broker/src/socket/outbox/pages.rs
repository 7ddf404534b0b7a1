//! Recovered history read from a cluster's history a page at a time
//! (`hub::Recovery`), for the socket's own subscriptions and its dialect's.
//!
//! A subscription whose page is used up reads the next one only inside the
//! room left under half the mark by what is queued and what waits, and
//! only while no other page of the socket is being read
//! ([`Outbox::page_room`]); the page's frames then wait in their
//! subscription counted in the gauge (`paged_bytes`) until the pump queues
//! them. So what a socket's recoveries hold, queued or waiting, stays under
//! half its mark plus one message (a page holds at least one), whatever
//! the number of channels recovering; a page read ends with a pump, which
//! starts the next read of whichever subscription needs one.
//!
//! A page that finds messages already trimmed out of the history (or a
//! history that cannot answer) is a drop episode like the hub's at the
//! mark: the socket reports how many were lost (`slow_consumer`), and the
//! recovery continues with what the history still holds, in order.

use std::sync::Arc;

use super::Congested;
use super::{Outbox, Shared};
use crate::hub::{Page, Pages, Reserve};
use crate::metrics::Layer;

impl Outbox {
    /// The budget of a page read now, reserved until it is filled
    /// ([`Outbox::page_done`]): the room under half the mark beside `held`
    /// bytes (held live messages, which wait behind backlogs), when no
    /// other page is being read. `None`: not now (the read waits for the
    /// next pump: the transport's as it drains, or the other page's).
    pub(super) fn page_room(&self, s: &mut Shared, held: usize) -> Option<usize> {
        if s.reading > 0 {
            return None;
        }
        let used = self.gauge.pending().saturating_sub(held);
        let room = (self.gauge.high_water() / 2).checked_sub(used)?;
        if room == 0 {
            return None;
        }
        s.reading += room;
        Some(room)
    }

    /// A page read with `budget` is done: its reservation is given back.
    pub(super) fn page_done(&self, s: &mut Shared, budget: usize) {
        s.reading -= budget;
    }

    /// Starts reading the next page of `name`'s recovery, if it has more
    /// and there is room; the page is handed back on the socket's worker.
    pub(super) fn read_page(&self, s: &mut Shared, name: &Arc<str>) {
        if !matches!(s.subs.get(name), Some(sub) if sub.sub.wants_page()) {
            return;
        }
        let held = s.held_bytes;
        let Some(budget) = self.page_room(s, held) else {
            return;
        };
        let read = s
            .subs
            .get_mut(name)
            .and_then(|sub| sub.sub.next_page(budget).zip(sub.sub.source()));
        let (Some((read, source)), Some(me)) = (read, self.me.upgrade()) else {
            self.page_done(s, budget);
            return;
        };
        let name = name.clone();
        tokio::spawn(async move {
            let page = read.await;
            me.paged(&name, &source, budget, page);
        });
    }

    /// A page of `name`'s recovery arrived: its frames wait in the
    /// subscription (counted in the gauge) and are pumped now.
    fn paged(&self, name: &Arc<str>, source: &Arc<dyn Pages>, budget: usize, page: Option<Page>) {
        let mut s = self.lock();
        self.page_done(&mut s, budget);
        let mut lost = 0;
        // Nothing for a subscription that left, or subscribed again (its
        // pages read from another source).
        if let Some(sub) = s.subs.get_mut(name) {
            let filled = sub.sub.filled(source, page);
            lost = filled.lost;
            self.gauge.add(filled.bytes);
            s.paged_bytes += filled.bytes;
            if lost > 0 && !s.lost.contains(name) {
                s.lost.push(name.clone());
            }
        }
        let pumped = self.pump(&mut s);
        Outbox::unlock_and_wake(s);
        let pumped = pumped.and(self.pump_feeds());
        self.lost(lost);
        self.signal(pumped, Some(&self.drained));
    }

    /// The channels whose recovery lost messages since the last time the
    /// socket reported a drop episode (which covers them).
    pub(in crate::socket) fn take_lost(&self) -> Vec<Arc<str>> {
        std::mem::take(&mut self.lock().lost)
    }

    /// `n` recovered messages left the history before their page was read:
    /// counted as dropped, and a drop episode starts (the socket reports it
    /// even with nothing queued, see `Socket::congested`).
    pub(super) fn lost(&self, n: u64) {
        if n == 0 {
            return;
        }
        self.metrics.reject_n(Layer::Outbound, "recovery_lost", n);
        if self.gauge.record_drops(n) == Reserve::FirstDrop {
            self.control.do_send(Congested);
        }
    }
}
