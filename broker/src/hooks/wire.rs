//! What goes to the backend and what comes back (§15): the request body,
//! and the one parser of an answer. Only HTTP 200 with exactly one of
//! `result`, `error` and `disconnect` is an answer; anything else is a
//! failure, which the hook's `on_error` decides.

use std::net::IpAddr;
use std::sync::Arc;

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::Event;

/// Who causes a call, as every front knows it (§15's `client`).
#[derive(Debug, Clone)]
pub struct Client {
    /// The connection's id as the client sees it (`welcome.connId`).
    pub conn_id: Arc<str>,
    pub ip: IpAddr,
    /// `websocket`, `sse`, `graphql-ws`, `http` or `pusher`.
    pub transport: &'static str,
    /// Unknown on `connect`.
    pub sub: Option<Arc<str>>,
    pub plan: Option<String>,
    /// Compact JSON.
    pub info: Option<Arc<str>>,
}

impl Client {
    /// A caller without a connection (`POST /v1/client/publish`, GraphQL
    /// over HTTP): who its token names; `conn_id` names the request.
    pub fn of_token(
        claims: &crate::auth::Claims,
        conn_id: Arc<str>,
        ip: IpAddr,
        transport: &'static str,
    ) -> Client {
        Client {
            conn_id,
            ip,
            transport,
            sub: Some(claims.sub.as_str().into()),
            plan: claims.plan.clone(),
            info: claims
                .info
                .as_ref()
                .filter(|v| !v.is_null())
                .map(|v| Arc::from(v.to_string())),
        }
    }
}

/// One question to a hook, front-neutral.
#[derive(Debug, Clone)]
pub struct Ask {
    pub event: Event,
    pub client: Client,
    pub channel: Option<String>,
    /// `publish`: the message; `rpc`: the call's data.
    pub data: Option<Box<RawValue>>,
    /// `rpc` only.
    pub method: Option<String>,
    /// `connect` only: the configured headers the request had, lower-case.
    pub headers: Vec<(String, String)>,
}

impl Ask {
    pub fn new(event: Event, client: Client) -> Ask {
        Ask {
            event,
            client,
            channel: None,
            data: None,
            method: None,
            headers: Vec::new(),
        }
    }

    /// What identical calls share (§15: event, client IP, for `connect`
    /// the passed headers, `sub`, channel and data; an rpc's method too).
    /// `info` too: hooks are global while Pusher apps are tenants, and a
    /// Pusher client's `info` names its app, so the same user id on the
    /// same channel name in two apps is two questions (for a token it
    /// only narrows sharing to askers the backend is told the same of).
    /// Full text, not a hash: two different askers must never share an
    /// answer.
    pub fn key(&self) -> String {
        let key = serde_json::json!([
            self.event.as_str(),
            self.client.ip.to_string(),
            self.headers,
            self.client.sub.as_deref(),
            self.client.info.as_deref(),
            self.channel,
            self.method,
            self.data.as_ref().map(|d| d.get()),
        ]);
        key.to_string()
    }
}

#[derive(Serialize)]
struct ClientBody<'a> {
    #[serde(rename = "connId")]
    conn_id: &'a str,
    ip: String,
    transport: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    sub: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    plan: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    info: Option<&'a RawValue>,
}

#[derive(Serialize)]
struct Body<'a> {
    id: &'a str,
    event: &'static str,
    time: u64,
    hook: &'a str,
    client: ClientBody<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    channel: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    method: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    headers: Option<Map<String, Value>>,
}

/// The request body of one call.
pub fn body(ask: &Ask, call_id: &str, hook: &str, time_ms: u64) -> Vec<u8> {
    let info: Option<Box<RawValue>> = ask
        .client
        .info
        .as_deref()
        .and_then(|i| RawValue::from_string(i.to_owned()).ok());
    let connect = ask.event == Event::Connect;
    let body = Body {
        id: call_id,
        event: ask.event.as_str(),
        time: time_ms,
        hook,
        client: ClientBody {
            conn_id: &ask.client.conn_id,
            ip: ask.client.ip.to_string(),
            transport: ask.client.transport,
            sub: ask.client.sub.as_deref(),
            plan: ask.client.plan.as_deref(),
            info: info.as_deref(),
        },
        channel: ask.channel.as_deref(),
        data: match ask.event {
            Event::Publish | Event::Rpc => Some(
                ask.data
                    .as_deref()
                    .unwrap_or_else(|| serde_json::from_str("null").expect("null is JSON")),
            ),
            _ => None,
        },
        method: ask.method.as_deref(),
        headers: connect.then(|| {
            ask.headers
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect()
        }),
    };
    serde_json::to_vec(&body).expect("a hook request serializes")
}

/// A backend's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// Allowed, with the event's fields.
    Result(Map<String, Value>),
    /// Refused with the backend's code.
    Error {
        code: String,
        message: String,
        retry_after_ms: Option<u64>,
    },
    /// Close the connection with this code (4000-4499).
    Disconnect { code: u16, reason: String },
}

/// Longest error code taken from a backend.
pub const MAX_CODE_LEN: usize = 64;
/// Longest close reason (a close frame's payload is at most 125 bytes).
pub const MAX_REASON_LEN: usize = 123;
/// Longest error message passed on.
pub const MAX_MESSAGE_LEN: usize = 1024;

/// Parses an answer: `Err` (why) for anything that is not one.
pub fn parse(status: u16, body: &[u8], event: Event) -> Result<Answer, String> {
    if status != 200 {
        return Err(format!("HTTP {status}"));
    }
    let value: Value =
        serde_json::from_slice(body).map_err(|e| format!("the body is not JSON ({e})"))?;
    let Value::Object(mut obj) = value else {
        return Err("the body is not a JSON object".into());
    };
    let present = ["result", "error", "disconnect"]
        .iter()
        .filter(|k| obj.contains_key(**k))
        .count();
    if present != 1 {
        return Err("the body must hold exactly one of result, error, disconnect".into());
    }
    if let Some(result) = obj.remove("result") {
        let Value::Object(result) = result else {
            return Err("result must be an object".into());
        };
        check_result(event, &result)?;
        return Ok(Answer::Result(result));
    }
    if let Some(error) = obj.remove("error") {
        let code = error.get("code").and_then(Value::as_str).unwrap_or("");
        let snake = !code.is_empty()
            && code.len() <= MAX_CODE_LEN
            && code
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !snake {
            return Err(format!(
                "error.code must be lower_snake_case, 1 to {MAX_CODE_LEN} bytes"
            ));
        }
        let message = error.get("message").and_then(Value::as_str).unwrap_or("");
        let retry_after_ms = match error.get("retryAfterMs") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                v.as_u64()
                    .ok_or("error.retryAfterMs must be a non-negative integer")?,
            ),
        };
        return Ok(Answer::Error {
            code: code.to_owned(),
            message: cut(message, MAX_MESSAGE_LEN),
            retry_after_ms,
        });
    }
    let disconnect = obj.remove("disconnect").unwrap_or_default();
    let code = disconnect
        .get("code")
        .and_then(Value::as_u64)
        .filter(|c| (4000..=4499).contains(c))
        .ok_or("disconnect.code must be an integer from 4000 to 4499")?;
    let reason = disconnect
        .get("reason")
        .and_then(Value::as_str)
        .unwrap_or("");
    Ok(Answer::Disconnect {
        code: code as u16,
        reason: cut(reason, MAX_REASON_LEN),
    })
}

/// `text` cut to at most `max` bytes on a character boundary.
fn cut(text: &str, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// The event's fields have their types (§15); a result that does not is
/// a failure, not an allowance.
fn check_result(event: Event, r: &Map<String, Value>) -> Result<(), String> {
    let strings = |key: &str| match r.get(key) {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Array(a)) if a.iter().all(Value::is_string) => Ok(()),
        Some(_) => Err(format!("result.{key} must be an array of strings")),
    };
    let expires = |required: bool| match r.get("expiresAt") {
        None | Some(Value::Null) if !required => Ok(()),
        Some(v) if v.as_u64().is_some() => Ok(()),
        _ => Err("result.expiresAt must be unix milliseconds".to_string()),
    };
    match event {
        Event::Connect => {
            match r.get("sub") {
                Some(Value::String(s)) if !s.is_empty() && s.len() <= 256 => {}
                _ => return Err("result.sub must be a string of 1 to 256 bytes".into()),
            }
            match r.get("plan") {
                None | Some(Value::Null) | Some(Value::String(_)) => {}
                _ => return Err("result.plan must be a string".into()),
            }
            strings("subChannels")?;
            strings("pubChannels")?;
            strings("channels")?;
            expires(false)
        }
        Event::Refresh => expires(true),
        Event::Subscribe | Event::Publish | Event::Rpc => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(status: u16, body: &str, event: Event) -> Result<Answer, String> {
        parse(status, body.as_bytes(), event)
    }

    #[test]
    fn only_200_with_one_of_three_is_an_answer() {
        assert!(matches!(
            p(200, r#"{"result":{}}"#, Event::Subscribe),
            Ok(Answer::Result(_))
        ));
        assert!(p(201, r#"{"result":{}}"#, Event::Subscribe).is_err());
        assert!(p(500, r#"{"result":{}}"#, Event::Subscribe).is_err());
        assert!(p(200, "junk", Event::Subscribe).is_err());
        assert!(p(200, "{}", Event::Subscribe).is_err());
        assert!(p(200, "[]", Event::Subscribe).is_err());
        assert!(
            p(
                200,
                r#"{"result":{},"error":{"code":"x"}}"#,
                Event::Subscribe
            )
            .is_err()
        );
        assert!(p(200, r#"{"result":1}"#, Event::Subscribe).is_err());
    }

    #[test]
    fn errors_and_disconnects_are_checked() {
        assert_eq!(
            p(
                200,
                r#"{"error":{"code":"not_member","message":"no","retryAfterMs":5}}"#,
                Event::Subscribe
            ),
            Ok(Answer::Error {
                code: "not_member".into(),
                message: "no".into(),
                retry_after_ms: Some(5)
            })
        );
        assert!(p(200, r#"{"error":{"code":"Not Member"}}"#, Event::Subscribe).is_err());
        assert!(p(200, r#"{"error":{}}"#, Event::Subscribe).is_err());
        assert_eq!(
            p(
                200,
                r#"{"disconnect":{"code":4403,"reason":"bye"}}"#,
                Event::Rpc
            ),
            Ok(Answer::Disconnect {
                code: 4403,
                reason: "bye".into()
            })
        );
        assert!(p(200, r#"{"disconnect":{"code":1000}}"#, Event::Rpc).is_err());
        assert!(p(200, r#"{"disconnect":{"code":4500}}"#, Event::Rpc).is_err());
    }

    #[test]
    fn a_connect_result_needs_a_sub_and_typed_fields() {
        assert!(p(200, r#"{"result":{"sub":"u1"}}"#, Event::Connect).is_ok());
        assert!(p(200, r#"{"result":{}}"#, Event::Connect).is_err());
        assert!(
            p(
                200,
                r#"{"result":{"sub":"u1","subChannels":"doc:*"}}"#,
                Event::Connect
            )
            .is_err()
        );
        assert!(
            p(
                200,
                r#"{"result":{"sub":"u1","expiresAt":"soon"}}"#,
                Event::Connect
            )
            .is_err()
        );
        assert!(p(200, r#"{"result":{}}"#, Event::Refresh).is_err());
        assert!(p(200, r#"{"result":{"expiresAt":5}}"#, Event::Refresh).is_ok());
    }

    #[test]
    fn the_key_separates_askers() {
        let client = |sub: &str| Client {
            conn_id: "n-1".into(),
            ip: "127.0.0.1".parse().unwrap(),
            transport: "websocket",
            sub: Some(sub.into()),
            plan: None,
            info: None,
        };
        let mut a = Ask::new(Event::Subscribe, client("u1"));
        a.channel = Some("doc:1".into());
        let mut b = a.clone();
        b.client.conn_id = "n-2".into();
        assert_eq!(
            a.key(),
            b.key(),
            "another connection of the same user shares"
        );
        b.client.sub = Some("u2".into());
        assert_ne!(a.key(), b.key());
        let mut c = a.clone();
        c.client.info = Some(r#"{"app":"2"}"#.into());
        assert_ne!(a.key(), c.key(), "another Pusher app does not share");
    }
}
