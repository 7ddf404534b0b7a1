//! The `graphql-transport-ws` protocol (the `graphql-ws` library's, §12)
//! as a pure state machine: client messages and the clock in, actions out
//! (send, close, authenticate, start or stop an operation). It holds no
//! socket, so the socket actor drives it and every rule is unit-tested
//! without one.
//!
//! The rules, with the protocol's close codes exactly: `connection_init`
//! within the init timeout (else 4408), once (a second is 4429); nothing
//! but `ping`/`pong` before the ack (`subscribe` is 4401); a refused
//! credential is 4403; a message that is not one of the protocol's is
//! 4400; a `subscribe` whose id is still running is 4409.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::value::RawValue;

/// The subprotocol name in `Sec-WebSocket-Protocol`.
pub const SUBPROTOCOL: &str = "graphql-transport-ws";

/// How long a client has to send `connection_init` (§12: 3 s).
pub const INIT_TIMEOUT: Duration = Duration::from_secs(3);

/// The protocol's close codes.
pub mod close {
    pub const INVALID_MESSAGE: u16 = 4400;
    pub const UNAUTHORIZED: u16 = 4401;
    pub const FORBIDDEN: u16 = 4403;
    pub const INIT_TIMEOUT: u16 = 4408;
    pub const DUPLICATE_ID: u16 = 4409;
    pub const TOO_MANY_INITS: u16 = 4429;
}

/// A `subscribe` message's payload: a GraphQL request.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscribePayload {
    pub query: String,
    #[serde(default)]
    pub operation_name: Option<String>,
    #[serde(default)]
    pub variables: Option<serde_json::Map<String, serde_json::Value>>,
    #[serde(default)]
    pub extensions: Option<serde_json::Map<String, serde_json::Value>>,
}

/// What the socket must do.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Send this text frame.
    Send(String),
    /// Close with this code and reason; nothing more is read.
    Close { code: u16, reason: String },
    /// Check the `connection_init` payload's credential (or the upgrade's)
    /// and answer with [`Session::credential`].
    Authenticate { payload: Option<serde_json::Value> },
    /// Price, charge and run an operation under `id`; end it with
    /// [`Session::finished`] and a `next`/`error`/`complete` message.
    Start {
        id: String,
        payload: SubscribePayload,
    },
    /// The client completed `id`: stop it, send nothing.
    Stop { id: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for `connection_init`.
    Opened,
    /// `connection_init` received; the credential is being checked.
    Authenticating,
    Acknowledged,
    Closed,
}

/// One connection's protocol state.
#[derive(Debug)]
pub struct Session {
    phase: Phase,
    /// Operations running, by id. Bounded by the socket's subscription
    /// cap: the caller refuses a `Start` past it with an `error` message
    /// and reports it [`Session::finished`].
    running: HashSet<String>,
    init_deadline: Instant,
}

#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(rename = "type", borrow)]
    kind: &'a str,
    #[serde(default)]
    id: Option<String>,
    #[serde(default, borrow)]
    payload: Option<&'a RawValue>,
}

fn close(code: u16, reason: impl Into<String>) -> Action {
    Action::Close {
        code,
        reason: reason.into(),
    }
}

/// A server message with an optional id and payload (JSON text).
pub fn message(kind: &str, id: Option<&str>, payload: Option<&str>) -> String {
    let mut out = String::with_capacity(32 + payload.map_or(0, str::len));
    out.push_str(r#"{"type":""#);
    out.push_str(kind);
    out.push('"');
    if let Some(id) = id {
        out.push_str(r#","id":"#);
        out.push_str(&serde_json::to_string(id).unwrap_or_else(|_| "\"\"".to_owned()));
    }
    if let Some(p) = payload {
        out.push_str(r#","payload":"#);
        out.push_str(p);
    }
    out.push('}');
    out
}

impl Session {
    pub fn new(now: Instant) -> Session {
        Session {
            phase: Phase::Opened,
            running: HashSet::new(),
            init_deadline: now + INIT_TIMEOUT,
        }
    }

    /// When the socket must call [`Session::tick`] next (`None`: never).
    pub fn deadline(&self) -> Option<Instant> {
        (self.phase == Phase::Opened).then_some(self.init_deadline)
    }

    /// The clock: 4408 when `connection_init` did not arrive in time.
    pub fn tick(&mut self, now: Instant) -> Option<Action> {
        if self.phase == Phase::Opened && now >= self.init_deadline {
            self.phase = Phase::Closed;
            return Some(close(
                close::INIT_TIMEOUT,
                "Connection initialisation timeout",
            ));
        }
        None
    }

    pub fn is_closed(&self) -> bool {
        self.phase == Phase::Closed
    }

    /// Operations running now.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// One text frame from the client.
    pub fn receive(&mut self, text: &str) -> Vec<Action> {
        if self.phase == Phase::Closed {
            return Vec::new();
        }
        let msg: Envelope<'_> = match serde_json::from_str(text) {
            Ok(m) => m,
            Err(_) => return self.invalid("Invalid message received"),
        };
        match msg.kind {
            "connection_init" => {
                if self.phase != Phase::Opened {
                    self.phase = Phase::Closed;
                    return vec![close(
                        close::TOO_MANY_INITS,
                        "Too many initialisation requests",
                    )];
                }
                let payload = match msg.payload.map(|p| serde_json::from_str(p.get())) {
                    None => None,
                    Some(Ok(v @ serde_json::Value::Object(_))) => Some(v),
                    Some(Ok(serde_json::Value::Null)) => None,
                    Some(_) => return self.invalid("Invalid connection_init payload"),
                };
                self.phase = Phase::Authenticating;
                vec![Action::Authenticate { payload }]
            }
            "ping" => vec![Action::Send(message(
                "pong",
                None,
                msg.payload.map(|p| p.get()),
            ))],
            "pong" => Vec::new(),
            "subscribe" => {
                if self.phase != Phase::Acknowledged {
                    self.phase = Phase::Closed;
                    return vec![close(close::UNAUTHORIZED, "Unauthorized")];
                }
                let Some(id) = msg.id.filter(|id| !id.is_empty()) else {
                    return self.invalid("Invalid subscribe message: no id");
                };
                let payload = match msg
                    .payload
                    .map(|p| serde_json::from_str::<SubscribePayload>(p.get()))
                {
                    Some(Ok(p)) => p,
                    _ => return self.invalid("Invalid subscribe message: bad payload"),
                };
                if !self.running.insert(id.clone()) {
                    self.phase = Phase::Closed;
                    return vec![close(
                        close::DUPLICATE_ID,
                        format!("Subscriber for {id} already exists"),
                    )];
                }
                vec![Action::Start { id, payload }]
            }
            "complete" => {
                let Some(id) = msg.id else {
                    return self.invalid("Invalid complete message: no id");
                };
                if self.running.remove(&id) {
                    vec![Action::Stop { id }]
                } else {
                    // Completing what already ended is not an error.
                    Vec::new()
                }
            }
            other => {
                let reason = format!("Invalid message type {other:?}");
                self.invalid(reason)
            }
        }
    }

    fn invalid(&mut self, reason: impl Into<String>) -> Vec<Action> {
        self.phase = Phase::Closed;
        vec![close(close::INVALID_MESSAGE, reason)]
    }

    /// The credential's verdict: `connection_ack`, or 4403.
    pub fn credential(&mut self, accepted: bool) -> Action {
        if self.phase != Phase::Authenticating {
            // Already closed (a second init, a timeout): nothing to say.
            return close(close::FORBIDDEN, "Forbidden");
        }
        if accepted {
            self.phase = Phase::Acknowledged;
            Action::Send(message("connection_ack", None, None))
        } else {
            self.phase = Phase::Closed;
            close(close::FORBIDDEN, "Forbidden")
        }
    }

    /// The server ended `id` (its `complete` or `error` was sent, or it
    /// was refused): the id may be used again.
    pub fn finished(&mut self, id: &str) {
        self.running.remove(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acked() -> (Session, Instant) {
        let t0 = Instant::now();
        let mut s = Session::new(t0);
        let a = s.receive(r#"{"type":"connection_init","payload":{"authorization":"Bearer k"}}"#);
        assert_eq!(
            a,
            vec![Action::Authenticate {
                payload: Some(serde_json::json!({"authorization": "Bearer k"}))
            }]
        );
        assert_eq!(
            s.credential(true),
            Action::Send(r#"{"type":"connection_ack"}"#.to_owned())
        );
        (s, t0)
    }

    fn code(actions: &[Action]) -> Option<u16> {
        actions.iter().find_map(|a| match a {
            Action::Close { code, .. } => Some(*code),
            _ => None,
        })
    }

    const SUB: &str = r#"{"type":"subscribe","id":"1","payload":{"query":"subscription { messages(channel: \"a\") { seq } }"}}"#;

    #[test]
    fn init_must_come_within_the_timeout() {
        let t0 = Instant::now();
        let mut s = Session::new(t0);
        assert_eq!(s.deadline(), Some(t0 + INIT_TIMEOUT));
        assert_eq!(s.tick(t0 + Duration::from_millis(2999)), None);
        let a = s.tick(t0 + INIT_TIMEOUT).unwrap();
        assert_eq!(code(&[a]), Some(close::INIT_TIMEOUT));
        assert!(s.is_closed());
        // Once initialised, the clock no longer matters.
        let (mut s, t0) = acked();
        assert_eq!(s.deadline(), None);
        assert_eq!(s.tick(t0 + Duration::from_secs(60)), None);
    }

    #[test]
    fn a_second_init_is_4429() {
        let (mut s, _) = acked();
        assert_eq!(
            code(&s.receive(r#"{"type":"connection_init"}"#)),
            Some(close::TOO_MANY_INITS)
        );
        // Also while the first is still being checked.
        let mut s = Session::new(Instant::now());
        s.receive(r#"{"type":"connection_init"}"#);
        assert_eq!(
            code(&s.receive(r#"{"type":"connection_init"}"#)),
            Some(close::TOO_MANY_INITS)
        );
    }

    #[test]
    fn subscribe_before_the_ack_is_4401() {
        let mut s = Session::new(Instant::now());
        assert_eq!(code(&s.receive(SUB)), Some(close::UNAUTHORIZED));
        let mut s = Session::new(Instant::now());
        s.receive(r#"{"type":"connection_init"}"#);
        assert_eq!(
            code(&s.receive(SUB)),
            Some(close::UNAUTHORIZED),
            "not acked yet"
        );
    }

    #[test]
    fn a_refused_credential_is_4403() {
        let mut s = Session::new(Instant::now());
        assert_eq!(
            s.receive(r#"{"type":"connection_init","payload":null}"#),
            vec![Action::Authenticate { payload: None }]
        );
        assert_eq!(code(&[s.credential(false)]), Some(close::FORBIDDEN));
        assert!(s.is_closed());
        assert!(s.receive(SUB).is_empty(), "nothing is read after a close");
    }

    #[test]
    fn invalid_messages_are_4400() {
        for bad in [
            "not json",
            r#"{"type":"unknown"}"#,
            r#"{"id":"1"}"#,
            r#"{"type":"connection_init","payload":"a string"}"#,
        ] {
            let mut s = Session::new(Instant::now());
            assert_eq!(code(&s.receive(bad)), Some(close::INVALID_MESSAGE), "{bad}");
        }
        for bad in [
            r#"{"type":"subscribe","payload":{"query":"{ a }"}}"#,
            r#"{"type":"subscribe","id":"","payload":{"query":"{ a }"}}"#,
            r#"{"type":"subscribe","id":"1"}"#,
            r#"{"type":"subscribe","id":"1","payload":{"query":7}}"#,
            r#"{"type":"complete"}"#,
        ] {
            let (mut s, _) = acked();
            assert_eq!(code(&s.receive(bad)), Some(close::INVALID_MESSAGE), "{bad}");
        }
    }

    #[test]
    fn a_running_id_again_is_4409_and_a_finished_one_is_free() {
        let (mut s, _) = acked();
        let a = s.receive(SUB);
        assert!(
            matches!(&a[..], [Action::Start { id, payload }] if id == "1" && payload.query.contains("messages"))
        );
        assert_eq!(s.running(), 1);
        s.finished("1");
        assert!(
            matches!(&s.receive(SUB)[..], [Action::Start { .. }]),
            "reusable after it ended"
        );
        assert_eq!(code(&s.receive(SUB)), Some(close::DUPLICATE_ID));
    }

    #[test]
    fn complete_stops_a_running_operation_and_ignores_others() {
        let (mut s, _) = acked();
        s.receive(SUB);
        assert_eq!(
            s.receive(r#"{"type":"complete","id":"1"}"#),
            vec![Action::Stop { id: "1".into() }]
        );
        assert_eq!(s.running(), 0);
        assert!(s.receive(r#"{"type":"complete","id":"1"}"#).is_empty());
        assert!(!s.is_closed());
    }

    #[test]
    fn pings_are_answered_at_any_time_and_pongs_ignored() {
        let mut s = Session::new(Instant::now());
        assert_eq!(
            s.receive(r#"{"type":"ping"}"#),
            vec![Action::Send(r#"{"type":"pong"}"#.into())]
        );
        let (mut s, _) = acked();
        assert_eq!(
            s.receive(r#"{"type":"ping","payload":{"t":1}}"#),
            vec![Action::Send(r#"{"type":"pong","payload":{"t":1}}"#.into())]
        );
        assert!(s.receive(r#"{"type":"pong"}"#).is_empty());
    }

    #[test]
    fn server_messages_are_well_formed() {
        let m = message("next", Some("a\"b"), Some(r#"{"data":{"x":1}}"#));
        let v: serde_json::Value = serde_json::from_str(&m).unwrap();
        assert_eq!(v["type"], "next");
        assert_eq!(v["id"], "a\"b");
        assert_eq!(v["payload"]["data"]["x"], 1);
    }
}
