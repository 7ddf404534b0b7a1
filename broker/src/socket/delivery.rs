//! What the hub hands a socket, and where each subscription stands.
//!
//! The hub writes live messages straight into the socket's [`Outbox`]
//! ([`DirectSink`]), from whichever thread publishes, under the channel's
//! lock. Whether a message is queued depends on its subscription:
//! `Joining` (a cluster subscribe still waiting for the bridge) holds it
//! until the ack is queued; `Live` queues it unless its `seq` was already
//! sent (as recovered history, or by an earlier subscription). So the
//! positions live beside the queue, under the same lock, where the hub's
//! delivery and the actor's join completion cannot interleave.

use std::collections::HashMap;
use std::sync::Arc;

use actix::Message;
use bytes::Bytes;

use super::outbox::{Outbox, Shared};
use super::queue::Keyed;
use crate::hub::{DirectSink, Joined, Recovery, Renders, Reserve};
use crate::metrics::Layer;

/// A drop episode began (the hub dropped a message at the mark, or a
/// conflating queue refused a new key): the actor starts the grace timer.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct Congested;

/// A socket's subscriptions, by channel.
pub(super) type Subs = HashMap<Arc<str>, Sub, foldhash::fast::RandomState>;

/// A subscription as the socket holds it.
#[derive(Debug)]
pub(super) enum Sub {
    /// Waiting for the bridge; live messages are held in `held`.
    Joining { join: u64, held: Vec<Held> },
    /// Acked; the recovered history not yet queued waits in `backlog`
    /// (queued in slices under the mark, `socket/recovery.rs`; from a
    /// cluster's history read a page at a time, `socket/pages.rs`) and live
    /// messages above the position `last` are held behind it.
    /// Boxed: a subscription recovers briefly and is live for the rest of
    /// its life, yet every entry of the socket's map was as large as this
    /// state (about 130 bytes, four entries allocated for one
    /// subscription); a `Sub` is 32 bytes now (issue 42).
    Recovering(Box<Recovering>),
    /// Delivering; the last `seq` sent.
    Live(u64),
}

/// [`Sub::Recovering`]'s state.
#[derive(Debug)]
pub(super) struct Recovering {
    pub(super) backlog: Recovery,
    pub(super) held: Vec<Held>,
    pub(super) last: u64,
}

/// A live message that arrived while its subscription was joining.
#[derive(Debug)]
pub(super) struct Held {
    seq: u64,
    frame: Bytes,
    key: Option<Arc<str>>,
}

impl Held {
    pub(super) fn len(&self) -> usize {
        self.frame.len()
    }

    pub(super) fn into_parts(self) -> (u64, Bytes, Option<Arc<str>>) {
        (self.seq, self.frame, self.key)
    }
}

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
        match subs.get_mut(channel) {
            // Deduplicate by seq: a message already sent as recovered
            // history, or from an earlier subscription, is not resent.
            Some(Sub::Live(last)) if seq > *last && !*closing => {
                *last = seq;
                let congested = self.queue_live(&mut s, channel, frame.clone(), key.cloned());
                Outbox::unlock_and_wake(s);
                if congested {
                    self.control.do_send(Congested);
                }
            }
            Some(Sub::Joining { held, .. }) if !*closing => {
                held.push(Held {
                    seq,
                    frame: frame.clone(),
                    key: key.cloned(),
                });
            }
            // Behind the backlog still to be queued; counted in the gauge
            // (the hub reserved it), so the hub drops at the mark.
            Some(Sub::Recovering(r)) if seq > r.last && !*closing => {
                *held_bytes += frame.len();
                r.held.push(Held {
                    seq,
                    frame: frame.clone(),
                    key: key.cloned(),
                });
            }
            _ => {
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
    pub(super) fn subscriptions(&self, channel: &str) -> (usize, bool) {
        let s = self.lock();
        (s.subs.len(), s.subs.contains_key(channel))
    }

    /// Starts joining `channel` (replacing a subscription to it): live
    /// messages are held until [`Outbox::joined`].
    pub(super) fn joining(&self, channel: &str, join: u64) {
        let mut s = self.lock();
        let old = s.subs.insert(
            channel.into(),
            Sub::Joining {
                join,
                held: Vec::new(),
            },
        );
        if let Some(old) = &old {
            self.release_recovering(&mut s, old);
        }
        drop(s);
        self.release_held(old);
    }

    /// Completes join number `join` of `channel`: the ack (if any) first,
    /// then the recovered history, then what arrived live while joining,
    /// each `seq` once and in order; from then on live messages queue
    /// directly. A join superseded meanwhile (unsubscribed, or subscribed
    /// again) changes nothing: the later operation has the last word.
    pub(super) fn joined(&self, channel: &str, join: u64, ack: Option<Bytes>, joined: Joined) {
        let mut s = self.lock();
        let Some((name, Sub::Joining { join: j, .. })) = s.subs.get_key_value(channel) else {
            return;
        };
        if *j != join {
            return;
        }
        let name = name.clone();
        let held = match s.subs.get_mut(channel) {
            Some(Sub::Joining { held, .. }) => std::mem::take(held),
            _ => Vec::new(),
        };
        if s.closing {
            drop(s);
            self.release_held(Some(Sub::Joining { join, held }));
            return;
        }
        // The ack says where the subscription stands (§11); the backlog is
        // everything after `since`, in order, queued in slices under the
        // mark (`socket/recovery.rs`); live messages then continue above
        // both it and the position the subscription went live at.
        let mut last = joined.position();
        let mut congested = false;
        if let Some(ack) = ack {
            congested |= self.gauge.add_answer(ack.len());
            self.push_reserved(&mut s, ack);
        }
        if !joined.backlog.is_done() {
            let pumped = self.recover(&mut s, name, joined.backlog, held, last);
            Outbox::unlock_and_wake(s);
            self.signal(pumped, None);
            if congested {
                self.control.do_send(Congested);
            }
            return;
        }
        for h in held {
            if h.seq > last {
                last = h.seq;
                congested |= self.queue_live(&mut s, &name, h.frame, h.key);
            } else {
                self.gauge.release(h.frame.len());
            }
        }
        s.subs.insert(name, Sub::Live(last));
        Outbox::unlock_and_wake(s);
        if congested {
            self.control.do_send(Congested);
        }
    }

    /// Leaves `channel`; returns its name if the socket was subscribed.
    pub(super) fn leave(&self, channel: &str) -> Option<Arc<str>> {
        let mut s = self.lock();
        let (name, sub) = s.subs.remove_entry(channel)?;
        self.release_recovering(&mut s, &sub);
        drop(s);
        self.release_held(Some(sub));
        Some(name)
    }

    /// Leaves every channel `keep` refuses; returns their names.
    pub(super) fn leave_unless(&self, keep: impl Fn(&str) -> bool) -> Vec<Arc<str>> {
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
    pub(super) fn leave_all(&self) -> Vec<Arc<str>> {
        let mut s = self.lock();
        let subs = std::mem::take(&mut s.subs);
        for sub in subs.values() {
            self.release_recovering(&mut s, sub);
        }
        drop(s);
        subs.into_iter()
            .map(|(name, sub)| {
                self.release_held(Some(sub));
                name
            })
            .collect()
    }

    /// A recovering subscription left: see [`Outbox::forget_recovery`].
    fn release_recovering(&self, s: &mut Shared, sub: &Sub) {
        if let Sub::Recovering(r) = sub {
            let paged = if r.backlog.source().is_some() {
                r.backlog.ready().1
            } else {
                0
            };
            self.forget_recovery(s, &r.held, paged);
        }
    }

    /// Gives back the gauge bytes of messages a joining subscription held.
    fn release_held(&self, sub: Option<Sub>) {
        if let Some(Sub::Joining { held, .. }) = sub {
            self.gauge.release(held.iter().map(|h| h.frame.len()).sum());
        }
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
    use crate::socket::outbox::{Next, Nudge};

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
        use crate::node::dialect::Outlet;
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
