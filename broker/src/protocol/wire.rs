//! Server → client frames (§3), produced as complete WebSocket frames.
//!
//! A server frame is unmasked, so its bytes are the same for every
//! receiver: a published message is encoded here once and the resulting
//! [`Bytes`] is shared (reference-counted, never copied) by every
//! subscriber's outbox.

use bytes::{BufMut, Bytes, BytesMut};
use serde::Serialize;
use serde_json::value::RawValue;

use super::ErrorCode;
pub use super::acks::{ack, published_ack, refresh_ack};
use super::codes::CloseCode;
pub use super::hook_frames::{WelcomeChannel, expiry, rpc_reply};

const OP_TEXT: u8 = 0x1;
const OP_CLOSE: u8 = 0x8;
const OP_PING: u8 = 0x9;
const OP_PONG: u8 = 0xA;
/// Room reserved in front of the payload for the largest frame header.
const HEAD: usize = 10;

/// Builds one final frame with `opcode` whose payload `write` appends.
fn frame(opcode: u8, capacity: usize, write: impl FnOnce(&mut BytesMut)) -> Bytes {
    let mut buf = BytesMut::with_capacity(HEAD + capacity);
    buf.put_bytes(0, HEAD);
    write(&mut buf);
    let len = buf.len() - HEAD;
    let mut head = [0u8; HEAD];
    head[0] = 0x80 | opcode;
    let n = if len < 126 {
        head[1] = len as u8;
        2
    } else if len <= usize::from(u16::MAX) {
        head[1] = 126;
        head[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        4
    } else {
        head[1] = 127;
        head[2..10].copy_from_slice(&(len as u64).to_be_bytes());
        10
    };
    buf[HEAD - n..HEAD].copy_from_slice(&head[..n]);
    buf.freeze().split_off(HEAD - n)
}

/// A text frame holding `value` as JSON (other frame modules use it).
pub(crate) fn json_text<T: Serialize>(value: &T) -> Bytes {
    json_frame(value)
}

pub(super) fn json_frame<T: Serialize>(value: &T) -> Bytes {
    frame(OP_TEXT, 96, |buf| {
        // Writing our own plain structs into memory cannot fail.
        let _ = serde_json::to_writer(buf.writer(), value);
    })
}

/// `{"type":"message","channel":…,"seq":…,"data":…}`, with `data` copied
/// verbatim from the publisher's frame. Channel names are validated to a
/// charset that needs no JSON escaping.
pub fn message(channel: &str, seq: u64, data: &str) -> Bytes {
    frame(OP_TEXT, 48 + channel.len() + data.len(), |buf| {
        buf.put_slice(br#"{"type":"message","channel":""#);
        buf.put_slice(channel.as_bytes());
        buf.put_slice(br#"","seq":"#);
        let mut n = itoa::Buffer::new();
        buf.put_slice(n.format(seq).as_bytes());
        buf.put_slice(br#","data":"#);
        buf.put_slice(data.as_bytes());
        buf.put_u8(b'}');
    })
}

/// The `data` of a message frame built by [`message`] (or by the
/// cluster's publish script, which writes the same layout): the bytes
/// after `"data":` up to the closing brace, without copying. Empty if the
/// frame is not one of those (never the case for what the hub delivers).
pub fn message_data(frame: &Bytes, channel: &str, seq: u64) -> Bytes {
    let data = message_data_slice(frame, channel, seq);
    if data.is_empty() {
        return Bytes::new();
    }
    frame.slice_ref(data)
}

/// [`message_data`] borrowed (no reference count taken): for a reader that
/// copies the data anyway.
pub fn message_data_slice<'a>(frame: &'a [u8], channel: &str, seq: u64) -> &'a [u8] {
    let header = match frame.get(1).map(|b| b & 0x7f) {
        Some(126) => 4,
        Some(127) => 10,
        Some(_) => 2,
        None => return &[],
    };
    let digits = seq.checked_ilog10().map_or(1, |d| d as usize + 1);
    let head = r#"{"type":"message","channel":""#.len()
        + channel.len()
        + r#"","seq":"#.len()
        + digits
        + r#","data":"#.len();
    let start = header + head;
    if frame.len() < start + 1 {
        return &[];
    }
    &frame[start..frame.len() - 1]
}

/// A text frame around an already-encoded JSON payload (a message that
/// arrived from the cluster: framed once per node, shared by its sockets).
pub fn text(payload: &[u8]) -> Bytes {
    frame(OP_TEXT, payload.len(), |buf| buf.put_slice(payload))
}

/// The payload of a frame this module built (after its 2-, 4- or 10-byte
/// header; server frames are never masked).
pub fn payload(frame: &[u8]) -> &[u8] {
    let head = match frame.get(1).map(|b| b & 0x7f) {
        Some(126) => 4,
        Some(127) => 10,
        Some(_) => 2,
        None => return &[],
    };
    frame.get(head..).unwrap_or(&[])
}

/// A message frame marked `"conflated":true` (§11: it replaced unsent
/// messages with the same key, so a `seq` gap before it is expected).
/// Built per socket, only when a replacement happens. A GraphQL `next`
/// message (`{"type":"next","id":..,"payload":{..}}`) is marked in its
/// payload's `extensions` instead, where a GraphQL client reads it.
pub fn conflated(message: &[u8]) -> Bytes {
    const TYPE: &[u8] = br#"{"type":"message","#;
    const NEXT: &[u8] = br#"{"type":"next","#;
    const PAYLOAD: &[u8] = br#""payload":{"#;
    const EXTENSIONS: &[u8] = br#""extensions":{"#;
    let json = payload(message);
    let (at, flag): (usize, &[u8]) = if json.starts_with(TYPE) {
        (TYPE.len(), br#""conflated":true,"#)
    } else if json.starts_with(NEXT)
        && let Some(p) = find(json, PAYLOAD)
    {
        // The id before it is a JSON string: its quotes are escaped, so
        // the first `"payload":{` is the payload's.
        let inside = p + PAYLOAD.len();
        if json[inside..].starts_with(EXTENSIONS) {
            (inside + EXTENSIONS.len(), br#""conflated":true,"#)
        } else {
            (inside, br#""extensions":{"conflated":true},"#)
        }
    } else {
        (1, br#""conflated":true,"#)
    };
    let at = at.min(json.len());
    frame(OP_TEXT, json.len() + flag.len(), |buf| {
        buf.put_slice(&json[..at]);
        buf.put_slice(flag);
        buf.put_slice(&json[at..]);
    })
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

pub fn close(code: CloseCode) -> Bytes {
    close_because(code, code.reason())
}

/// A close frame with its own reason (≤ 123 bytes), for codes whose reason
/// varies (4003: `disconnected` or `banned`).
pub fn close_because(code: CloseCode, reason: &str) -> Bytes {
    close_with(code.code(), reason)
}

/// A close frame with any code (another protocol's, such as
/// `graphql-transport-ws`'s 4400–4429) and a reason of at most 123 bytes.
pub fn close_with(code: u16, reason: &str) -> Bytes {
    let mut end = reason.len().min(123);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    let reason = &reason[..end];
    frame(OP_CLOSE, 2 + reason.len(), |buf| {
        buf.put_u16(code);
        buf.put_slice(reason.as_bytes());
    })
}

/// Writes the header of an unmasked, final text frame whose payload is
/// `len` bytes, for a frame sent in parts (the header, then the payload's
/// pieces as separate buffers: a message's shared bytes are not copied).
pub fn put_text_header(buf: &mut BytesMut, len: usize) {
    buf.put_u8(0x80 | OP_TEXT);
    if len < 126 {
        buf.put_u8(len as u8);
    } else if len <= usize::from(u16::MAX) {
        buf.put_u8(126);
        buf.put_u16(len as u16);
    } else {
        buf.put_u8(127);
        buf.put_u64(len as u64);
    }
}

/// Echo of a client's close frame (code only, as RFC 6455 §5.5.1 allows).
pub fn close_echo(code: Option<u16>) -> Bytes {
    frame(OP_CLOSE, 2, |buf| {
        if let Some(c) = code {
            buf.put_u16(c);
        }
    })
}

pub fn ping(payload: &[u8]) -> Bytes {
    frame(OP_PING, payload.len(), |buf| buf.put_slice(payload))
}

pub fn pong(payload: &[u8]) -> Bytes {
    frame(OP_PONG, payload.len(), |buf| buf.put_slice(payload))
}

/// The limits advertised in `welcome` so clients can pace themselves.
/// Rates and the account burst can be fractional (a node's share during an
/// outage); whole values are written as integers.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WelcomeLimits {
    #[serde(serialize_with = "number")]
    pub messages_per_sec: f64,
    pub burst: u32,
    pub max_payload_bytes: usize,
    pub max_subscriptions: u32,
    #[serde(serialize_with = "number")]
    pub account_messages_per_sec: f64,
    #[serde(serialize_with = "number")]
    pub account_burst: f64,
    pub max_connections: u32,
}

/// Writes whole numbers as JSON integers (`100`, not `100.0`).
fn number<S: serde::Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    if v.fract() == 0.0 && v.abs() < 9e15 {
        s.serialize_i64(*v as i64)
    } else {
        s.serialize_f64(*v)
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Welcome<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    conn_id: &'a str,
    account: &'a str,
    node: &'a str,
    limits: &'a WelcomeLimits,
    /// The token's `exp` in unix ms (§2): refresh before it.
    token_expires_at: u64,
    /// A connect hook's server-side subscriptions (§15).
    #[serde(skip_serializing_if = "Option::is_none")]
    channels: Option<&'a [WelcomeChannel]>,
}

/// The `welcome` frame (§1), listing a connect hook's server-side
/// channels when there are (§15).
pub fn welcome(
    conn_id: &str,
    account: &str,
    node: &str,
    limits: &WelcomeLimits,
    token_expires_at: u64,
    channels: Option<&[WelcomeChannel]>,
) -> Bytes {
    json_frame(&Welcome {
        kind: "welcome",
        conn_id,
        account,
        node,
        limits,
        token_expires_at,
        channels,
    })
}

/// An `error` frame; optional fields are left out when `None`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorFrame<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    pub code: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dropped: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ids: Option<&'a [Box<RawValue>]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub channel: Option<&'a str>,
}

impl<'a> ErrorFrame<'a> {
    pub fn new(code: ErrorCode) -> ErrorFrame<'a> {
        ErrorFrame::custom(code.as_str())
    }

    /// An error with a code that is not the broker's own: a backend
    /// hook's (§15).
    pub fn custom(code: &'a str) -> ErrorFrame<'a> {
        ErrorFrame {
            kind: "error",
            code,
            id: None,
            message: None,
            retry_after_ms: None,
            dropped: None,
            ids: None,
            channel: None,
        }
    }

    pub fn id(mut self, id: Option<&'a RawValue>) -> Self {
        self.id = id;
        self
    }

    pub fn message(mut self, message: &'a str) -> Self {
        self.message = Some(message);
        self
    }

    pub fn retry_after_ms(mut self, ms: u64) -> Self {
        self.retry_after_ms = Some(ms);
        self
    }

    pub fn dropped(mut self, n: u64) -> Self {
        self.dropped = Some(n);
        self
    }

    pub fn ids(mut self, ids: &'a [Box<RawValue>]) -> Self {
        self.ids = Some(ids);
        self
    }

    pub fn channel(mut self, channel: &'a str) -> Self {
        self.channel = Some(channel);
        self
    }

    pub fn encode(&self) -> Bytes {
        json_frame(self)
    }
}

/// One budget as shown in a `budget` frame.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BudgetView {
    pub remaining: u64,
    pub capacity: u64,
    #[serde(serialize_with = "number")]
    pub refill_per_sec: f64,
}

#[derive(Serialize)]
struct Budget<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a RawValue>,
    connection: BudgetView,
    #[serde(skip_serializing_if = "Option::is_none")]
    account: Option<BudgetView>,
}

pub fn budget(id: Option<&RawValue>, connection: BudgetView, account: Option<BudgetView>) -> Bytes {
    json_frame(&Budget {
        kind: "budget",
        id,
        connection,
        account,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_data_is_the_verbatim_data() {
        for size in [3, 200, 70_000] {
            let data = format!("[\"{}\"]", "x".repeat(size));
            let frame = message("doc:1", 1_796_038_664_859_005, &data);
            assert_eq!(
                message_data(&frame, "doc:1", 1_796_038_664_859_005),
                data.as_bytes()
            );
        }
        assert!(message_data(&Bytes::new(), "doc:1", 1).is_empty());
    }

    #[test]
    fn message_frame_is_one_text_frame_with_verbatim_data() {
        let f = message("doc:42", 1188, r#"{"any":"json"}"#);
        assert_eq!(f[0], 0x81);
        assert_eq!(
            payload(&f),
            br#"{"type":"message","channel":"doc:42","seq":1188,"data":{"any":"json"}}"#
        );
        let v: serde_json::Value = serde_json::from_slice(payload(&f)).unwrap();
        assert_eq!(v["seq"], 1188);
    }

    #[test]
    fn a_conflated_message_says_so_and_keeps_everything_else() {
        for data in [r#"{"x":1}"#.to_owned(), format!("\"{}\"", "y".repeat(200))] {
            let f = conflated(&message("cur:1", 9, &data));
            let v: serde_json::Value = serde_json::from_slice(payload(&f)).unwrap();
            assert_eq!(v["conflated"], true);
            assert_eq!(v["type"], "message");
            assert_eq!(v["seq"], 9);
            assert_eq!(v["data"].to_string(), data);
        }
    }

    #[test]
    fn header_lengths() {
        let mid = message("a", 1, &"1".repeat(300));
        assert_eq!(mid[1], 126);
        assert_eq!(u16::from_be_bytes([mid[2], mid[3]]) as usize, mid.len() - 4);
        let big = message("a", 1, &"1".repeat(70_000));
        assert_eq!(big[1], 127);
        assert_eq!(
            u64::from_be_bytes(big[2..10].try_into().unwrap()) as usize,
            big.len() - 10
        );
    }

    #[test]
    fn error_frame_leaves_out_absent_fields() {
        let ids = [
            RawValue::from_string("3".into()).unwrap(),
            RawValue::from_string("4".into()).unwrap(),
        ];
        let f = ErrorFrame::new(ErrorCode::RateLimited)
            .retry_after_ms(50)
            .dropped(37)
            .ids(&ids)
            .encode();
        assert_eq!(
            payload(&f),
            br#"{"type":"error","code":"rate_limited","retryAfterMs":50,"dropped":37,"ids":[3,4]}"#
        );
    }

    #[test]
    fn close_frame_carries_code_and_reason() {
        let f = close(CloseCode::SlowConsumer);
        assert_eq!(f[0], 0x88);
        assert_eq!(u16::from_be_bytes([f[2], f[3]]), 4008);
    }
}
