//! Client → server frames (§2), parsed without copying: `id` and `data`
//! stay borrowed slices of the received text, so a publish's payload is
//! never decoded into a tree and re-encoded.

use std::borrow::Cow;

use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use super::{channel, json};

/// Longest accepted `id`, in bytes of JSON text.
pub const MAX_ID_LEN: usize = 128;

/// A client operation, as the plans' rules name them (`ops = ["publish"]`):
/// the frames that are one (a `budget` request is not).
#[derive(Debug, Clone, Copy, serde::Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    Publish,
    Subscribe,
    Unsubscribe,
}

/// A parsed client frame.
#[derive(Debug)]
pub enum ClientFrame<'a> {
    Subscribe {
        id: Option<&'a RawValue>,
        channel: Cow<'a, str>,
        since: Option<u64>,
    },
    Unsubscribe {
        id: Option<&'a RawValue>,
        channel: Cow<'a, str>,
    },
    Publish {
        id: Option<&'a RawValue>,
        channel: Cow<'a, str>,
        data: &'a RawValue,
        /// The idempotency key (§17), checked.
        key: Option<Cow<'a, str>>,
    },
    Budget {
        id: Option<&'a RawValue>,
    },
    /// A new token for this connection (§2), before the old one expires.
    Refresh {
        id: Option<&'a RawValue>,
        token: Cow<'a, str>,
    },
    /// Who is in a channel (§13): at most `limit` members.
    Presence {
        id: Option<&'a RawValue>,
        channel: Cow<'a, str>,
        limit: u32,
    },
    /// How many users and connections a channel has (§13).
    PresenceStats {
        id: Option<&'a RawValue>,
        channel: Cow<'a, str>,
    },
    /// A call answered by the backend's `rpc` hook (§15).
    Rpc {
        id: Option<&'a RawValue>,
        method: Cow<'a, str>,
        /// `null` when the frame has no `data`.
        data: Option<&'a RawValue>,
    },
}

/// Longest accepted rpc `method`, in bytes.
pub const MAX_METHOD_LEN: usize = 128;

/// Members a presence read returns when it names no `limit` (§13).
pub const PRESENCE_DEFAULT_LIMIT: u32 = 100;
/// The largest `limit` of a presence read (§13).
pub const PRESENCE_MAX_LIMIT: u32 = 1000;

/// Checks a presence read's `limit` (`None`: the default).
pub fn presence_limit(limit: Option<u64>) -> Result<u32, String> {
    match limit {
        None => Ok(PRESENCE_DEFAULT_LIMIT),
        Some(n) if (1..=u64::from(PRESENCE_MAX_LIMIT)).contains(&n) => Ok(n as u32),
        Some(_) => Err(format!(
            "limit must be an integer from 1 to {PRESENCE_MAX_LIMIT}"
        )),
    }
}

impl<'a> ClientFrame<'a> {
    pub fn id(&self) -> Option<&'a RawValue> {
        match self {
            ClientFrame::Subscribe { id, .. }
            | ClientFrame::Unsubscribe { id, .. }
            | ClientFrame::Publish { id, .. }
            | ClientFrame::Refresh { id, .. }
            | ClientFrame::Presence { id, .. }
            | ClientFrame::PresenceStats { id, .. }
            | ClientFrame::Rpc { id, .. }
            | ClientFrame::Budget { id } => *id,
        }
    }

    /// The operation, for rules (a `budget` request or a `refresh` is not
    /// one).
    pub fn op(&self) -> Option<Op> {
        match self {
            ClientFrame::Subscribe { .. } => Some(Op::Subscribe),
            ClientFrame::Unsubscribe { .. } => Some(Op::Unsubscribe),
            ClientFrame::Publish { .. } => Some(Op::Publish),
            ClientFrame::Budget { .. }
            | ClientFrame::Refresh { .. }
            | ClientFrame::Presence { .. }
            | ClientFrame::PresenceStats { .. }
            | ClientFrame::Rpc { .. } => None,
        }
    }

    pub fn channel(&self) -> Option<&str> {
        match self {
            ClientFrame::Subscribe { channel, .. }
            | ClientFrame::Unsubscribe { channel, .. }
            | ClientFrame::Publish { channel, .. }
            | ClientFrame::Presence { channel, .. }
            | ClientFrame::PresenceStats { channel, .. } => Some(channel),
            ClientFrame::Budget { .. } | ClientFrame::Refresh { .. } | ClientFrame::Rpc { .. } => {
                None
            }
        }
    }
}

/// A frame that could not be accepted: `bad_request` with this message,
/// naming `id` when the frame carried a usable one.
#[derive(Debug)]
pub struct FrameError {
    pub id: Option<Box<RawValue>>,
    pub message: Cow<'static, str>,
}

impl FrameError {
    fn new(id: Option<&RawValue>, message: impl Into<Cow<'static, str>>) -> FrameError {
        FrameError {
            id: id.map(ToOwned::to_owned),
            message: message.into(),
        }
    }
}

#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<&'a RawValue>,
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    channel: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    data: Option<&'a RawValue>,
    #[serde(borrow, default)]
    since: Option<&'a RawValue>,
    #[serde(borrow, default)]
    token: Option<&'a RawValue>,
    #[serde(borrow, default)]
    limit: Option<&'a RawValue>,
    #[serde(borrow, default)]
    key: Option<&'a RawValue>,
    #[serde(borrow, default)]
    method: Option<&'a RawValue>,
}

/// `data: null` is a value (publish `null`), not an absent field.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

#[derive(Deserialize)]
struct Str<'a>(#[serde(borrow)] Cow<'a, str>);

fn string<'a>(raw: &'a RawValue) -> Option<Cow<'a, str>> {
    serde_json::from_str::<Str<'a>>(raw.get()).ok().map(|s| s.0)
}

/// Whether `raw` is an acceptable `id`: a JSON number or string, short.
fn valid_id(raw: &RawValue) -> bool {
    let text = raw.get();
    text.len() <= MAX_ID_LEN && matches!(text.as_bytes().first(), Some(b'"' | b'-' | b'0'..=b'9'))
}

/// Parses one text frame. `max_depth` is the plan's JSON nesting limit.
pub fn parse(text: &str, max_depth: u32) -> Result<ClientFrame<'_>, FrameError> {
    if json::depth_exceeds(text.as_bytes(), max_depth) {
        return Err(FrameError::new(
            None,
            format!("JSON nesting is deeper than {max_depth} levels"),
        ));
    }
    // serde accepts a struct written as an array; the contract does not.
    if !text.trim_start().starts_with('{') {
        let message = match serde_json::from_str::<serde::de::IgnoredAny>(text) {
            Ok(_) => "a frame must be a JSON object".to_string(),
            Err(e) => format!("malformed JSON: {e}"),
        };
        return Err(FrameError::new(None, message));
    }
    let env: Envelope<'_> = serde_json::from_str(text)
        .map_err(|e| FrameError::new(None, format!("malformed JSON: {e}")))?;
    let id = match env.id {
        Some(raw) if raw.get() == "null" => None,
        Some(raw) if !valid_id(raw) => {
            return Err(FrameError::new(
                None,
                format!("id must be a number or a string of at most {MAX_ID_LEN} bytes"),
            ));
        }
        other => other,
    };
    let kind = env
        .kind
        .and_then(string)
        .ok_or_else(|| FrameError::new(id, "missing or non-string \"type\""))?;
    let channel = || -> Result<Cow<'_, str>, FrameError> {
        let raw = env
            .channel
            .ok_or_else(|| FrameError::new(id, format!("{kind} needs a \"channel\"")))?;
        let name = string(raw).ok_or_else(|| FrameError::new(id, "channel must be a string"))?;
        channel::validate(&name).map_err(|why| FrameError::new(id, why))?;
        Ok(name)
    };
    match &*kind {
        "subscribe" => {
            let since = match env.since {
                None => None,
                Some(raw) if raw.get() == "null" => None,
                Some(raw) => Some(raw.get().parse::<u64>().map_err(|_| {
                    FrameError::new(id, "since must be a non-negative integer below 2^64")
                })?),
            };
            Ok(ClientFrame::Subscribe {
                id,
                channel: channel()?,
                since,
            })
        }
        "unsubscribe" => Ok(ClientFrame::Unsubscribe {
            id,
            channel: channel()?,
        }),
        "publish" => {
            let channel = channel()?;
            let data = env
                .data
                .ok_or_else(|| FrameError::new(id, "publish needs \"data\""))?;
            let key = match env.key {
                None => None,
                Some(raw) if raw.get() == "null" => None,
                Some(raw) => match super::idempotency_key::unquoted(raw.get()) {
                    Some(key) => Some(Cow::Borrowed(key)),
                    None => {
                        let key = string(raw)
                            .ok_or_else(|| FrameError::new(id, "key must be a string"))?;
                        super::idempotency_key::validate(&key)
                            .map_err(|e| FrameError::new(id, e.to_string()))?;
                        Some(key)
                    }
                },
            };
            Ok(ClientFrame::Publish {
                id,
                channel,
                data,
                key,
            })
        }
        "budget" => Ok(ClientFrame::Budget { id }),
        "refresh" => {
            let token = env
                .token
                .and_then(string)
                .filter(|t| !t.is_empty())
                .ok_or_else(|| FrameError::new(id, "refresh needs a \"token\" (a JWT string)"))?;
            Ok(ClientFrame::Refresh { id, token })
        }
        "presence" => {
            let limit = match env.limit {
                None => None,
                Some(raw) if raw.get() == "null" => None,
                Some(raw) => Some(raw.get().parse::<u64>().unwrap_or(u64::MAX)),
            };
            let limit = presence_limit(limit).map_err(|why| FrameError::new(id, why))?;
            Ok(ClientFrame::Presence {
                id,
                channel: channel()?,
                limit,
            })
        }
        "presence_stats" => Ok(ClientFrame::PresenceStats {
            id,
            channel: channel()?,
        }),
        "rpc" => {
            let method = env
                .method
                .and_then(string)
                .filter(|m| !m.is_empty() && m.len() <= MAX_METHOD_LEN)
                .ok_or_else(|| {
                    FrameError::new(
                        id,
                        format!("rpc needs a \"method\": a string of 1 to {MAX_METHOD_LEN} bytes"),
                    )
                })?;
            Ok(ClientFrame::Rpc {
                id,
                method,
                data: env.data,
            })
        }
        other => {
            let shown: String = other.chars().take(32).collect();
            Err(FrameError::new(id, format!("unknown frame type {shown:?}")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> FrameError {
        parse(text, 32).unwrap_err()
    }

    #[test]
    fn parses_every_client_frame() {
        match parse(
            r#"{"type":"subscribe","channel":"doc:42","since":1187,"id":1}"#,
            32,
        )
        .unwrap()
        {
            ClientFrame::Subscribe { id, channel, since } => {
                assert_eq!(
                    (id.unwrap().get(), &*channel, since),
                    ("1", "doc:42", Some(1187))
                );
            }
            f => panic!("{f:?}"),
        }
        match parse(
            r#"{"type":"publish","channel":"doc:42","data":{"any":["json"]},"id":"x"}"#,
            32,
        )
        .unwrap()
        {
            ClientFrame::Publish { id, data, .. } => {
                assert_eq!(id.unwrap().get(), "\"x\"");
                assert_eq!(data.get(), r#"{"any":["json"]}"#, "data kept verbatim");
            }
            f => panic!("{f:?}"),
        }
        assert!(
            matches!(parse(r#"{"type":"publish","channel":"a","data":null}"#, 32).unwrap(),
            ClientFrame::Publish { data, key: None, .. } if data.get() == "null")
        );
        assert!(matches!(
            parse(r#"{"type":"publish","channel":"a","data":1,"key":"k1"}"#, 32).unwrap(),
            ClientFrame::Publish { key: Some(k), .. } if k == "k1"
        ));
        assert!(matches!(
            parse(r#"{"type":"budget","id":4}"#, 32).unwrap(),
            ClientFrame::Budget { .. }
        ));
        assert!(matches!(
            parse(r#"{"type":"unsubscribe","channel":"a"}"#, 32).unwrap(),
            ClientFrame::Unsubscribe { id: None, .. }
        ));
        match parse(r#"{"type":"refresh","token":"a.b.c","id":5}"#, 32).unwrap() {
            ClientFrame::Refresh { id, token } => {
                assert_eq!((id.unwrap().get(), &*token), ("5", "a.b.c"));
            }
            f => panic!("{f:?}"),
        }
    }

    #[test]
    fn presence_reads_parse_with_a_bounded_limit() {
        match parse(r#"{"type":"presence","channel":"note:1","id":5}"#, 32).unwrap() {
            ClientFrame::Presence { channel, limit, .. } => {
                assert_eq!((&*channel, limit), ("note:1", PRESENCE_DEFAULT_LIMIT));
            }
            f => panic!("{f:?}"),
        }
        match parse(r#"{"type":"presence","channel":"a","limit":1000}"#, 32).unwrap() {
            ClientFrame::Presence { limit, .. } => assert_eq!(limit, 1000),
            f => panic!("{f:?}"),
        }
        for bad in ["1001", "0", "-1", "1.5", "\"7\""] {
            let text = format!(r#"{{"type":"presence","channel":"a","limit":{bad},"id":9}}"#);
            let e = err(&text);
            assert_eq!(e.id.unwrap().get(), "9");
            assert!(e.message.contains("limit"), "{bad}: {}", e.message);
        }
        assert!(matches!(
            parse(r#"{"type":"presence_stats","channel":"a"}"#, 32).unwrap(),
            ClientFrame::PresenceStats { .. }
        ));
        assert!(
            err(r#"{"type":"presence_stats"}"#)
                .message
                .contains("channel")
        );
    }

    #[test]
    fn a_refresh_without_a_token_string_is_refused() {
        for text in [
            r#"{"type":"refresh","id":5}"#,
            r#"{"type":"refresh","token":42,"id":5}"#,
            r#"{"type":"refresh","token":"","id":5}"#,
        ] {
            let e = err(text);
            assert_eq!(e.id.unwrap().get(), "5", "{text}");
            assert!(e.message.contains("token"), "{text}: {}", e.message);
        }
    }

    #[test]
    fn bad_frames_name_their_id_when_usable() {
        let e = err(r#"{"type":"nope","id":7}"#);
        assert_eq!(e.id.unwrap().get(), "7");
        assert!(e.message.contains("unknown frame type \"nope\""));
        let e = err(r#"{"type":"subscribe","channel":"bad name","id":8}"#);
        assert_eq!(e.id.unwrap().get(), "8");
        let e = err(r#"{"type":"subscribe","channel":42,"id":9}"#);
        assert_eq!(
            (e.id.unwrap().get(), &*e.message),
            ("9", "channel must be a string")
        );
        let e = err(r#"{"type":"subscribe","channel":"a","since":-1,"id":10}"#);
        assert_eq!(e.id.unwrap().get(), "10");
        let e = err(r#"{"type":"publish","channel":"a","id":11}"#);
        assert_eq!(&*e.message, "publish needs \"data\"");
        let e = err(r#"{"type":"publish","channel":"a","data":1,"key":"","id":12}"#);
        assert_eq!(&*e.message, "idempotency key must not be empty");
        assert_eq!(e.id.as_deref().map(RawValue::get), Some("12"));
        let e = err(r#"{"type":"publish","channel":"a","data":1,"key":7}"#);
        assert_eq!(&*e.message, "key must be a string");
        let e = err(r#"{"type":"publish","channel":"a","data":1,"key":"a b"}"#);
        assert!(e.message.contains("may hold only"), "{}", e.message);
        let e = err(r#"{"type":"publish","channel":"a","data":1,"key":"a\u0020b"}"#);
        assert!(e.message.contains("may hold only"), "{}", e.message);
    }

    #[test]
    fn a_key_is_read_as_written_or_through_its_escapes() {
        for key in [r#""k-1""#, r#""k\u002d1""#] {
            let frame = format!(r#"{{"type":"publish","channel":"a","data":1,"key":{key}}}"#);
            let Ok(ClientFrame::Publish { key: Some(k), .. }) = parse(&frame, 32) else {
                panic!("{frame}");
            };
            assert_eq!(k, "k-1");
        }
    }

    #[test]
    fn malformed_input_is_a_precise_error() {
        assert!(err("{").message.starts_with("malformed JSON"));
        assert!(err("[1,2]").message.contains("JSON object"));
        assert!(err(r#"{"id":1}"#).message.contains("\"type\""));
        assert!(
            err(r#"{"type":"budget","id":{"x":1}}"#)
                .message
                .contains("id must be")
        );
        let deep = format!(
            r#"{{"type":"publish","channel":"a","data":{}{}}}"#,
            "[".repeat(40),
            "]".repeat(40)
        );
        assert!(err(&deep).message.contains("nesting"));
        let huge = r#"{"type":"subscribe","channel":"a","since":123456789012345678901234567890}"#;
        assert!(err(huge).message.contains("since"));
    }

    #[test]
    fn huge_numbers_in_data_pass_through_verbatim() {
        match parse(r#"{"type":"publish","channel":"a","data":1e999999}"#, 32).unwrap() {
            ClientFrame::Publish { data, .. } => assert_eq!(data.get(), "1e999999"),
            f => panic!("{f:?}"),
        }
    }
}
