//! The socket's frames as SSE events (§14). The outbox holds WebSocket
//! frames, encoded once per publish and shared by every subscriber
//! (`protocol::wire`); an SSE stream's writer turns each into its event
//! as it leaves the queue, keeping the stream's position (the `id:` of
//! every event) as it goes:
//!
//! - a message: `id` / `event: message` / `data: {"channel","seq","data"}`
//!   (the frame's JSON without its `"type"`, `"conflated":true` kept); all
//!   but the `id:` is rendered once per frame and worker (`memo.rs`),
//!   and the `id:` too for a stream of that channel alone;
//! - the welcome: `id` / `event: welcome` / the frame as `data`;
//! - a subscription's ack (the stream's own, `socket/actor/sse.rs`): with
//!   `recovered`, an `event: recovered`; with only a `seq`, where a live
//!   subscription started, an `id:` alone (it moves the reader's
//!   `lastEventId` without dispatching an event);
//! - a ping: a `: ping` comment; a close frame: `event: close` with its
//!   code and reason, after which nothing more is written.
//!
//! Other frames (error notices) have no SSE form and are skipped.
//!
//! Events go to an [`Out`]: a buffer that takes a copy of everything (the
//! response body's chunk), or a stream's list of slices, where the shared
//! part of a message is the memo's own bytes, written without a copy
//! (`feed.rs`).

use bytes::{BufMut, Bytes, BytesMut};
use serde::Deserialize;

use super::memo;
use crate::protocol::position::Position;
use crate::protocol::wire;

const OP_TEXT: u8 = 0x1;
const OP_CLOSE: u8 = 0x8;
const OP_PING: u8 = 0x9;
const MESSAGE: &[u8] = br#"{"type":"message","#;
const WELCOME: &[u8] = br#"{"type":"welcome","#;
const ACK: &[u8] = br#"{"type":"ack","#;

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

#[derive(Deserialize)]
struct Ack<'a> {
    #[serde(borrow)]
    id: &'a str,
    seq: Option<u64>,
    recovered: Option<bool>,
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

    /// About the bytes an event takes besides its frame's JSON: its `id:`
    /// line and its other lines.
    pub(super) fn event_hint(&self) -> usize {
        self.position.token_len() + 40
    }

    /// About the bytes of one `id:` line.
    pub(super) fn id_hint(&self) -> usize {
        self.position.token_len() + 8
    }

    /// Appends `frame`'s event (if it has one) to `out`.
    pub(super) fn frame(&mut self, frame: &Bytes, out: &mut impl Out) {
        if self.closed {
            return;
        }
        let Some(first) = frame.first() else { return };
        let json = wire::payload(frame);
        match first & 0x0f {
            OP_PING => out.own().put_slice(b": ping\n\n"),
            OP_CLOSE => self.close(json, out.own()),
            OP_TEXT => self.text(frame, json, out),
            _ => {}
        }
    }

    fn text(&mut self, frame: &Bytes, json: &[u8], out: &mut impl Out) {
        // Nearly every frame is a message the memo holds: it is looked up
        // before anything is parsed.
        if frame.len() <= memo::MAX_FRAME && self.shared(frame, json, out) {
            return;
        }
        if let Some(rest) = json.strip_prefix(MESSAGE) {
            // One the memo does not take (a message it did take but could
            // not read has no event).
            if frame.len() > memo::MAX_FRAME {
                self.message(rest, out.own());
            }
        } else if json.starts_with(WELCOME) {
            self.event(out.own(), "welcome", |out| put_data(out, json));
        } else if json.starts_with(ACK) {
            let Ok(ack) = serde_json::from_slice::<Ack<'_>>(json) else {
                return;
            };
            match (ack.recovered, ack.seq) {
                (Some(recovered), _) => {
                    let data = serde_json::json!({"channel": ack.id, "recovered": recovered});
                    self.event(out.own(), "recovered", |out| {
                        put_data(out, data.to_string().as_bytes())
                    });
                }
                (None, Some(seq)) => {
                    self.position.set(ack.id, seq);
                    let out = out.own();
                    self.id(out);
                    out.put_u8(b'\n');
                }
                (None, None) => {}
            }
        }
    }

    fn close(&mut self, payload: &[u8], out: &mut BytesMut) {
        let code = match payload {
            [a, b, ..] => u16::from_be_bytes([*a, *b]),
            _ => 1000,
        };
        let reason = payload
            .get(2..)
            .map(String::from_utf8_lossy)
            .unwrap_or_default();
        let data = serde_json::json!({"code": code, "reason": reason});
        self.event(out, "close", |out| {
            put_data(out, data.to_string().as_bytes())
        });
        self.closed = true;
    }

    /// A message the memo does not hold, `rest` its JSON after
    /// `{"type":"message",`.
    fn message(&mut self, rest: &[u8], out: &mut BytesMut) {
        let Some((channel, seq)) = channel_seq(rest) else {
            return;
        };
        self.position.set(channel, seq);
        self.event(out, "message", |out| {
            out.put_u8(b'{');
            put_data(out, rest);
        });
    }

    /// A message of at most [`memo::MAX_FRAME`] bytes, its shared lines
    /// from the memo; false when `frame` is not a message.
    fn shared(&mut self, frame: &Bytes, json: &[u8], out: &mut impl Out) -> bool {
        let render = || {
            let rest = json.strip_prefix(MESSAGE)?;
            let (channel, seq) = channel_seq(rest)?;
            let mut event = Vec::with_capacity(rest.len() + 32);
            event.put_slice(b"event: message\ndata: {");
            put_data(&mut event, rest);
            event.put_slice(b"\n\n");
            Some((channel.into(), seq, event))
        };
        memo::with(frame, render, |m| {
            if self.position.set_sole(&m.channel, m.seq) {
                out.share(&m.whole);
            } else {
                self.position.set(&m.channel, m.seq);
                self.id(out.own());
                out.share(&m.event);
            }
        })
        .is_some()
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

/// The channel and `seq` at the start of a message frame's JSON after its
/// `"type"` (`wire::message`'s layout, `"conflated":true,` possibly first).
fn channel_seq(rest: &[u8]) -> Option<(&str, u64)> {
    const CHANNEL: &[u8] = br#""channel":""#;
    const SEQ: &[u8] = br#"","seq":"#;
    let at = rest.windows(CHANNEL.len()).position(|w| w == CHANNEL)? + CHANNEL.len();
    let len = rest[at..].iter().position(|b| *b == b'"')?;
    let channel = std::str::from_utf8(&rest[at..at + len]).ok()?;
    let digits = rest[at + len..].strip_prefix(SEQ)?;
    let end = digits
        .iter()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(digits.len());
    let seq = std::str::from_utf8(&digits[..end]).ok()?.parse().ok()?;
    Some((channel, seq))
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
    use super::*;
    use crate::protocol::CloseCode;

    fn render(r: &mut Render, frame: &Bytes) -> String {
        let mut out = BytesMut::new();
        r.frame(frame, &mut out);
        String::from_utf8(out.to_vec()).unwrap()
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
        let live = render(
            &mut r,
            &wire::ack(
                &serde_json::value::to_raw_value("doc:2").unwrap(),
                Some(40),
                None,
            ),
        );
        assert!(!live.contains("event:"), "an id alone: {live}");
        assert_eq!(id_of(&list, &live).get("doc:2", 0), Some(40));
        let e = render(&mut r, &wire::message("doc:1", 6, r#"{"a":1}"#));
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
        let c = render(&mut r, &wire::conflated(&wire::message("doc:2", 41, "1")));
        assert!(
            c.contains(r#"data: {"conflated":true,"channel":"doc:2","seq":41,"data":1}"#),
            "{c}"
        );
        assert_eq!(id_of(&list, &c).get("doc:2", 0), Some(41));
    }

    #[test]
    fn streams_share_a_frame_and_keep_their_own_ids() {
        let frame = wire::message("doc:s", 7, r#"{"n":"x"}"#);
        let big = wire::message("doc:s", 8, &format!("\"{}\"", "y".repeat(memo::MAX_FRAME)));
        let stream = |list: &'static [&'static str], seqs: &[(&str, u64)]| {
            let mut p = Position::new(list);
            for (c, seq) in seqs {
                p.set(c, *seq);
            }
            (list, Render::new(p))
        };
        // Of the message's channel alone (the memo's whole event, `id:`
        // too), with no seq yet or one; of two channels, in either order.
        let alone = stream(&["doc:s"], &[]);
        let sole = stream(&["doc:s"], &[("doc:s", 2)]);
        let behind = stream(&["doc:s", "doc:t"], &[("doc:t", 3)]);
        let ahead = stream(&["doc:t", "doc:s"], &[("doc:s", 1), ("doc:t", 4)]);
        for (list, mut r) in [alone, behind, ahead, sole] {
            let t = r.position.get("doc:t", 0);
            for f in [&frame, &big, &frame.clone()] {
                let e = render(&mut r, f);
                let data = String::from_utf8(wire::payload(f)[MESSAGE.len()..].to_vec()).unwrap();
                assert!(
                    e.ends_with(&format!("event: message\ndata: {{{data}\n\n")),
                    "{e}"
                );
                let pos = id_of(list, &e);
                let seq = if f.len() > memo::MAX_FRAME { 8 } else { 7 };
                assert_eq!((pos.get("doc:s", 0), pos.get("doc:t", 0)), (Some(seq), t));
                assert_eq!(pos, r.position, "the id is the stream's position");
                assert_eq!(e.lines().next(), Some(&*format!("id: {}", pos.encode())));
            }
        }
    }

    #[test]
    fn line_breaks_in_data_become_data_lines() {
        let mut r = Render::new(Position::new(&["c"]));
        let e = render(&mut r, &wire::message("c", 1, "{\"a\":\n1,\r\"b\":2}"));
        assert!(
            e.contains(
                "data: {\"channel\":\"c\",\"seq\":1,\"data\":{\"a\":\ndata: 1,\ndata: \"b\":2}}\n\n"
            ),
            "{e}"
        );
    }

    #[test]
    fn recovered_ping_and_close() {
        let mut p = Position::new(&["doc:1"]);
        p.set("doc:1", 5);
        let mut r = Render::new(p);
        let id = serde_json::value::to_raw_value("doc:1").unwrap();
        let e = render(&mut r, &wire::ack(&id, Some(9), Some(false)));
        assert!(
            e.contains("event: recovered\ndata: {\"channel\":\"doc:1\",\"recovered\":false}"),
            "{e}"
        );
        assert_eq!(
            id_of(&["doc:1"], &e).get("doc:1", 0),
            Some(5),
            "recovery does not move the position"
        );
        assert_eq!(render(&mut r, &wire::ping(b"")), ": ping\n\n");
        assert!(
            render(
                &mut r,
                &wire::ErrorFrame::new(crate::protocol::ErrorCode::SlowConsumer).encode()
            )
            .is_empty()
        );
        let e = render(
            &mut r,
            &wire::close_because(CloseCode::SlowConsumer, "slow"),
        );
        assert!(
            e.contains("event: close\ndata: {\"code\":4008,\"reason\":\"slow\"}"),
            "{e}"
        );
        assert!(r.closed());
        assert!(render(&mut r, &wire::ping(b"")).is_empty());
    }
}
