//! The socket's outbox as a dialect's hub sinks write into it
//! ([`Outlet`]): the same queue, gauge and conflation as the socket's own
//! subscriptions (`socket/outbox/delivery.rs`), without the positions, which such
//! a dialect keeps per operation itself.

use std::sync::Arc;

use bytes::Bytes;

use super::Congested;
use super::Outbox;
use super::queue::Keyed;
use crate::dialect::{Backlog, Outlet};
use crate::hub::{OutboundGauge, Reserve};
use crate::metrics::Layer;
use crate::presence::{PresenceSink, Update};

impl Outlet for Outbox {
    fn push(&self, parts: &mut [Bytes]) {
        let mut s = self.lock();
        if s.closing {
            drop(s);
            self.gauge.release(parts.iter().map(Bytes::len).sum());
            return;
        }
        self.push_parts_reserved(&mut s, parts);
        Outbox::unlock_and_wake(s);
    }

    fn push_frame(&self, frame: Bytes) {
        let mut s = self.lock();
        if s.closing {
            drop(s);
            self.gauge.release(frame.len());
            return;
        }
        self.push_reserved(&mut s, frame);
        Outbox::unlock_and_wake(s);
    }

    fn push_pair(&self, head: Bytes, body: Arc<Bytes>) {
        let mut s = self.lock();
        if s.closing {
            drop(s);
            self.gauge.release(head.len() + body.len());
            return;
        }
        self.push_pair_reserved(&mut s, head, body);
        Outbox::unlock_and_wake(s);
    }

    fn push_keyed(&self, slot: &Arc<str>, key: Arc<str>, frame: Bytes) -> bool {
        let mut s = self.lock();
        if s.closing {
            drop(s);
            self.gauge.release(frame.len());
            return true;
        }
        let done = self.push_conflated(&mut s, slot, key, frame);
        Outbox::unlock_and_wake(s);
        match done {
            Keyed::Queued(_) => true,
            Keyed::Replaced { .. } => {
                self.metrics.messages_superseded.inc();
                true
            }
            Keyed::Refused => {
                self.metrics.reject(Layer::Outbound, "slow_consumer");
                if self.gauge.record_drop() == Reserve::FirstDrop {
                    self.control.do_send(Congested);
                }
                false
            }
        }
    }

    fn gauge(&self) -> &OutboundGauge {
        &self.gauge
    }

    fn congested(&self) {
        self.control.do_send(Congested);
    }

    fn recover(&self, backlog: Arc<dyn Backlog>) {
        self.recover_feed(backlog);
    }

    fn forget(&self, backlog: &Arc<dyn Backlog>) {
        self.forget_feed(backlog, true);
    }

    fn page_room(&self, held: usize) -> Option<usize> {
        let mut s = self.lock();
        self.page_room(&mut s, held)
    }

    fn page_done(&self, budget: usize) {
        let mut s = self.lock();
        Outbox::page_done(self, &mut s, budget);
    }

    fn pump_backlogs(&self) {
        let pumped = self.pump_feeds();
        self.signal(pumped, Some(&self.drained));
    }
}

/// Presence frames obey the socket's high-water mark like messages: past
/// it they are dropped and counted, the socket hears `slow_consumer`, and
/// a client that keeps a member set reads it again when it recovers (the
/// SDK does on its resubscribe).
impl PresenceSink for Outbox {
    fn send(&self, frame: &Bytes, _update: &Update<'_>) {
        match self.gauge.try_reserve(frame.len()) {
            Reserve::Queued => Outlet::push_frame(self, frame.clone()),
            Reserve::FirstDrop => self.control.do_send(Congested),
            Reserve::Dropped => {}
        }
    }
}

/// A dialect's view of the socket's outbox.
pub(in crate::socket) fn outlet(outbox: &Arc<Outbox>) -> Arc<dyn Outlet> {
    outbox.clone()
}
