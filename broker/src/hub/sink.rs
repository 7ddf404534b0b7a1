//! Where the hub hands a subscriber's messages: straight into a WebSocket's
//! outbound queue, or into a gRPC `Subscribe` stream's queue.

use std::sync::Arc;

use bytes::Bytes;

use super::Deliver;

/// A subscriber's outbound queue the hub writes into directly, from
/// whichever thread publishes (an actix worker, the cluster bridge, the
/// gRPC runtime), under the channel's lock.
///
/// Why not the socket actor's mailbox: a mailbox send per delivery boxes an
/// envelope, allocates a queue node and wakes the actor's task, which then
/// pushes into the same queue this writes to; at fan-out that was the
/// largest cost per delivery. The actor's mailbox stays for control (a
/// drop episode's start, subscribe, limits, close).
///
/// A socket (`socket/outlet.rs`) is the implementation; the hub does not
/// depend on it.
pub trait DirectSink: Send + Sync {
    /// A message of `channel` whose bytes the hub already reserved in the
    /// subscriber's gauge. `key` is the conflation key on a conflating
    /// channel (§11). The sink queues it, or releases its bytes if the
    /// subscription is gone, not live, or the message is already sent.
    fn message(&self, channel: &Arc<str>, seq: u64, frame: Bytes, key: Option<&Arc<str>>);

    /// The subscriber crossed its high-water mark and messages are being
    /// dropped (called once per episode).
    fn congested(&self);

    /// The hub dropped message `seq` of `channel` for this subscriber (at
    /// its mark, or while its drop episode is not reported yet). A sink
    /// that reports losses per subscription counts them here (a GraphQL
    /// subscription's `SLOW_CONSUMER`); a socket reports its episode's
    /// total and needs nothing.
    fn dropped(&self, _channel: &Arc<str>, _seq: u64) {}
}

/// Where the hub hands a subscriber's messages.
#[derive(Clone)]
pub enum Sink {
    /// A WebSocket's outbound queue (see [`DirectSink`]).
    Socket(Arc<dyn DirectSink>),
    /// A gRPC `Subscribe` stream, which lives on the gRPC server's own
    /// tokio runtime, outside actix (`grpc/subscribe.rs`).
    Stream(StreamSink),
}

/// A gRPC stream's side of [`Sink`]. The queue is unbounded like an actor
/// mailbox and bounded the same way: the hub reserves each message's bytes
/// in the subscriber's [`OutboundGauge`](super::OutboundGauge) first and drops past its mark.
/// That holds on conflating channels too: the gRPC `Message` has no
/// `conflated` flag to tell a consumer that a message replaced others, so
/// a stream gets every message in `seq` order, or a `SlowConsumer` count
/// of what it missed (docs/protocol.md, amendments to §8).
#[derive(Clone, Debug)]
pub struct StreamSink {
    pub messages: tokio::sync::mpsc::UnboundedSender<Deliver>,
    /// Woken on [`Deliver::Congested`], which the stream's guard handles
    /// at once rather than behind the queued messages.
    pub congested: Arc<tokio::sync::Notify>,
}

impl Sink {
    /// Hands over a message whose bytes are already reserved in the
    /// subscriber's gauge.
    #[inline]
    pub fn message(&self, channel: &Arc<str>, seq: u64, frame: &Bytes, key: Option<&Arc<str>>) {
        match self {
            Sink::Socket(s) => s.message(channel, seq, frame.clone(), key),
            Sink::Stream(s) => {
                // A stream that ended has left the hub or is leaving.
                let _ = s.messages.send(Deliver::Message {
                    channel: channel.clone(),
                    seq,
                    frame: frame.clone(),
                    key: key.cloned(),
                });
            }
        }
    }

    /// Tells the subscriber a drop episode began.
    #[inline]
    pub fn congested(&self) {
        match self {
            Sink::Socket(s) => s.congested(),
            Sink::Stream(s) => s.congested.notify_one(),
        }
    }

    /// Tells the subscriber the hub dropped one of its messages.
    #[inline]
    pub fn dropped(&self, channel: &Arc<str>, seq: u64) {
        if let Sink::Socket(s) = self {
            s.dropped(channel, seq);
        }
    }

    /// Whether this sink replaces unsent messages by their conflation key
    /// (a socket's outbox does; a gRPC stream queues, see [`StreamSink`]).
    #[inline]
    pub(super) fn conflates(&self) -> bool {
        matches!(self, Sink::Socket(_))
    }
}
