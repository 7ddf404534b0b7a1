//! The events of §9 and their request body, encoded once per event and
//! shared by every endpoint that receives it.

use std::sync::Arc;

use bytes::Bytes;
use serde::Serialize;
use serde_json::value::RawValue;

/// One event on its way to an endpoint. Its `id` is the receiver's
/// idempotency key (`webhook-id`): the same on every retry and, in a
/// cluster, on every node.
#[derive(Debug, Clone)]
pub struct Event {
    pub id: Arc<str>,
    pub kind: &'static str,
    /// `{"id","type","time","data"}`.
    pub body: Bytes,
    /// Attempts made so far (for the logs).
    pub attempts: u32,
    /// Its stream entry in cluster mode (acknowledged when final).
    pub entry: Option<Arc<str>>,
}

pub const OCCUPIED: &str = "channel.occupied";
pub const VACATED: &str = "channel.vacated";
pub const PUBLISHED: &str = "message.published";
pub const LIMIT_EXCEEDED: &str = "limit.exceeded";
/// A user's first connection in a presence channel, cluster-wide (§13).
pub const MEMBER_ADDED: &str = "member.added";
/// A user's last connection gone, after the endpoint's `vacated_delay_ms`.
pub const MEMBER_REMOVED: &str = "member.removed";

/// A Pusher app's client event (§16), sent by the sender's node.
pub const CLIENT_EVENT: &str = "client_event";
/// A Pusher cache channel's subscriber found nothing to replay.
pub const CACHE_MISS: &str = "cache_miss";

/// Pusher's webhook body: `{"time_ms","events":[..]}`.
#[derive(Serialize)]
struct PusherBody<'a> {
    time_ms: u64,
    events: [&'a serde_json::Value; 1],
}

#[derive(Serialize)]
struct Body<'a, D: Serialize> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    time: u64,
    data: D,
}

#[derive(Serialize)]
struct ChannelData<'a> {
    channel: &'a str,
}

#[derive(Serialize)]
struct MemberData<'a> {
    channel: &'a str,
    user: &'a str,
}

#[derive(Serialize)]
struct MessageData<'a> {
    channel: &'a str,
    seq: u64,
    data: &'a RawValue,
    /// The publish's idempotency key (§17), so receivers can dedupe too.
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<&'a str>,
}

#[derive(Serialize)]
struct LimitData<'a> {
    account: &'a str,
    reason: &'a str,
    /// The close code sent to the sockets, when they were closed.
    #[serde(skip_serializing_if = "Option::is_none")]
    close: Option<u16>,
}

pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A fresh event id: random, so two nodes never mint the same one.
pub fn new_id() -> Arc<str> {
    Arc::from(format!("evt_{:032x}", rand::random::<u128>()))
}

impl Event {
    fn build(kind: &'static str, data: impl Serialize) -> Event {
        Event::with_id(new_id(), kind, unix_ms(), data)
    }

    fn with_id(id: Arc<str>, kind: &'static str, time: u64, data: impl Serialize) -> Event {
        let body = serde_json::to_vec(&Body {
            id: &id,
            kind,
            time,
            data,
        })
        // Strings, numbers and already valid JSON: cannot fail.
        .expect("event bodies serialize");
        Event {
            id,
            kind,
            body: Bytes::from(body),
            attempts: 0,
            entry: None,
        }
    }

    /// `channel.occupied` or `channel.vacated`.
    pub fn channel(kind: &'static str, channel: &str) -> Event {
        Event::build(kind, ChannelData { channel })
    }

    /// `member.added` or `member.removed`: `{"channel","user"}`.
    pub fn member(kind: &'static str, channel: &str, user: &str) -> Event {
        Event::build(kind, MemberData { channel, user })
    }

    /// `message.published`; `data` is the message's raw JSON. Data that is
    /// not valid JSON cannot reach here (publish parses it), but is sent
    /// as a JSON string rather than dropped if it ever does. `key`: the
    /// publish's idempotency key, sent as `"key"` when there was one.
    pub fn published(channel: &str, seq: u64, data: &str, key: Option<&str>) -> Event {
        match serde_json::from_str::<&RawValue>(data) {
            Ok(data) => Event::build(
                PUBLISHED,
                MessageData {
                    channel,
                    seq,
                    data,
                    key,
                },
            ),
            Err(_) => Event::build(
                PUBLISHED,
                serde_json::json!({"channel": channel, "seq": seq, "data": data, "key": key}),
            ),
        }
    }

    pub fn limit_exceeded(account: &str, reason: &str, close: Option<u16>) -> Event {
        Event::build(
            LIMIT_EXCEEDED,
            LimitData {
                account,
                reason,
                close,
            },
        )
    }

    /// One event in Pusher's format (§16): `fields` is the event's object
    /// (`name`, `channel`, ...), sent as Pusher sends a batch of one.
    /// `kind` is §9's name where there is one (logs, the cluster queue).
    pub fn pusher(kind: &'static str, fields: &serde_json::Value) -> Event {
        let body = serde_json::to_vec(&PusherBody {
            time_ms: unix_ms(),
            events: [fields],
        })
        // A JSON value: cannot fail.
        .expect("event bodies serialize");
        Event {
            id: new_id(),
            kind,
            body: Bytes::from(body),
            attempts: 0,
            entry: None,
        }
    }

    /// An event read back from a cluster queue (its body as stored).
    pub fn stored(id: Arc<str>, kind: &'static str, body: Bytes, attempts: u32) -> Event {
        Event {
            id,
            kind,
            body,
            attempts,
            entry: None,
        }
    }
}

/// The `&'static` name of a known event type.
pub fn kind_of(name: &str) -> Option<&'static str> {
    [
        OCCUPIED,
        VACATED,
        PUBLISHED,
        LIMIT_EXCEEDED,
        MEMBER_ADDED,
        MEMBER_REMOVED,
        CLIENT_EVENT,
        CACHE_MISS,
    ]
    .into_iter()
    .find(|k| *k == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn published_body_has_the_contract_shape() {
        let e = Event::published("doc:1", 42, r#"{"x":[1,2]}"#, None);
        let v: serde_json::Value = serde_json::from_slice(&e.body).unwrap();
        assert_eq!(v["id"], &*e.id);
        assert_eq!(v["type"], "message.published");
        assert!(v["time"].as_u64().unwrap() > 1_600_000_000_000);
        assert_eq!(
            v["data"],
            serde_json::json!({"channel":"doc:1","seq":42,"data":{"x":[1,2]}})
        );
    }

    #[test]
    fn a_keyed_publish_carries_its_key() {
        let e = Event::published("doc:1", 42, "1", Some("k-1"));
        let v: serde_json::Value = serde_json::from_slice(&e.body).unwrap();
        assert_eq!(
            v["data"],
            serde_json::json!({"channel":"doc:1","seq":42,"data":1,"key":"k-1"})
        );
    }

    #[test]
    fn pusher_bodies_are_a_batch_of_one() {
        let e = Event::pusher(
            CACHE_MISS,
            &serde_json::json!({"name":"cache_miss","channel":"cache-a"}),
        );
        let v: serde_json::Value = serde_json::from_slice(&e.body).unwrap();
        assert!(v["time_ms"].as_u64().unwrap() > 1_600_000_000_000);
        assert_eq!(
            v["events"],
            serde_json::json!([{"name":"cache_miss","channel":"cache-a"}])
        );
    }

    #[test]
    fn ids_differ() {
        assert_ne!(new_id(), new_id());
    }
}
