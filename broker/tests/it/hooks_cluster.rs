//! §15's hooks in cluster mode: two nodes sharing a test-started
//! redis-server, one backend. A hooked subscribe works on each node, a
//! publish through node A's publish hook (rewritten) reaches a subscriber
//! on node B, and each node keeps its own cache (a decision cached on A
//! is asked again on B).

use serde_json::json;

use crate::cluster::{prefix, two_nodes};
use crate::common::{Broker, Client};
use crate::hooks_backend::{Backend, Reply};
use crate::redis_server::RedisServer;

/// A client whose token allows only `chat:*`: on `doc:*` the hook decides.
async fn client(broker: &Broker, account: &str) -> Client {
    let token = broker.token_with(account, &["chat:*"], &["chat:*"], None);
    let mut c = Client::connect(&broker.ws_url(), &token).await.unwrap();
    assert_eq!(c.next_json().await["type"], "welcome");
    c
}

#[actix_rt::test]
async fn hooks_decide_on_every_node_and_a_hooked_publish_crosses_nodes() {
    let mut backend = Backend::start(|v| {
        if v["event"] == "publish" {
            Reply::result(json!({"data": {"clean": v["data"]["n"]}}))
        } else {
            Reply::ok()
        }
    });
    let redis = RedisServer::start();
    let hook = backend
        .hook("events = [\"subscribe\", \"publish\"]\nchannels = [\"doc:*\"]\ncache_ms = 60000");
    let (a, b) = two_nodes(&redis, &prefix(), &hook).await;

    let mut on_b = client(&b, "reader").await;
    let ack = on_b
        .call(json!({"type": "subscribe", "channel": "doc:1"}), 1)
        .await;
    assert_eq!(ack["type"], "ack", "node b's hook allows: {ack}");
    let call = backend.call().await;
    assert_eq!(
        (call["event"].clone(), call["channel"].clone()),
        (json!("subscribe"), json!("doc:1"))
    );

    // The same decision on node a: its own cache is empty, so it asks;
    // asked again on a, its cache answers.
    let mut on_a = client(&a, "reader").await;
    let ack = on_a
        .call(json!({"type": "subscribe", "channel": "doc:1"}), 1)
        .await;
    assert_eq!(ack["type"], "ack", "node a's hook allows: {ack}");
    assert_eq!(backend.call().await["channel"], "doc:1");
    let mut again_a = client(&a, "reader").await;
    let ack = again_a
        .call(json!({"type": "subscribe", "channel": "doc:1"}), 1)
        .await;
    assert_eq!(ack["type"], "ack");
    assert_eq!(backend.calls(), 2, "caches are per node");
    assert_eq!(a.node.metrics.hooks.calls("app", "subscribe", "cached"), 1);
    assert_eq!(b.node.metrics.hooks.calls("app", "subscribe", "cached"), 0);

    let mut publisher = client(&a, "writer").await;
    let ack = publisher
        .call(
            json!({"type": "publish", "channel": "doc:1", "data": {"n": 5}}),
            2,
        )
        .await;
    assert_eq!(ack["type"], "ack", "{ack}");
    let call = backend.call().await;
    assert_eq!(
        (call["event"].clone(), call["client"]["sub"].clone()),
        (json!("publish"), json!("writer"))
    );
    let msg = on_b.until(|f| f["type"] == "message").await;
    assert_eq!(
        (
            msg["channel"].clone(),
            msg["data"].clone(),
            msg["seq"].clone()
        ),
        (json!("doc:1"), json!({"clean": 5}), ack["seq"].clone()),
        "node a's rewrite reaches node b"
    );
}
