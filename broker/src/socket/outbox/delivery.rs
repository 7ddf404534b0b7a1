//! What the hub hands a socket, and how each subscription takes it.
//!
//! The hub writes live messages straight into the socket's [`Outbox`]
//! ([`DirectSink`]), from whichever thread publishes, under the channel's
//! lock. Whether a message is queued is its subscription's answer, the
//! session layer's `Subscription` (the same machine gRPC and graphql-ws
//! keep), with `OnLoss::Continue`: a socket reports a drop episode and
//! goes on. Joining (a cluster subscribe still waiting for the bridge), it
//! holds the message until the ack is queued; live, it queues it unless
//! its `seq` was already sent (as recovered history, or by an earlier
//! subscription). So the subscriptions live beside the queue, under the
//! same lock, where the hub's delivery and the actor's join completion
//! cannot interleave. This file and `socket/outbox/recovery.rs` only render and
//! queue what the subscription says.

use std::sync::Arc;

use bytes::Bytes;

use super::queue::Keyed;
use super::subs::Sub;
use super::{Congested, Outbox, Shared};
use crate::hub::{DirectSink, Joined, Renders, Reserve};
use crate::metrics::Layer;
use crate::session::{Joining, Next, Offer, Phase};

impl DirectSink for Outbox {
    fn message(
        &self,
        channel: &Arc<str>,
        seq: u64,
        frame: &Bytes,
        key: Option<&Arc<str>>,
        _: &mut Renders,
    ) {
        let mut s = self.lock();
        let Shared {
            subs,
            closing,
            held_bytes,
            ..
        } = &mut *s;
        let offer = match subs.get_mut(channel) {
            Some(sub) if !*closing => match sub.sub.offer(seq, frame, key) {
                // Behind the backlog still to be queued; counted in the
                // gauge (the hub reserved it), so the hub drops at the
                // mark, and left out of the backlog's room.
                Offer::Held if sub.sub.phase() == Phase::Recovering => {
                    *held_bytes += frame.len();
                    return;
                }
                offer => offer,
            },
            _ => Offer::Release,
        };
        match offer {
            // Deduplicated by seq: a message already sent as recovered
            // history, or from an earlier subscription, is not resent.
            Offer::Deliver => {
                let congested = self.queue_live(&mut s, channel, frame.clone(), key.cloned());
                Outbox::unlock_and_wake(s);
                if congested {
                    self.control.do_send(Congested);
                }
            }
            // Held while joining (its bytes stay reserved).
            Offer::Held => {}
            Offer::Release => {
                drop(s);
                self.gauge.release(frame.len());
            }
        }
    }

    fn congested(&self) {
        self.control.do_send(Congested);
    }
}

impl Outbox {
    /// Queues a live message the hub counted in the gauge: behind the
    /// others on a queueing channel, in place of the unsent one with the
    /// same key on a conflating channel. Returns whether it started a drop
    /// episode (a new key refused at the mark).
    pub(super) fn queue_live(
        &self,
        s: &mut Shared,
        channel: &Arc<str>,
        frame: Bytes,
        key: Option<Arc<str>>,
    ) -> bool {
        let Some(key) = key else {
            self.push_reserved(s, frame);
            return false;
        };
        match self.push_conflated(s, channel, key, frame) {
            Keyed::Queued(_) => false,
            Keyed::Replaced { .. } => {
                self.metrics.messages_superseded.inc();
                false
            }
            Keyed::Refused if s.closing => false,
            Keyed::Refused => {
                self.metrics.reject(Layer::Outbound, "slow_consumer");
                self.gauge.record_drop() == Reserve::FirstDrop
            }
        }
    }

    /// How many channels the socket is subscribed to (or joining), and
    /// whether `channel` is one of them.
    pub(in crate::socket) fn subscriptions(&self, channel: &str) -> (usize, bool) {
        let s = self.lock();
        (s.subs.len(), s.subs.contains_key(channel))
    }

    /// Starts joining `channel` (replacing a subscription to it): live
    /// messages are held until [`Outbox::joined`].
    pub(in crate::socket) fn joining(&self, channel: &str, join: u64) {
        let mut s = self.lock();
        if let Some(mut old) = s.subs.insert(channel.into(), Sub::joining(join)) {
            self.release(&mut s, &mut old);
        }
    }

    /// Completes join number `join` of `channel`: the ack (if any) first,
    /// then the recovered history, then what arrived live while joining,
    /// each `seq` once and in order; from then on live messages queue
    /// directly. A join superseded meanwhile (unsubscribed, or subscribed
    /// again) changes nothing: the later operation has the last word.
    pub(in crate::socket) fn joined(
        &self,
        channel: &str,
        join: u64,
        ack: Option<Bytes>,
        joined: Joined,
    ) {
        let mut s = self.lock();
        let name = match s.subs.get_key_value(channel) {
            Some((name, sub)) if sub.join == join && sub.sub.phase() == Phase::Joining => {
                name.clone()
            }
            _ => return,
        };
        if s.closing {
            if let Some(sub) = s.subs.get_mut(channel) {
                let left = sub.sub.end();
                self.gauge.release(left.held);
            }
            return;
        }
        // The ack says where the subscription stands (§11); the backlog is
        // everything after `since`, in order, queued in slices under the
        // mark (`socket/outbox/recovery.rs`); live messages then continue above
        // both it and the position the subscription went live at.
        let mut congested = false;
        if let Some(ack) = ack {
            congested |= self.gauge.add_answer(ack.len());
            self.push_reserved(&mut s, ack);
        }
        let (joining, waiting) = match s.subs.get_mut(channel) {
            Some(sub) => (sub.sub.joined(joined), sub.sub.waiting()),
            None => (Joining::Ignored, 0),
        };
        let mut pumped = None;
        match joining {
            Joining::Recovering => {
                // Its held messages now wait behind its backlog.
                s.held_bytes += waiting;
                pumped = Some(self.recover(&mut s));
            }
            Joining::Live => {
                // What arrived while joining, above the position, in order.
                let flush = |s: &mut Shared| {
                    let sub = s.subs.get_mut(&name)?;
                    Some(sub.sub.pump(&mut |_| false))
                };
                while let Some(next) = flush(&mut s) {
                    match next {
                        Next::Live(h) => {
                            congested |= self.queue_live(&mut s, &name, h.frame, h.key);
                        }
                        Next::Release(h) => {
                            self.gauge.release(h.frame.len());
                        }
                        _ => break,
                    }
                }
            }
            Joining::Ignored => {}
        }
        Outbox::unlock_and_wake(s);
        if let Some(pumped) = pumped {
            self.signal(pumped, None);
        }
        if congested {
            self.control.do_send(Congested);
        }
    }

    /// Leaves `channel`; returns its name if the socket was subscribed.
    pub(in crate::socket) fn leave(&self, channel: &str) -> Option<Arc<str>> {
        let mut s = self.lock();
        let (name, mut sub) = s.subs.remove_entry(channel)?;
        self.release(&mut s, &mut sub);
        Some(name)
    }

    /// Leaves every channel `keep` refuses; returns their names.
    pub(in crate::socket) fn leave_unless(&self, keep: impl Fn(&str) -> bool) -> Vec<Arc<str>> {
        let gone: Vec<Arc<str>> = self
            .lock()
            .subs
            .keys()
            .filter(|name| !keep(name))
            .cloned()
            .collect();
        gone.into_iter()
            .filter_map(|name| self.leave(&name))
            .collect()
    }

    /// Leaves every channel; returns their names.
    pub(in crate::socket) fn leave_all(&self) -> Vec<Arc<str>> {
        let mut s = self.lock();
        let mut subs = std::mem::take(&mut s.subs);
        for sub in subs.values_mut() {
            self.release(&mut s, sub);
        }
        drop(s);
        subs.into_keys().collect()
    }

    /// Ends a subscription that left: what it held leaves the gauge (a
    /// recovering one's, see [`Outbox::forget_recovery`]).
    fn release(&self, s: &mut Shared, sub: &mut Sub) {
        let left = sub.sub.end();
        if left.was == Phase::Recovering {
            self.forget_recovery(s, left.held, left.paged);
        } else {
            self.gauge.release(left.held + left.paged);
        }
    }

    /// Turns every live subscription into a joining one (live messages
    /// are held from now on); returns each channel with the last `seq`
    /// queued and its join number.
    pub(in crate::socket) fn rejoin_live(&self, next_join: &mut u64) -> Vec<(Arc<str>, u64, u64)> {
        let mut s = self.lock();
        let mut out = Vec::with_capacity(s.subs.len());
        for (name, sub) in s.subs.iter_mut() {
            if let Some(last) = sub.sub.live_at() {
                *next_join += 1;
                *sub = Sub::joining(*next_join);
                out.push((name.clone(), last, *next_join));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::task::{Context, Waker};

    use actix::prelude::*;

    use super::*;
    use crate::hub::OutboundGauge;
    use crate::metrics::Metrics;
    use crate::protocol::wire;
    use crate::socket::Nudge;
    use crate::socket::outbox::Next;

    /// Stands in for the socket actor's mailbox.
    struct Mailbox;

    impl Actor for Mailbox {
        type Context = actix::Context<Self>;
    }

    impl Handler<Congested> for Mailbox {
        type Result = ();
        fn handle(&mut self, _: Congested, _: &mut actix::Context<Self>) {}
    }

    impl Handler<crate::socket::Drained> for Mailbox {
        type Result = ();
        fn handle(&mut self, _: crate::socket::Drained, _: &mut actix::Context<Self>) {}
    }

    /// What the transport would take and write now.
    fn sent(outbox: &Outbox) -> Vec<Bytes> {
        let cx = Context::from_waker(Waker::noop());
        let mut batch = VecDeque::new();
        let mut out = Vec::new();
        while outbox.take(&cx, &mut batch, 2, usize::MAX) == Next::Write {
            let bytes = batch.iter().map(Bytes::len).sum();
            outbox.gauge.release(bytes);
            out.extend(batch.drain(..));
        }
        out
    }

    #[actix_rt::test]
    async fn held_then_live_each_seq_once_in_order_and_the_gauge_stays_exact() {
        let mailbox = Mailbox.start();
        let gauge = Arc::new(OutboundGauge::new(1 << 20));
        let outbox = Outbox::new(
            gauge.clone(),
            Arc::new(Metrics::new()),
            Nudge::new(mailbox.clone().recipient()),
            Nudge::new(mailbox.recipient()),
        );
        let ch: Arc<str> = Arc::from("doc:1");
        let frame = |seq| wire::message("doc:1", seq, "1");
        // As the hub does: reserve in the gauge, then hand over.
        let publish = |seq| {
            let f = frame(seq);
            gauge.add(f.len());
            outbox.message(&ch, seq, &f, None, &mut Renders::default());
        };
        outbox.joining("doc:1", 1);
        publish(5);
        publish(6);
        assert!(sent(&outbox).is_empty(), "held while joining");
        let ack = Bytes::from_static(b"ack");
        let joined = Joined {
            recovered: Some(true),
            backlog: vec![(4, frame(4)), (5, frame(5))].into(),
            last_seq: 4,
        };
        outbox.joined("doc:1", 1, Some(ack.clone()), joined);
        publish(6); // already sent (held)
        publish(7);
        assert_eq!(
            sent(&outbox),
            vec![ack, frame(4), frame(5), frame(6), frame(7)]
        );
        assert_eq!(
            gauge.pending(),
            0,
            "every byte reserved was sent or released"
        );
        outbox.stop_deliveries(false);
        publish(8);
        assert!(sent(&outbox).is_empty(), "nothing live after closing");
        assert_eq!(outbox.leave("doc:1").as_deref(), Some("doc:1"));
        publish(9);
        assert!(sent(&outbox).is_empty());
        assert_eq!(gauge.pending(), 0);
    }

    #[actix_rt::test]
    async fn a_pair_is_one_frame_in_two_slices_and_the_gauge_stays_exact() {
        use crate::dialect::Outlet;
        let mailbox = Mailbox.start();
        let gauge = Arc::new(OutboundGauge::new(1 << 20));
        let outbox = Outbox::new(
            gauge.clone(),
            Arc::new(Metrics::new()),
            Nudge::new(mailbox.clone().recipient()),
            Nudge::new(mailbox.clone().recipient()),
        );
        let on_drain = Nudge::new(mailbox.recipient());
        let body = Bytes::from(br#""data":{"messages":{"seq":7,"data":1}}}"#.to_vec());
        let shared = Arc::new(body.clone());
        let pair = |id: &str| {
            let head = format!(r#"{{"type":"next","id":"{id}","payload":{{"#);
            let mut h = vec![0x81, (head.len() + body.len()) as u8];
            h.extend_from_slice(head.as_bytes());
            Bytes::from(h)
        };
        let (one, two, three) = (pair("1"), pair("2"), pair("3"));
        let plain = wire::message("doc:1", 7, "1");
        // As a dialect's sink does: the gauge counts the frame, then queued.
        for (head, rest) in [(&one, &body), (&plain, &Bytes::new()), (&two, &body)] {
            gauge.add(head.len() + rest.len());
            if rest.is_empty() {
                outbox.push_frame(head.clone());
            } else {
                outbox.push_pair(head.clone(), shared.clone());
            }
        }
        let queued = 2 * body.len() + one.len() + two.len() + plain.len();
        assert_eq!(gauge.pending(), queued);
        let cx = Context::from_waker(Waker::noop());
        let mut batch = VecDeque::new();
        // Two frames, three slices; the body itself, not a copy.
        assert_eq!(outbox.take(&cx, &mut batch, 2, usize::MAX), Next::Write);
        assert_eq!(Vec::from(batch.clone()), vec![one, body.clone(), plain]);
        assert_eq!(batch[1].as_ptr(), body.as_ptr());
        // The kernel takes part of the first slice, then the rest.
        let taken: usize = batch.iter().map(Bytes::len).sum();
        outbox.sent(3, &on_drain);
        assert_eq!(gauge.pending(), queued - 3);
        outbox.sent(taken - 3, &on_drain);
        assert_eq!(gauge.pending(), two.len() + body.len());
        // A frame queued after the socket stopped is released, and a
        // discard releases a queued pair whole.
        gauge.add(three.len() + body.len());
        outbox.stop_deliveries(true);
        assert_eq!(gauge.pending(), three.len() + body.len());
        outbox.push_pair(three, shared);
        assert_eq!(
            gauge.pending(),
            0,
            "every byte reserved was sent or released"
        );
        batch.clear();
        assert_ne!(outbox.take(&cx, &mut batch, 64, usize::MAX), Next::Write);
    }
}
