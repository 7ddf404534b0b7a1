//! Presence frames (§13): who is in a channel, its counts, and the
//! coalesced joins and leaves its subscribers get.

use std::sync::Arc;

use bytes::Bytes;
use serde::{Serialize, Serializer};
use serde_json::value::RawValue;

/// The largest `info` claim, in bytes of compact JSON (§13).
pub const MAX_INFO_BYTES: usize = 1024;

/// One subscribed connection of a presence channel:
/// `{"user":"<sub>","connId":"n1-8f3a","info":{...}}`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Member {
    #[serde(serialize_with = "text")]
    pub user: Arc<str>,
    #[serde(serialize_with = "text")]
    pub conn_id: Arc<str>,
    /// The token's `info` claim as compact JSON text (checked at the
    /// handshake: an object of at most [`MAX_INFO_BYTES`]).
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "raw_json")]
    pub info: Option<Arc<str>>,
}

fn text<S: Serializer>(t: &Arc<str>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(t)
}

fn raw_json<S: Serializer>(info: &Option<Arc<str>>, s: S) -> Result<S::Ok, S::Error> {
    match info.as_deref().map(serde_json::from_str::<&RawValue>) {
        Some(Ok(raw)) => raw.serialize(s),
        _ => s.serialize_none(),
    }
}

/// Checks a token's `info` claim: a JSON object of at most
/// [`MAX_INFO_BYTES`] in compact form. Returns that compact text.
pub fn check_info(info: &serde_json::Value) -> Result<Arc<str>, String> {
    if !info.is_object() {
        return Err("the token's `info` claim must be a JSON object".into());
    }
    let text = info.to_string();
    if text.len() > MAX_INFO_BYTES {
        return Err(format!(
            "the token's `info` claim is {} bytes of JSON, above the limit of {MAX_INFO_BYTES}",
            text.len()
        ));
    }
    Ok(text.into())
}

/// Counts of a channel: distinct users and connections.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub users: u64,
    pub connections: u64,
}

/// The answer to a presence read (socket frame, HTTP body without `id`).
#[derive(Debug, Serialize)]
pub struct PresenceReply<'a> {
    #[serde(rename = "type")]
    pub kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<&'a RawValue>,
    pub channel: &'a str,
    pub members: &'a [Member],
    pub users: u64,
    pub connections: u64,
    /// Only while a cluster node answers from its own members (§13).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub partial: bool,
}

#[derive(Serialize)]
struct StatsReply<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a RawValue>,
    channel: &'a str,
    users: u64,
    connections: u64,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    partial: bool,
}

#[derive(Serialize)]
struct Diff<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    channel: &'a str,
    joins: &'a [Member],
    leaves: &'a [Member],
}

/// `{"type":"presence",...}` as a WebSocket frame.
pub fn presence(reply: &PresenceReply<'_>) -> Bytes {
    super::wire::json_text(reply)
}

/// `{"type":"presence_stats",...}`; without `id` it is the unsolicited
/// count sent above `join_leave_max_members`.
pub fn stats(id: Option<&RawValue>, channel: &str, counts: Counts, partial: bool) -> Bytes {
    super::wire::json_text(&StatsReply {
        kind: "presence_stats",
        id,
        channel,
        users: counts.users,
        connections: counts.connections,
        partial,
    })
}

/// `{"type":"presence_diff","channel":…,"joins":[…],"leaves":[…]}`.
pub fn diff(channel: &str, joins: &[Member], leaves: &[Member]) -> Bytes {
    super::wire::json_text(&Diff {
        kind: "presence_diff",
        channel,
        joins,
        leaves,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(user: &str, conn: &str, info: Option<&str>) -> Member {
        Member {
            user: user.into(),
            conn_id: conn.into(),
            info: info.map(Into::into),
        }
    }

    #[test]
    fn members_order_by_user_then_conn_and_keep_info_verbatim() {
        let mut m = [
            member("b", "n1-1", None),
            member("a", "n1-2", Some(r#"{"name":"Ann"}"#)),
            member("a", "n1-10", None),
        ];
        m.sort();
        let ids: Vec<_> = m.iter().map(|m| (&*m.user, &*m.conn_id)).collect();
        assert_eq!(ids, [("a", "n1-10"), ("a", "n1-2"), ("b", "n1-1")]);
        let frame = diff("note:1", &m[1..2], &[]);
        let text = std::str::from_utf8(super::super::wire::payload(&frame)).unwrap();
        assert_eq!(
            text,
            r#"{"type":"presence_diff","channel":"note:1","joins":[{"user":"a","connId":"n1-2","info":{"name":"Ann"}}],"leaves":[]}"#
        );
    }

    #[test]
    fn info_must_be_a_small_object() {
        assert!(check_info(&serde_json::json!({"name": "Ann"})).is_ok());
        assert!(check_info(&serde_json::json!("Ann")).is_err());
        assert!(check_info(&serde_json::json!([1])).is_err());
        let big = serde_json::json!({ "x": "y".repeat(MAX_INFO_BYTES) });
        assert!(check_info(&big).unwrap_err().contains("1024"));
    }
}
