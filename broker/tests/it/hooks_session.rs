//! §15's hook-given session: the refresh hook extends a connect hook's
//! `expiresAt` (told with an `expiry` frame), and a refusal closes the
//! socket with 4001 at `expiresAt`; failures of publish and rpc under
//! `allow`.

use serde_json::json;
use tidegate::clock::unix_ms;

use crate::common::Broker;
use crate::hooks_backend::{Backend, Reply};
use crate::hooks_connect::connect_without_token;

fn session(refresh: Reply) -> Backend {
    Backend::start(move |v| match v["event"].as_str() {
        Some("connect") => Reply::result(json!({"sub": "u1", "expiresAt": unix_ms() + 1500})),
        _ => refresh.clone(),
    })
}

#[actix_rt::test]
async fn the_refresh_hook_extends_a_hook_given_expiry() {
    let later = unix_ms() + 600_000;
    let mut backend = session(Reply::result(json!({"expiresAt": later})));
    let broker =
        Broker::start(&backend.hook("events = [\"connect\", \"refresh\"]\nrefresh_lead_ms = 1000"));
    let mut c = connect_without_token(&broker, &[]).await.unwrap();
    let welcome = c.next_json().await;
    assert_eq!(welcome["account"], "u1");
    assert_eq!(backend.call().await["event"], "connect");
    let expiry = c.until(|f| f["type"] == "expiry").await;
    assert_eq!(expiry, json!({"type": "expiry", "tokenExpiresAt": later}));
    let call = backend.call().await;
    assert_eq!(
        (call["event"].clone(), call["client"]["sub"].clone()),
        (json!("refresh"), json!("u1"))
    );
    // Still open past the first expiry: a frame is answered.
    let reply = c.call(json!({"type": "budget"}), 1).await;
    assert_eq!(reply["type"], "budget");
}

#[actix_rt::test]
async fn a_refused_refresh_closes_with_4001_at_the_expiry() {
    let mut backend = session(Reply::error("session_ended"));
    let broker =
        Broker::start(&backend.hook("events = [\"connect\", \"refresh\"]\nrefresh_lead_ms = 1000"));
    let mut c = connect_without_token(&broker, &[]).await.unwrap();
    assert_eq!(c.next_json().await["type"], "welcome");
    backend.call().await;
    assert_eq!(backend.call().await["event"], "refresh");
    assert_eq!(c.closed().await, Some(4001));
}

#[actix_rt::test]
async fn failed_publish_and_rpc_calls_under_allow_go_through_as_sent() {
    let backend = Backend::start(|_| Reply::Status(502));
    let broker = Broker::start(
        &backend
            .hook("events = [\"publish\", \"rpc\"]\nchannels = [\"doc:*\"]\non_error = \"allow\""),
    );
    let mut reader = broker.client("reader").await;
    reader
        .call(json!({"type": "subscribe", "channel": "doc:1"}), 1)
        .await;
    let mut c = broker.client("u1").await;
    let ack = c
        .call(
            json!({"type": "publish", "channel": "doc:1", "data": "as sent"}),
            2,
        )
        .await;
    assert_eq!(ack["type"], "ack", "{ack}");
    assert_eq!(
        reader.until(|f| f["type"] == "message").await["data"],
        "as sent"
    );
    let reply = c.call(json!({"type": "rpc", "method": "m"}), 3).await;
    assert_eq!(reply, json!({"type": "rpc", "id": 3, "data": null}));
    let deny = Broker::start(&backend.hook("events = [\"publish\"]\nchannels = [\"doc:*\"]"));
    let mut c = deny.client("u1").await;
    let e = c
        .call(json!({"type": "publish", "channel": "doc:1", "data": 1}), 4)
        .await;
    assert_eq!(e["code"], "hook_unavailable", "{e}");
}
