//! Tidegate's GraphQL subscriptions as the load generator speaks them:
//! `graphql-transport-ws` on `/v1/graphql` (§12), one `messages`
//! subscription per connection, so fan-out over GraphQL is measured with
//! the same subscribers, publishers and payloads as over `/v1/ws`.
//!
//! Each connection names its operation with its own UUID-shaped id, as the
//! `graphql-ws` client does (`generateID`: a random v4 UUID), so the broker
//! is measured as real clients use it: nothing it could share between
//! subscriptions by their id alone.

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

/// An operation id shaped like `graphql-ws`'s default (a v4 UUID,
/// `xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx`), drawn from `seed` (one per
/// connection: distinct seeds give distinct ids).
pub fn operation_id(seed: u64) -> String {
    // splitmix64: distinct seeds map to distinct, well-spread words.
    let mix = |mut z: u64| {
        z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let (a, b) = (mix(seed), mix(seed ^ 0x5851_f42d_4c95_7f2d));
    format!(
        "{:08x}-{:04x}-4{:03x}-{:x}{:03x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        8 | (b >> 62),
        (b >> 48) & 0xfff,
        b & 0xffff_ffff_ffff,
    )
}

/// A `messages` subscription to `channel` from after `since`: the bench
/// subscribes from just before the one message the channel holds, so the
/// first `next` (that message) confirms the subscription is live before
/// the publishers start.
pub fn subscribe(id: &str, channel: &str, since: u64) -> String {
    let query = format!(
        "subscription {{ messages(channel: {}, since: {since}) {{ seq data }} }}",
        serde_json::Value::from(channel)
    );
    serde_json::json!({"id": id, "type": "subscribe", "payload": {"query": query}}).to_string()
}

/// The publisher's payload in a `next` of `messages { seq data }`:
/// `{"type":"next","id":…,"payload":{["extensions":…,]"data":{"messages":{"seq":N,"data":X}}}}`.
fn next_data(frame: &[u8]) -> Option<&[u8]> {
    const SEQ: &[u8] = br#""seq":"#;
    const DATA: &[u8] = br#","data":"#;
    const END: &[u8] = b"}}}}";
    let seq = crate::finder!(SEQ).find(frame)?;
    let at = seq + crate::finder!(DATA).find(&frame[seq..])? + DATA.len();
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
        let s: serde_json::Value = serde_json::from_str(&subscribe("op-1", "doc:x", 0)).unwrap();
        assert_eq!(s["id"], "op-1");
        let q = s["payload"]["query"].as_str().unwrap();
        assert!(q.contains(r#"messages(channel: "doc:x", since: 0)"#), "{q}");
    }

    #[test]
    fn operation_ids_are_uuid_shaped_and_distinct() {
        let ids: std::collections::HashSet<String> = (0..10_000).map(operation_id).collect();
        assert_eq!(ids.len(), 10_000);
        for id in ids.iter().take(50) {
            assert_eq!(id.len(), 36, "{id}");
            let dashes: Vec<usize> = id.match_indices('-').map(|(i, _)| i).collect();
            assert_eq!(dashes, [8, 13, 18, 23], "{id}");
            assert_eq!(&id[14..15], "4", "{id}");
            assert!("89ab".contains(&id[19..20]), "{id}");
        }
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
