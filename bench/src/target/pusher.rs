//! The Pusher Channels wire (§16) as the load generator speaks it:
//! `/app/{key}` with protocol 7, one `private-` channel per connection
//! (signed as a Pusher server library signs it), messages sent as client
//! events. So fan-out over the Pusher wire is measured with the same
//! subscribers, windows and payloads as over `/v1/ws`: the publishers are
//! Pusher connections too (client events reach every other subscriber of
//! the channel, never the sender), and no HTTP request sits in the path.

use anyhow::{Context, Result, anyhow};

use super::Event;
use super::frames::tidegate_data;
use crate::ws::{self, OP_CLOSE, OP_TEXT};

/// The bench's app (the config layer [`LAYER`] defines it; Sockudo's
/// config, `sockudo.rs`, serves the same one).
pub const APP_ID: &str = "4242";
pub const APP_KEY: &str = "bench-key";
pub const APP_SECRET: &str = "bench-pusher-secret-0123456789";

/// The config layer that serves the bench's app: one account on a plan
/// as roomy as the publisher's (every connection of an app is the app's
/// account, publishers and subscribers alike), client events on.
pub const LAYER: &str = r#"
[[pusher.apps]]
id = "4242"
key = "bench-key"
secret = "bench-pusher-secret-0123456789"
account = "bench_app"
plan = "bench_pusher"
client_events = true

[plans.bench_pusher]
messages_per_sec = 1000000.0
burst = 1000000
account_messages_per_sec = 1000000.0
account_burst = 1000000
max_connections = 1000000
handshake_burst = 1000000
"#;

/// The upgrade's path, as pusher-js 8 asks for it.
pub fn path() -> String {
    format!("/app/{APP_KEY}?protocol=7&client=js&version=8.4.0&flash=false")
}

/// The `socket_id` of `pusher:connection_established`.
pub fn socket_id(frame: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(frame).ok()?;
    if v["event"] != "pusher:connection_established" {
        return None;
    }
    let data: serde_json::Value = serde_json::from_str(v["data"].as_str()?).ok()?;
    Some(data["socket_id"].as_str()?.to_owned())
}

/// `pusher:subscribe` to a private channel, with the signature a Pusher
/// server library gives for this socket (`key:HMAC-SHA256(secret,
/// "socket_id:channel")`).
pub fn subscribe(channel: &str, socket_id: &str) -> Result<String> {
    if !channel.starts_with("private-") {
        return Err(anyhow!(
            "the bench subscribes private channels only: {channel}"
        ));
    }
    let signature = tidegate::pusher::sign::hmac_hex(
        APP_SECRET.as_bytes(),
        format!("{socket_id}:{channel}").as_bytes(),
    );
    let auth = format!("{APP_KEY}:{signature}");
    Ok(serde_json::json!({"event": "pusher:subscribe", "data": {"channel": channel, "auth": auth}})
        .to_string())
}

/// A client event carrying `data` (raw JSON, the bench's payload string).
pub fn client_event(channel: &str, data: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(br#"{"event":"client-m","channel":""#);
    out.extend_from_slice(channel.as_bytes());
    out.extend_from_slice(br#"","data":"#);
    out.extend_from_slice(data);
    out.push(b'}');
}

/// What a Pusher frame means to a scenario: a channel event is a message
/// (its `data`, the string the publisher sent, is the last field on a
/// private channel), `subscription_succeeded` an ack,
/// `connection_established` the hello, `pusher:error` and
/// `pusher:subscription_error` errors.
pub fn classify(op: u8, p: &[u8]) -> Event<'_> {
    match op {
        OP_TEXT if p.starts_with(br#"{"event":"client-"#) => match tidegate_data(p) {
            Some(data) => Event::Message { data },
            None => Event::Other,
        },
        OP_TEXT if p.starts_with(br#"{"event":"pusher_internal:subscription_succeeded""#) => {
            Event::Ack
        }
        OP_TEXT if p.starts_with(br#"{"event":"pusher:connection_established""#) => Event::Info,
        OP_TEXT
            if p.starts_with(br#"{"event":"pusher:error""#)
                || p.starts_with(br#"{"event":"pusher:subscription_error""#) =>
        {
            Event::Error {
                code: String::from_utf8_lossy(p).into_owned(),
                dropped: 0,
            }
        }
        OP_CLOSE => Event::Closed {
            code: ws::close_code(p),
        },
        _ => Event::Other,
    }
}

/// The hello's `socket_id`, waited for on a fresh connection.
pub async fn hello(ws: &mut crate::ws::Ws) -> Result<String> {
    ws.wait_for(super::PATIENCE, |op, p| {
        (op == OP_TEXT).then(|| socket_id(p)).flatten()
    })
    .await
    .context("waiting for pusher:connection_established")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delivered_client_event_gives_the_payload() {
        let f = br#"{"event":"client-m","channel":"private-doc-a","data":"0001:x"}"#;
        match classify(OP_TEXT, f) {
            Event::Message { data } => assert_eq!(data, br#""0001:x""#),
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn the_hello_names_the_socket() {
        let f = br#"{"event":"pusher:connection_established","data":"{\"socket_id\":\"12.34\",\"activity_timeout\":120}"}"#;
        assert_eq!(socket_id(f).as_deref(), Some("12.34"));
    }

    #[test]
    fn the_layer_validates_and_signs_private_channels_only() {
        let (_, config) =
            super::super::tidegate_config(&[super::super::TIDEGATE_BASE, LAYER]).unwrap();
        assert!(config.pusher_apps.iter().any(|a| a.key == APP_KEY));
        assert!(subscribe("doc-x", "1.2").is_err());
        let s: serde_json::Value =
            serde_json::from_str(&subscribe("private-x", "1.2").unwrap()).unwrap();
        assert!(
            s["data"]["auth"]
                .as_str()
                .unwrap()
                .starts_with("bench-key:")
        );
    }
}
