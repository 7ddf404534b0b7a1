//! The outbox's items as SSE events (§14). The outbox holds what each
//! front renders from (`socket/outbox/item.rs`); an SSE stream's writer
//! turns each item into its event as it leaves the queue, keeping the
//! stream's position (the `id:` of every event) as it goes:
//!
//! - a message: `id` / `event: message` / `data: {"channel","seq","data"}`
//!   (`"conflated":true` first for one that replaced others); all but the
//!   `id:` is rendered once per message and shared by every stream
//!   ([`Published::sse`]), and the `id:` too for a stream of that channel
//!   alone;
//! - the welcome: `id` / `event: welcome` / its JSON as `data`;
//! - a subscription's ack (the stream's own, `socket/actor/sse.rs`): with
//!   `recovered`, an `event: recovered`; with only a `seq`, where a live
//!   subscription started, an `id:` alone (it moves the reader's
//!   `lastEventId` without dispatching an event);
//! - a ping: a `: ping` comment; the close: `event: close` with its code
//!   and reason, after which nothing more is written.
//!
//! What only a WebSocket reads (`Item::Frame`: error notices and the like)
//! has no SSE form and is skipped, by its kind: nothing is decoded.
//!
//! Events go to an [`Out`]: a buffer that takes a copy of everything (the
//! response body's chunk), or a stream's list of slices, where the shared
//! part of a message is the message's own event bytes, written without a
//! copy (`feed.rs`).
//!
//! A message's event (stop 35, `bench/README.md`): a stream of that
//! channel alone (most streams) has as its whole `id:` the position of
//! that channel at the message's `seq` ([`Position::sole_token`]), so the
//! shared rendering keeps the event with its `id:` line too, and such a
//! stream writes it whole: no position is encoded and nothing compared
//! but the channel. A stream of more channels rewrites its channel's field
//! of its own position and writes its `id:`, then the shared lines.

use bytes::{BufMut, Bytes, BytesMut};

use crate::protocol::position::Position;
use crate::socket::outbox::{Control, Item, Neutral, Published, SseEvent};

/// Where events are rendered: the stream's own bytes (`id:` lines, its
/// other events) go to [`Out::own`], a message's shared lines to
/// [`Out::share`].
pub(super) trait Out {
    fn own(&mut self) -> &mut BytesMut;
    fn share(&mut self, bytes: &Bytes);
}

/// One buffer: the shared lines are copied in.
impl Out for BytesMut {
    fn own(&mut self) -> &mut BytesMut {
        self
    }

    fn share(&mut self, bytes: &Bytes) {
        self.put_slice(bytes);
    }
}

/// One stream's rendering state.
pub(super) struct Render {
    position: Position,
    closed: bool,
}

impl Render {
    pub(super) fn new(position: Position) -> Render {
        Render {
            position,
            closed: false,
        }
    }

    /// Whether the close event was written (the stream is over).
    pub(super) fn closed(&self) -> bool {
        self.closed
    }

    /// About the bytes an event takes besides its item's JSON: its `id:`
    /// line and its other lines.
    pub(super) fn event_hint(&self) -> usize {
        self.position.token_len() + 40
    }

    /// About the bytes of one `id:` line.
    pub(super) fn id_hint(&self) -> usize {
        self.position.token_len() + 8
    }

    /// Appends `item`'s event (if it has one) to `out`.
    pub(super) fn item(&mut self, item: &Item, out: &mut impl Out) {
        if self.closed {
            return;
        }
        let Item::Neutral(n) = item else {
            // Only a WebSocket reads it.
            return;
        };
        match n {
            Neutral::Message(m) => self.shared(m, out),
            Neutral::Conflated(m) => {
                self.position.set(&m.channel, m.seq);
                self.event(out.own(), "message", |out| put_message(out, m, true));
            }
            Neutral::Ping => out.own().put_slice(b": ping\n\n"),
            Neutral::Control(c) => self.control(c, out.own()),
            Neutral::Gone => {}
        }
    }

    fn control(&mut self, control: &Control, out: &mut BytesMut) {
        match control {
            Control::Welcome(json) => self.event(out, "welcome", |out| put_data(out, json)),
            Control::Ack {
                channel,
                seq,
                recovered,
                ..
            } => match (recovered, seq) {
                (Some(recovered), _) => {
                    let data = serde_json::json!({"channel": &**channel, "recovered": recovered});
                    self.event(out, "recovered", |out| {
                        put_data(out, data.to_string().as_bytes())
                    });
                }
                (None, Some(seq)) => {
                    self.position.set(channel, *seq);
                    self.id(out);
                    out.put_u8(b'\n');
                }
                (None, None) => {}
            },
            Control::Close { code, reason } => {
                let data = serde_json::json!({"code": code.unwrap_or(1000), "reason": reason});
                self.event(out, "close", |out| {
                    put_data(out, data.to_string().as_bytes())
                });
                self.closed = true;
            }
        }
    }

    /// A message, its shared lines rendered once per message.
    fn shared(&mut self, m: &Published, out: &mut impl Out) {
        let e = m.sse(render);
        if self.position.set_sole(&m.channel, m.seq) {
            out.share(&e.whole);
        } else {
            self.position.set(&m.channel, m.seq);
            self.id(out.own());
            out.share(&e.event);
        }
    }

    fn id(&self, out: &mut BytesMut) {
        out.put_slice(b"id: ");
        self.position.encode_into(out);
        out.put_u8(b'\n');
    }

    fn event(&mut self, out: &mut BytesMut, name: &str, data: impl FnOnce(&mut BytesMut)) {
        self.id(out);
        out.put_slice(b"event: ");
        out.put_slice(name.as_bytes());
        out.put_slice(b"\ndata: ");
        data(out);
        out.put_slice(b"\n\n");
    }
}

/// A message's event, shared by every stream ([`Published::sse`]): the
/// `id:` of a stream of its channel alone, then the event.
fn render(m: &Published) -> SseEvent {
    let mut token = String::new();
    Position::sole_token(&m.channel, m.seq, &mut token);
    let capacity = token.len() + m.channel.len() + m.data().len() + 80;
    let mut whole = BytesMut::with_capacity(capacity);
    whole.put_slice(b"id: ");
    whole.put_slice(token.as_bytes());
    whole.put_u8(b'\n');
    let id_len = whole.len();
    whole.put_slice(b"event: message\ndata: ");
    put_message(&mut whole, m, false);
    whole.put_slice(b"\n\n");
    let whole = whole.freeze();
    SseEvent {
        event: whole.slice(id_len..),
        whole,
    }
}

/// A message's JSON as an SSE stream carries it (a WebSocket's without its
/// `"type"`): `{"channel":…,"seq":…,"data":…}`, `"conflated":true` first
/// for one that replaced others; the data in `data:` lines.
fn put_message(out: &mut impl BufMut, m: &Published, conflated: bool) {
    out.put_u8(b'{');
    if conflated {
        out.put_slice(br#""conflated":true,"#);
    }
    // Channel names are validated to a charset that needs no escaping.
    out.put_slice(br#""channel":""#);
    out.put_slice(m.channel.as_bytes());
    out.put_slice(br#"","seq":"#);
    out.put_slice(itoa::Buffer::new().format(m.seq).as_bytes());
    out.put_slice(br#","data":"#);
    put_data(out, m.data());
    out.put_u8(b'}');
}

/// Copies JSON into `data:` lines: a line break (only ever whitespace
/// between JSON tokens, as a publisher may send it) starts a new `data:`
/// line, which the reader joins back with `\n`.
fn put_data(out: &mut impl BufMut, json: &[u8]) {
    let mut rest = json;
    while let Some(i) = rest.iter().position(|b| *b == b'\n' || *b == b'\r') {
        out.put_slice(&rest[..i]);
        out.put_slice(b"\ndata: ");
        rest = &rest[i + 1..];
    }
    out.put_slice(rest);
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::protocol::wire;

    fn write(r: &mut Render, item: &Item) -> String {
        let mut out = BytesMut::new();
        r.item(item, &mut out);
        String::from_utf8(out.to_vec()).unwrap()
    }

    fn published(channel: &str, seq: u64, data: &str) -> Arc<Published> {
        let frame = wire::message(channel, seq, data);
        Arc::new(Published::new(channel.into(), seq, frame))
    }

    fn msg(channel: &str, seq: u64, data: &str) -> Item {
        Item::message(published(channel, seq, data))
    }

    fn ack(channel: &str, seq: Option<u64>, recovered: Option<bool>) -> Item {
        let id = serde_json::value::to_raw_value(channel).unwrap();
        Item::ack(&id, channel, seq, recovered)
    }

    /// The position in `event`'s `id:`, of a stream of `list` (read with
    /// `get(_, 0)`: these small seqs are their own residues).
    fn id_of(list: &[&str], event: &str) -> Position {
        let line = event.lines().find_map(|l| l.strip_prefix("id: ")).unwrap();
        Position::resume(list, line).unwrap()
    }

    #[test]
    fn messages_carry_the_position_of_every_channel() {
        let list = ["doc:1", "doc:2"];
        let mut p = Position::new(&list);
        p.set("doc:1", 5);
        let mut r = Render::new(p);
        let live = write(&mut r, &ack("doc:2", Some(40), None));
        assert!(!live.contains("event:"), "an id alone: {live}");
        assert_eq!(id_of(&list, &live).get("doc:2", 0), Some(40));
        let e = write(&mut r, &msg("doc:1", 6, r#"{"a":1}"#));
        assert!(
            e.ends_with(
                "event: message\ndata: {\"channel\":\"doc:1\",\"seq\":6,\"data\":{\"a\":1}}\n\n"
            ),
            "{e}"
        );
        let pos = id_of(&list, &e);
        assert_eq!(
            (pos.get("doc:1", 0), pos.get("doc:2", 0)),
            (Some(6), Some(40))
        );
        let c = write(
            &mut r,
            &Item::message(published("doc:2", 41, "1")).conflated(),
        );
        assert!(
            c.contains(r#"data: {"conflated":true,"channel":"doc:2","seq":41,"data":1}"#),
            "{c}"
        );
        assert_eq!(id_of(&list, &c).get("doc:2", 0), Some(41));
    }

    #[test]
    fn streams_share_a_message_and_keep_their_own_ids() {
        let small = published("doc:s", 7, r#"{"n":"x"}"#);
        let big = published("doc:s", 8, &format!("\"{}\"", "y".repeat(5000)));
        let stream = |list: &'static [&'static str], seqs: &[(&str, u64)]| {
            let mut p = Position::new(list);
            for (c, seq) in seqs {
                p.set(c, *seq);
            }
            (list, Render::new(p))
        };
        // Of the message's channel alone (the shared whole event, `id:`
        // too), with no seq yet or one; of two channels, in either order.
        let alone = stream(&["doc:s"], &[]);
        let sole = stream(&["doc:s"], &[("doc:s", 2)]);
        let behind = stream(&["doc:s", "doc:t"], &[("doc:t", 3)]);
        let ahead = stream(&["doc:t", "doc:s"], &[("doc:s", 1), ("doc:t", 4)]);
        for (list, mut r) in [alone, behind, ahead, sole] {
            let t = r.position.get("doc:t", 0);
            for m in [&small, &big, &small] {
                let e = write(&mut r, &Item::message(m.clone()));
                let json = wire::payload(&m.frame);
                let data = std::str::from_utf8(&json[r#"{"type":"message","#.len()..]).unwrap();
                assert!(
                    e.ends_with(&format!("event: message\ndata: {{{data}\n\n")),
                    "{e}"
                );
                let pos = id_of(list, &e);
                assert_eq!((pos.get("doc:s", 0), pos.get("doc:t", 0)), (Some(m.seq), t));
                assert_eq!(pos, r.position, "the id is the stream's position");
                assert_eq!(e.lines().next(), Some(&*format!("id: {}", pos.encode())));
            }
        }
        let e = small.sse(|_| unreachable!("rendered once per message"));
        assert!(e.whole.ends_with(&e.event));
    }

    #[test]
    fn line_breaks_in_data_become_data_lines() {
        let mut r = Render::new(Position::new(&["c"]));
        let e = write(&mut r, &msg("c", 1, "{\"a\":\n1,\r\"b\":2}"));
        assert!(
            e.contains(
                "data: {\"channel\":\"c\",\"seq\":1,\"data\":{\"a\":\ndata: 1,\ndata: \"b\":2}}\n\n"
            ),
            "{e}"
        );
    }

    #[test]
    fn welcome_recovered_ping_and_close() {
        let mut p = Position::new(&["doc:1"]);
        p.set("doc:1", 5);
        let mut r = Render::new(p);
        let w = write(
            &mut r,
            &Item::welcome(Bytes::from_static(br#"{"type":"welcome"}"#)),
        );
        assert!(
            w.ends_with("event: welcome\ndata: {\"type\":\"welcome\"}\n\n"),
            "{w}"
        );
        let e = write(&mut r, &ack("doc:1", Some(9), Some(false)));
        assert!(
            e.contains("event: recovered\ndata: {\"channel\":\"doc:1\",\"recovered\":false}"),
            "{e}"
        );
        assert_eq!(
            id_of(&["doc:1"], &e).get("doc:1", 0),
            Some(5),
            "recovery does not move the position"
        );
        assert_eq!(write(&mut r, &Item::PING), ": ping\n\n");
        let error = wire::ErrorFrame::new(crate::protocol::ErrorCode::SlowConsumer).encode();
        assert!(write(&mut r, &Item::Frame(error)).is_empty());
        let e = write(&mut r, &Item::close(Some(4008), "slow"));
        assert!(
            e.contains("event: close\ndata: {\"code\":4008,\"reason\":\"slow\"}"),
            "{e}"
        );
        assert!(r.closed());
        assert!(write(&mut r, &Item::PING).is_empty());
        let mut echo = Render::new(Position::new(&["doc:1"]));
        let e = write(&mut echo, &Item::close(None, ""));
        assert!(e.contains("data: {\"code\":1000,\"reason\":\"\"}"), "{e}");
    }
}
