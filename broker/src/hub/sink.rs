//! Where the hub hands a subscriber's messages: a WebSocket actor's
//! mailbox or a gRPC `Subscribe` stream's queue.

use std::sync::Arc;

use actix::Recipient;

use super::Deliver;

/// Where the hub hands a subscriber's messages.
#[derive(Clone)]
pub enum Sink {
    /// A WebSocket actor's mailbox.
    Socket(Recipient<Deliver>),
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
    #[inline]
    pub fn do_send(&self, msg: Deliver) {
        match self {
            Sink::Socket(r) => r.do_send(msg),
            Sink::Stream(s) => match msg {
                Deliver::Congested => s.congested.notify_one(),
                m => {
                    // A stream that ended has left the hub or is leaving.
                    let _ = s.messages.send(m);
                }
            },
        }
    }

    /// Whether this sink replaces unsent messages by their conflation key
    /// (a socket's outbox does; a gRPC stream queues, see [`StreamSink`]).
    #[inline]
    pub(super) fn conflates(&self) -> bool {
        matches!(self, Sink::Socket(_))
    }
}

impl From<Recipient<Deliver>> for Sink {
    fn from(r: Recipient<Deliver>) -> Sink {
        Sink::Socket(r)
    }
}
