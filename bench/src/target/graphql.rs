//! Tidegate's GraphQL subscriptions as the load generator speaks them:
//! `graphql-transport-ws` on `/v1/graphql` (§12), one `messages`
//! subscription per connection, so fan-out over GraphQL is measured with
//! the same subscribers, publishers and payloads as over `/v1/ws`.

use crate::ws::{self, OP_CLOSE, OP_TEXT};

use super::Event;

/// The subprotocol the upgrade offers.
pub const SUBPROTOCOL: &str = "graphql-transport-ws";

/// `connection_init` carrying the bearer token (§12: the payload's
/// `authorization`).
pub fn connection_init(token: &str) -> String {
    serde_json::json!({"type": "connection_init", "payload": {"authorization": format!("Bearer {token}")}})
        .to_string()
}

/// A `messages` subscription to `channel` from after `since`: the bench
/// subscribes from just before the one message the channel holds, so the
/// first `next` (that message) confirms the subscription is live before
/// the publishers start.
pub fn subscribe(channel: &str, since: u64) -> String {
    let query = format!(
        "subscription {{ messages(channel: {}, since: {since}) {{ seq data }} }}",
        serde_json::Value::from(channel)
    );
    serde_json::json!({"id": "fanout", "type": "subscribe", "payload": {"query": query}})
        .to_string()
}

/// The publisher's payload in a `next` of `messages { seq data }`:
/// `{"type":"next","id":…,"payload":{["extensions":…,]"data":{"messages":{"seq":N,"data":X}}}}`.
fn next_data(frame: &[u8]) -> Option<&[u8]> {
    const SEQ: &[u8] = br#""seq":"#;
    const DATA: &[u8] = br#","data":"#;
    const END: &[u8] = b"}}}}";
    let seq = frame.windows(SEQ.len()).position(|w| w == SEQ)?;
    let rest = &frame[seq..];
    let at = seq + rest.windows(DATA.len()).position(|w| w == DATA)? + DATA.len();
    let end = frame.len().checked_sub(END.len())?;
    (frame.ends_with(END) && at <= end).then(|| &frame[at..end])
}

/// An `error` message's code (`payload[0].extensions.code`).
fn error(frame: &[u8]) -> Event<'static> {
    let v: serde_json::Value = serde_json::from_slice(frame).unwrap_or_default();
    let first = &v["payload"][0]["extensions"];
    Event::Error {
        code: first["code"].as_str().unwrap_or("?").to_string(),
        dropped: first["dropped"].as_u64().unwrap_or(0),
    }
}

/// What a GraphQL socket's frame means to a scenario.
pub fn classify(op: u8, p: &[u8]) -> Event<'_> {
    match op {
        OP_TEXT if p.starts_with(br#"{"type":"next""#) => match next_data(p) {
            Some(data) => Event::Message { data },
            None => Event::Other,
        },
        OP_TEXT if p.starts_with(br#"{"type":"connection_ack""#) => Event::Ack,
        OP_TEXT if p.starts_with(br#"{"type":"error""#) => error(p),
        OP_CLOSE => Event::Closed {
            code: ws::close_code(p),
        },
        _ => Event::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_data_in_a_next() {
        let f = br#"{"type":"next","id":"fanout","payload":{"data":{"messages":{"seq":17,"data":"abc"}}}}"#;
        assert_eq!(next_data(f), Some(&br#""abc""#[..]));
        let with_ext = br#"{"type":"next","id":"fanout","payload":{"extensions":{"rateLimit":{"cost":1}},"data":{"messages":{"seq":1,"data":{"a":1}}}}}"#;
        assert_eq!(next_data(with_ext), Some(&br#"{"a":1}"#[..]));
        assert_eq!(next_data(br#"{"type":"next"}"#), None);
    }

    #[test]
    fn subscribe_quotes_the_channel() {
        let s: serde_json::Value = serde_json::from_str(&subscribe("doc:x", 0)).unwrap();
        let q = s["payload"]["query"].as_str().unwrap();
        assert!(q.contains(r#"messages(channel: "doc:x", since: 0)"#), "{q}");
    }

    #[test]
    fn error_code_comes_from_the_extensions() {
        let f = br#"{"type":"error","id":"fanout","payload":[{"message":"m","extensions":{"code":"SLOW_CONSUMER","dropped":3}}]}"#;
        match classify(OP_TEXT, f) {
            Event::Error { code, dropped } => {
                assert_eq!((code.as_str(), dropped), ("SLOW_CONSUMER", 3))
            }
            e => panic!("{e:?}"),
        }
    }
}
