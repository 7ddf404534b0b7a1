//! The Pusher Channels protocol's frames (version 7), as this server sends
//! them and reads the client's. Server→client `data` is a JSON *string*
//! (pusher-js parses it again), except `pusher:error`'s object.

use serde::Deserialize;
use serde_json::Value;

/// Pusher's error and close codes this server uses.
pub mod code {
    /// The app's key names no app.
    pub const APP_UNKNOWN: u16 = 4001;
    /// `user_max_connections` reached at sign-in.
    pub const OVER_USER_CAP: u16 = 4004;
    /// A protocol version outside 5–7.
    pub const UNSUPPORTED_PROTOCOL: u16 = 4007;
    /// No protocol version given.
    pub const NO_PROTOCOL: u16 = 4008;
    /// Not authorized.
    pub const UNAUTHORIZED: u16 = 4009;
    /// Reconnect after a backoff (pusher-js: about a second): an
    /// operator's close, a slow reader, the account's budget.
    pub const OVER_CAPACITY: u16 = 4100;
    /// Reconnect at once (a draining node).
    pub const RECONNECT: u16 = 4200;
    /// Silent past the activity timeout and the pong timeout.
    pub const PONG_TIMEOUT: u16 = 4201;
    /// A client event refused (over budget, or client events off).
    pub const CLIENT_EVENT_REJECTED: u16 = 4301;
    /// A watchlist watched only in part (past its cap, or entries that are
    /// no user id): Sockudo's "watchlist limit exceeded".
    pub const WATCHLIST_LIMIT: u16 = 4302;
}

/// A client's frame: `{"event", "channel"?, "data"?}`.
#[derive(Debug, Deserialize)]
pub struct Incoming {
    pub event: String,
    #[serde(default)]
    pub channel: Option<String>,
    #[serde(default)]
    pub data: Value,
}

/// `{"event":event,"data":"<data as a JSON string>"}` plus `channel`.
pub fn event(event: &str, channel: Option<&str>, data_json: &str) -> String {
    let mut out = String::with_capacity(48 + event.len() + data_json.len() * 2);
    out.push_str("{\"event\":");
    push_json_str(&mut out, event);
    if let Some(c) = channel {
        out.push_str(",\"channel\":");
        push_json_str(&mut out, c);
    }
    out.push_str(",\"data\":");
    push_json_str(&mut out, data_json);
    out.push('}');
    out
}

/// An event of a channel, with the sender's `user_id` on presence
/// channels: what subscribers receive. `data` is the string sent.
pub fn channel_event(event: &str, channel: &str, data: &str, user_id: Option<&str>) -> String {
    let mut out = String::with_capacity(64 + event.len() + channel.len() + data.len() * 2);
    out.push_str("{\"event\":");
    push_json_str(&mut out, event);
    out.push_str(",\"channel\":");
    push_json_str(&mut out, channel);
    out.push_str(",\"data\":");
    push_json_str(&mut out, data);
    if let Some(u) = user_id {
        out.push_str(",\"user_id\":");
        push_json_str(&mut out, u);
    }
    out.push('}');
    out
}

/// `pusher:connection_established`.
pub fn connection_established(socket_id: &str, activity_timeout_s: u64) -> String {
    let data = serde_json::json!({"socket_id": socket_id, "activity_timeout": activity_timeout_s});
    event("pusher:connection_established", None, &data.to_string())
}

/// `pusher:error` with its code (`None`: a message about a frame, no code).
pub fn error(code: Option<u16>, message: &str) -> String {
    serde_json::json!({"event": "pusher:error", "data": {"code": code, "message": message}})
        .to_string()
}

/// `pusher:subscription_error` on `channel`.
pub fn subscription_error(channel: &str, kind: &str, error: &str, status: u16) -> String {
    let data = serde_json::json!({"type": kind, "error": error, "status": status});
    event(
        "pusher:subscription_error",
        Some(channel),
        &data.to_string(),
    )
}

/// A string's JSON text (quoted, escaped).
pub fn push_json_str(out: &mut String, s: &str) {
    // serde_json's escaping, written in place.
    let quoted = Value::String(s.to_owned()).to_string();
    out.push_str(&quoted);
}

/// `data` as the string it carries on the wire: a string as it is, any
/// other JSON as its text (pusher-js sends an object for a client event).
pub fn data_string(data: &Value) -> String {
    match data {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// A socket's close in Pusher's code. pusher-js retries 41xx after a
/// backoff and 42xx at once; it never reconnects on 4000–4099. A slow
/// reader, an operator's close and the account's budget are 4100 (never
/// 4200: an immediate reconnect of every abusive connection would be a
/// storm); the drain is 4200 (reconnect, to another node).
pub fn close_code(c: crate::protocol::CloseCode) -> u16 {
    use crate::protocol::CloseCode;
    match c {
        CloseCode::GoingAway | CloseCode::ServiceRestart => code::RECONNECT,
        CloseCode::InvalidUtf8 | CloseCode::MessageTooBig | CloseCode::ProtocolError => c.code(),
        _ => code::OVER_CAPACITY,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_is_a_json_string() {
        let f = connection_established("1.2", 120);
        let v: Value = serde_json::from_str(&f).unwrap();
        assert_eq!(v["event"], "pusher:connection_established");
        let inner: Value = serde_json::from_str(v["data"].as_str().unwrap()).unwrap();
        assert_eq!(inner["socket_id"], "1.2");
        assert_eq!(inner["activity_timeout"], 120);
    }

    #[test]
    fn a_channel_event_carries_user_id_and_escapes() {
        let f = channel_event("client-x", "presence-a", r#"{"a":"\"q\""}"#, Some("u1"));
        let v: Value = serde_json::from_str(&f).unwrap();
        assert_eq!(v["data"], r#"{"a":"\"q\""}"#);
        assert_eq!(v["user_id"], "u1");
        assert_eq!(v["channel"], "presence-a");
    }
}
