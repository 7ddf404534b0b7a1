//! What the outbox queues: what each front renders from (issue 42), not
//! the bytes of one front that another must decode.
//!
//! A published message is queued as the hub's message itself
//! ([`Published`]: channel, `seq`, the hub's frame), made once per
//! fan-out and shared by every socket of it (a reference count and a
//! queue push per subscriber, as the shared frame was). The WebSocket
//! writer writes its frame as it is (`socket/transport.rs`); an SSE stream
//! renders its event from the channel, the `seq` and the data, once per
//! message ([`Published::sse`]), then writes its own `id:`
//! (`socket/sse/render.rs`). The socket's control items an SSE stream has
//! a form for (the welcome, a subscription's ack, a ping, the close) are
//! queued as what they say ([`Control`]), each front writing its own
//! form. What only a WebSocket reads (a dialect's frames, presence, the
//! answers SSE has no event for: errors, budgets, a publish's ack) is
//! queued as that WebSocket frame ([`Item::Frame`]), which an SSE stream
//! skips by its kind, without reading it.
//!
//! The gauge counts every item as the bytes a WebSocket writes for it
//! ([`Item::len`], exact: the WebSocket writer's rendering is that long).
//! An SSE stream's event is a different length (its `id:` depends on the
//! stream's position), so a stream's items are counted at that size
//! until they are rendered into the body's chunk: the mark bounds what a
//! stream holds unrendered, as for a socket.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;

use crate::protocol::wire;

/// One message as the hub fanned it out: made once per fan-out (the hub's
/// [`crate::hub::Renders::shared`]), shared by every subscribed socket.
pub struct Published {
    pub(in crate::socket) channel: Arc<str>,
    pub(in crate::socket) seq: u64,
    /// The hub's frame (a WebSocket text frame, `wire::message`'s layout),
    /// shared as it is by every WebSocket subscriber.
    pub(in crate::socket) frame: Bytes,
    /// Its SSE event, made by the first stream that writes it.
    sse: OnceLock<SseEvent>,
}

/// A message's SSE event: everything but a stream's `id:` line, rendered
/// once per message and shared by the streams that write it.
pub struct SseEvent {
    /// `id: <Position::sole_token>`, then the event: the whole event of a
    /// stream of this channel alone (most streams).
    pub(in crate::socket) whole: Bytes,
    /// `event: message` and the `data:` lines up to the blank line: a
    /// slice of `whole`, after a stream's own `id:`.
    pub(in crate::socket) event: Bytes,
}

impl Published {
    pub(in crate::socket) fn new(channel: Arc<str>, seq: u64, frame: Bytes) -> Published {
        Published {
            channel,
            seq,
            frame,
            sse: OnceLock::new(),
        }
    }

    /// The message's `data`, verbatim (found by the lengths of what
    /// precedes it, not by a search).
    pub(in crate::socket) fn data(&self) -> &[u8] {
        wire::message_data_slice(&self.frame, &self.channel, self.seq)
    }

    /// Its SSE event, made by `render` once per message.
    pub(in crate::socket) fn sse(&self, render: impl FnOnce(&Published) -> SseEvent) -> &SseEvent {
        self.sse.get_or_init(|| render(self))
    }
}

/// One entry of the outbox's queue: a frame only a WebSocket reads, or
/// what every front renders in its own form. Two kinds, not one flat
/// enum: a frame's `Bytes` has room (its one niche) for the tag of one
/// other kind only, and so an item is 32 bytes and a queue entry stays 48
/// (`queue.rs`).
pub enum Item {
    /// A WebSocket frame that only a WebSocket reads (or a part of one:
    /// `queue.rs`'s frames in parts).
    Frame(Bytes),
    /// What every front renders.
    Neutral(Neutral),
}

/// What every front renders in its own form.
pub enum Neutral {
    /// A published message, shared with the other subscribers.
    Message(Arc<Published>),
    /// The same, having replaced unsent ones with its key (§11): it says
    /// `"conflated":true`, rendered by each writer.
    Conflated(Arc<Published>),
    /// One of the socket's control items.
    Control(Box<Control>),
    /// A ping (the heartbeat; a comment on an SSE stream).
    Ping,
    /// A tombstone: an entry replaced in place (`queue.rs`).
    Gone,
}

/// What a control item says.
pub enum Control {
    /// The welcome's JSON (§1).
    Welcome(Bytes),
    /// A subscription's ack: `json` is the `ack` a WebSocket sends (its
    /// client's `id`), the rest what an SSE stream reads of it.
    Ack {
        json: Bytes,
        channel: Arc<str>,
        seq: Option<u64>,
        recovered: Option<bool>,
    },
    /// A close: its code (none: an echo of a close without one) and
    /// reason (at most 123 bytes).
    Close { code: Option<u16>, reason: Box<str> },
}

const _: () = assert!(std::mem::size_of::<Item>() == 32);

/// The conflation flag a conflated message carries after `{"type":"message",`.
const CONFLATED: usize = r#""conflated":true,"#.len();

impl Item {
    /// A ping.
    pub(in crate::socket) const PING: Item = Item::Neutral(Neutral::Ping);
    /// A tombstone.
    pub(in crate::socket) const GONE: Item = Item::Neutral(Neutral::Gone);

    /// A published message.
    #[inline]
    pub(in crate::socket) fn message(m: Arc<Published>) -> Item {
        Item::Neutral(Neutral::Message(m))
    }

    fn control(c: Control) -> Item {
        Item::Neutral(Neutral::Control(Box::new(c)))
    }

    /// The welcome, its JSON.
    pub(in crate::socket) fn welcome(json: Bytes) -> Item {
        Item::control(Control::Welcome(json))
    }

    /// A subscription's ack of `channel`, with the client's `id` (an SSE
    /// stream's names the channel).
    pub(in crate::socket) fn ack(
        id: &serde_json::value::RawValue,
        channel: &str,
        seq: Option<u64>,
        recovered: Option<bool>,
    ) -> Item {
        Item::control(Control::Ack {
            json: wire::ack_json(id, seq, recovered),
            channel: channel.into(),
            seq,
            recovered,
        })
    }

    /// A close with `code` and `reason` (cut at 123 bytes, RFC 6455's room).
    pub(in crate::socket) fn close(code: Option<u16>, reason: &str) -> Item {
        let reason = wire::close_reason(reason);
        Item::control(Control::Close {
            code,
            reason: reason.into(),
        })
    }

    /// The bytes a WebSocket writes for this item: what the gauge counts.
    #[inline]
    pub(in crate::socket) fn len(&self) -> usize {
        let n = match self {
            Item::Frame(f) => return f.len(),
            Item::Neutral(n) => n,
        };
        match n {
            Neutral::Message(m) => m.frame.len(),
            Neutral::Conflated(m) => {
                wire::text_frame_len(wire::payload(&m.frame).len() + CONFLATED)
            }
            Neutral::Control(c) => match &**c {
                Control::Welcome(json) | Control::Ack { json, .. } => {
                    wire::text_frame_len(json.len())
                }
                Control::Close { code: None, .. } => 2,
                Control::Close { reason, .. } => 4 + reason.len(),
            },
            Neutral::Ping => 2,
            Neutral::Gone => 0,
        }
    }

    /// A tombstone (nothing to write).
    #[inline]
    pub(in crate::socket) fn is_gone(&self) -> bool {
        matches!(self, Item::Neutral(Neutral::Gone))
    }

    /// The item that replaces unsent ones with its key (§11): a message
    /// says so in its own field, a dialect's frame in its own way
    /// ([`wire::conflated`]).
    pub(in crate::socket) fn conflated(self) -> Item {
        match self {
            Item::Neutral(Neutral::Message(m) | Neutral::Conflated(m)) => {
                Item::Neutral(Neutral::Conflated(m))
            }
            Item::Frame(f) => Item::Frame(wire::conflated(&f)),
            other => other,
        }
    }

    /// The WebSocket frame of this item (a message's shared frame, not a
    /// copy; a tombstone's is empty).
    pub(in crate::socket) fn ws_frame(self) -> Bytes {
        let n = match self {
            Item::Frame(f) => return f,
            Item::Neutral(n) => n,
        };
        match n {
            Neutral::Message(m) => m.frame.clone(),
            Neutral::Conflated(m) => wire::conflated(&m.frame),
            Neutral::Control(c) => match *c {
                Control::Welcome(json) | Control::Ack { json, .. } => wire::text(&json),
                Control::Close { code: None, .. } => wire::close_echo(None),
                Control::Close {
                    code: Some(code),
                    reason,
                } => wire::close_with(code, &reason),
            },
            Neutral::Ping => wire::ping(b""),
            Neutral::Gone => Bytes::new(),
        }
    }
}

/// A frame only a WebSocket reads.
impl From<Bytes> for Item {
    fn from(frame: Bytes) -> Item {
        Item::Frame(frame)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The gauge's count of every kind of item is what a WebSocket writes.
    #[test]
    fn an_items_length_is_its_websocket_frames() {
        let id = serde_json::value::RawValue::from_string("7".into()).unwrap();
        let msg = |data: &str| {
            Arc::new(Published::new(
                "doc:1".into(),
                9,
                wire::message("doc:1", 9, data),
            ))
        };
        let mut items = vec![
            Item::PING,
            Item::close(None, ""),
            Item::close(Some(4008), "slow"),
            Item::close(Some(1000), &"r".repeat(200)),
            Item::welcome(Bytes::from(vec![b'x'; 130])),
            Item::ack(&id, "doc:1", Some(5), None),
            Item::Frame(wire::ping(b"p")),
        ];
        // Around the header's thresholds, conflated or not.
        for n in [90, 100, 107, 108, 109, 110, 65_490, 65_500, 65_520] {
            items.push(Item::message(msg(&"1".repeat(n))));
            items.push(Item::message(msg(&"1".repeat(n))).conflated());
        }
        for item in items {
            let len = item.len();
            assert_eq!(item.ws_frame().len(), len);
        }
    }
}
