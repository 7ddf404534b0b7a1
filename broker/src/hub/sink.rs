//! Where the hub hands a subscriber's messages: straight into a WebSocket's
//! outbound queue, or to a subscriber that renders its own (a Pusher
//! subscription, a gRPC `Subscribe` stream).

use std::sync::Arc;

use bytes::Bytes;

use super::{OutboundGauge, Reserve};

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
/// A socket (`socket/outbox/outlet.rs`) is the implementation; the hub does not
/// depend on it.
pub trait DirectSink: Send + Sync {
    /// A message of `channel` whose bytes the hub already reserved in the
    /// subscriber's gauge (lent: a sink that queues or holds the hub's
    /// frame takes its own reference, one that renders its own needs none). `key` is the conflation key on a conflating
    /// channel (§11). The sink queues it, or releases its bytes if the
    /// subscription is gone, not live, or the message is already sent.
    ///
    /// `renders` is what the sinks before this one in the same message's
    /// fan-out rendered of it ([`Renders`]): a sink that re-renders
    /// messages in a format of its own shares its rendering through it; a
    /// socket, which queues the hub's frame as it is, ignores it.
    fn message(
        &self,
        channel: &Arc<str>,
        seq: u64,
        frame: &Bytes,
        key: Option<&Arc<str>>,
        renders: &mut Renders,
    );

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

/// What one message's fan-out lets its sinks share. A sink that renders
/// the message in a format of its own (a GraphQL subscription's `next`,
/// `graphql/ws/sink.rs`) keeps its rendering here under the exact text of
/// everything besides the message that decided it (its key), so every
/// later sink of the same fan-out with the same key takes a reference
/// count instead of rendering again: a `/v1/ws` socket shares the hub's
/// frame the same way.
///
/// Bounded: one lives on the stack of one message's fan-out and is dropped
/// when that fan-out ends, and it keeps at most [`Renders::MAX`]
/// renderings (past that, a sink renders its own). It allocates nothing
/// until a sink keeps something, so a channel of plain sockets pays
/// nothing for it.
///
/// A rendering is kept as an `Arc<Bytes>`: a sink that queues it whole in
/// an entry of its own (a socket queue's pair, `socket/outbox/queue.rs`) holds
/// one pointer per delivery instead of a 32-byte `Bytes`.
#[derive(Debug, Default)]
pub struct Renders {
    entries: Vec<(Arc<[u8]>, Arc<Bytes>)>,
}

impl Renders {
    /// The most renderings kept for one message (distinct keys: distinct
    /// GraphQL selections on one channel, usually one or two).
    pub const MAX: usize = 16;

    /// The rendering kept under `key`, if a sink before kept one.
    #[inline]
    pub fn get(&self, key: &Arc<[u8]>) -> Option<&Arc<Bytes>> {
        self.entries
            .iter()
            .find(|(k, _)| Arc::ptr_eq(k, key) || **k == **key)
            .map(|(_, b)| b)
    }

    /// How many renderings are kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Keeps `rendered` under `key` for the sinks after this one (unless
    /// [`Renders::MAX`] are kept already).
    pub fn keep(&mut self, key: &Arc<[u8]>, rendered: &Arc<Bytes>) {
        if self.entries.len() < Self::MAX {
            self.entries.push((key.clone(), rendered.clone()));
        }
    }
}

/// A subscriber that renders every message in a format of its own (a
/// Pusher subscription's frames, `pusher/sink.rs`; a gRPC stream's
/// `Message`, `grpc/stream_sink.rs`) and counts in its gauge
/// what it queues: its rendering, not the hub's frame.
///
/// Why not a [`DirectSink`]: the hub reserves the hub's frame in the gauge
/// before handing it over, so such a sink had to recount every delivery
/// to the rendered size (one more atomic read-modify-write per delivery,
/// a socket's delivery takes four), and release all of it for a message
/// that is not its subscriber's (a Pusher client event's sender). Here the
/// sink decides first, then reserves once, the right size.
pub trait RenderSink: Send + Sync {
    /// Offers message `seq` of `channel` (`frame`, the hub's encoding).
    /// The sink renders it (sharing its rendering with the rest of the
    /// fan-out through `renders`), reserves the rendering in its gauge
    /// ([`OutboundGauge::try_reserve`](super::OutboundGauge::try_reserve))
    /// and queues it if that says [`Reserve::Queued`], which it returns.
    /// `None`: not for this subscriber (ended, or the message leaves it
    /// out); nothing was reserved.
    fn offer(
        &self,
        channel: &Arc<str>,
        seq: u64,
        frame: &Bytes,
        renders: &mut Renders,
    ) -> Option<Reserve>;

    /// The subscriber crossed its high-water mark and messages are being
    /// dropped (called once per episode).
    fn congested(&self);
}

/// Where the hub hands a subscriber's messages.
#[derive(Clone)]
pub enum Sink {
    /// A WebSocket's outbound queue (see [`DirectSink`]).
    Socket(Arc<dyn DirectSink>),
    /// A subscription that renders and reserves its own frames (see
    /// [`RenderSink`]). It does not conflate: on a conflating channel it
    /// is bounded like a queueing subscriber.
    Render(Arc<dyn RenderSink>),
}

impl Sink {
    /// Hands over a message: reserves the hub's `frame` in `gauge` and
    /// queues it, or drops it at the mark and tells the subscriber so
    /// (and that an episode began, on its first drop) ([`Reserve`]); a
    /// [`RenderSink`] reserves and queues its own rendering instead.
    /// `None`: not for this subscriber, nothing reserved.
    #[inline]
    pub fn deliver(
        &self,
        gauge: &OutboundGauge,
        channel: &Arc<str>,
        seq: u64,
        frame: &Bytes,
        key: Option<&Arc<str>>,
        renders: &mut Renders,
    ) -> Option<Reserve> {
        let reserved = match self {
            Sink::Render(s) => s.offer(channel, seq, frame, renders)?,
            _ => gauge.try_reserve(frame.len()),
        };
        match reserved {
            Reserve::Queued => {
                if !matches!(self, Sink::Render(_)) {
                    self.message(channel, seq, frame, key, renders);
                }
            }
            Reserve::FirstDrop => {
                self.dropped(channel, seq);
                self.congested();
            }
            Reserve::Dropped => self.dropped(channel, seq),
        }
        Some(reserved)
    }

    /// Hands over a message whose bytes are already reserved in the
    /// subscriber's gauge (a [`RenderSink`] never has any reserved for it:
    /// see [`Sink::deliver`]).
    #[inline]
    pub fn message(
        &self,
        channel: &Arc<str>,
        seq: u64,
        frame: &Bytes,
        key: Option<&Arc<str>>,
        renders: &mut Renders,
    ) {
        match self {
            Sink::Socket(s) => s.message(channel, seq, frame, key, renders),
            Sink::Render(_) => {
                debug_assert!(false, "a render sink reserves its own frames");
            }
        }
    }

    /// Tells the subscriber a drop episode began.
    #[inline]
    pub fn congested(&self) {
        match self {
            Sink::Socket(s) => s.congested(),
            Sink::Render(s) => s.congested(),
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
    /// (a socket's outbox does; a [`RenderSink`] queues: a Pusher
    /// subscription, a gRPC stream, whose `Message` has no `conflated`
    /// flag).
    #[inline]
    pub(super) fn conflates(&self) -> bool {
        matches!(self, Sink::Socket(_))
    }
}
