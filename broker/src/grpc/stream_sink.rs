//! A `Subscribe` stream as the hub's subscriber: one session
//! [`Subscription`] per channel, kept under one lock the hub's delivery
//! and the stream's reader share, and a queue of the messages it decided
//! to send, which tonic takes in order.
//!
//! The stream does not conflate (the gRPC `Message` has no `conflated`
//! flag to tell a consumer that a message replaced others), so it is a
//! [`RenderSink`]: it reserves the hub's frame in its own gauge and drops
//! past the mark, and a consumer gets every message in `seq` order, or a
//! `SlowConsumer` count of what it missed (docs/protocol.md, amendments to
//! §8). A message is converted to its `Message` only as tonic takes it
//! ([`Grpc`]), so what waits is the hub's frames, shared, not copies.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::{Notify, mpsc};

use super::proto::subscribe_event::Event;
use super::proto::{Message, SubscribeEvent};
use crate::hub::{OutboundGauge, RenderSink, Renders, Reserve};
use crate::protocol::wire;
use crate::session::{Offer, Render, Subscription};

/// The stream's subscriptions by channel: at most the plan's
/// `max_subscriptions` (the call's channels, checked before joining).
pub(super) type Subs = Arc<Mutex<HashMap<Arc<str>, Subscription>>>;

/// A message the stream's subscription decided to send; its bytes are
/// counted in the stream's gauge until tonic takes it.
pub(super) struct Queued {
    pub channel: Arc<str>,
    pub seq: u64,
    pub frame: Bytes,
}

/// The hub's side of a `Subscribe` stream. The queue is unbounded like an
/// actor mailbox and bounded the same way: everything in it is reserved
/// in the stream's gauge first, which drops past its mark.
pub(super) struct StreamSink {
    pub subs: Subs,
    pub live: mpsc::UnboundedSender<Queued>,
    /// Woken at a drop episode's start, which the stream's guard handles
    /// at once rather than behind the queued messages.
    pub congested: Arc<Notify>,
    pub gauge: Arc<OutboundGauge>,
}

impl RenderSink for StreamSink {
    fn offer(
        &self,
        channel: &Arc<str>,
        seq: u64,
        frame: &Bytes,
        _: &mut Renders,
    ) -> Option<Reserve> {
        let mut subs = self.subs.lock();
        let sub = subs.get_mut(channel)?;
        let reserved = self.gauge.try_reserve(frame.len());
        if reserved != Reserve::Queued {
            return Some(reserved);
        }
        match sub.offer(seq, frame, None) {
            Offer::Deliver => {
                sub.queued(seq);
                // A stream that ended has left the hub or is leaving.
                let _ = self.live.send(Queued {
                    channel: channel.clone(),
                    seq,
                    frame: frame.clone(),
                });
            }
            Offer::Held => {}
            Offer::Release => {
                self.gauge.release(frame.len());
            }
        }
        Some(reserved)
    }

    fn congested(&self) {
        self.congested.notify_one();
    }
}

/// How a `Subscribe` stream says a message: the gRPC `Message`.
pub(super) struct Grpc;

impl Render for Grpc {
    type Out = SubscribeEvent;

    fn render(&self, channel: &str, seq: u64, frame: &Bytes) -> SubscribeEvent {
        let data = wire::message_data(frame, channel, seq);
        event(Event::Message(Message {
            channel: channel.to_owned(),
            seq,
            // Published data was checked to be UTF-8 JSON on the way in.
            data_json: String::from_utf8_lossy(&data).into_owned(),
        }))
    }
}

pub(super) fn event(e: Event) -> SubscribeEvent {
    SubscribeEvent { event: Some(e) }
}
