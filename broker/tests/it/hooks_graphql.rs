//! §15's hooks on GraphQL: the subscribe hook for a `messages`
//! subscription over graphql-ws (a refusal is an `error` message for that
//! operation, `extensions.code` the hook's code), and the publish hook for
//! the `publish` / `publishBatch` mutations of a token (rewrite, refusal,
//! a batch refused whole); an API key never calls it.

use serde_json::{Value, json};

use crate::common::{API_KEY, Broker};
use crate::graphql::{GQL_JSON, post};
use crate::graphql_ws::{SUB, connected, live, next_for, subscribe};
use crate::hooks_backend::{Backend, Reply};

fn hooked(backend: &Backend, events: &str) -> Broker {
    Broker::start(&backend.hook(&format!(
        "events = [{events}]\nchannels = [\"doc:*\"]\ntimeout_ms = 300"
    )))
}

fn token(broker: &Broker) -> String {
    broker.token_with("u1", &["chat:*"], &["chat:*"], None)
}

#[actix_rt::test]
async fn the_subscribe_hook_decides_a_graphql_ws_subscription() {
    let mut backend = Backend::start(|_| Reply::ok());
    let broker = hooked(&backend, "\"subscribe\"");
    let mut c = connected(&broker, &token(&broker)).await;
    subscribe(&mut c, "s1", SUB, json!({"c": "doc:1"})).await;
    let call = backend.call().await;
    assert_eq!(
        (
            call["event"].clone(),
            call["channel"].clone(),
            call["client"]["sub"].clone(),
            call["client"]["transport"].clone()
        ),
        (
            json!("subscribe"),
            json!("doc:1"),
            json!("u1"),
            json!("graphql-ws")
        )
    );
    live(&broker, "doc:1", 1).await;
    assert_eq!(broker.publish_http("doc:1", json!(1)).await.status(), 200);
    let next = next_for(&mut c, "s1").await;
    assert_eq!(
        next["type"], "next",
        "the hook allows what the token does not: {next}"
    );

    backend.answer(|_| Reply::error("not_member"));
    subscribe(&mut c, "s2", SUB, json!({"c": "doc:2"})).await;
    let e = next_for(&mut c, "s2").await;
    assert_eq!(e["type"], "error", "{e}");
    assert_eq!(e["payload"][0]["extensions"]["code"], "not_member", "{e}");

    backend.answer(|_| Reply::Status(500));
    subscribe(&mut c, "s3", SUB, json!({"c": "doc:3"})).await;
    let e = next_for(&mut c, "s3").await;
    assert_eq!(
        e["payload"][0]["extensions"]["code"], "HOOK_UNAVAILABLE",
        "{e}"
    );
    assert!(
        e["payload"][0]["extensions"]["retryAfterMs"]
            .as_u64()
            .is_some_and(|ms| ms >= 1)
    );

    // The token's channel: no call; the socket stayed open throughout.
    let before = backend.calls();
    subscribe(&mut c, "s4", SUB, json!({"c": "chat:1"})).await;
    live(&broker, "chat:1", 1).await;
    assert_eq!(backend.calls(), before);
    assert_eq!(
        broker
            .metric("tidegate_rejections_total{layer=\"hook\",reason=\"not_member\"}")
            .await,
        1.0
    );
    backend.answer(|_| Reply::disconnect(4403));
    subscribe(&mut c, "s5", SUB, json!({"c": "doc:5"})).await;
    assert_eq!(
        c.closed().await,
        Some(4403),
        "a disconnect closes with its code"
    );
}

async fn mutate(broker: &Broker, auth: &str, query: &str) -> Value {
    let a = post(broker, Some(auth), GQL_JSON, &json!({ "query": query })).await;
    a.body
}

#[actix_rt::test]
async fn the_publish_hook_decides_a_tokens_mutations_and_never_an_api_keys() {
    let mut backend = Backend::start(|_| Reply::result(json!({"data": {"clean": true}})));
    let broker = hooked(&backend, "\"publish\"");
    let mut reader = broker.client("reader").await;
    reader
        .call(json!({"type": "subscribe", "channel": "doc:1"}), 1)
        .await;
    let t = token(&broker);
    let body = mutate(
        &broker,
        &t,
        "mutation { publish(channel: \"doc:1\", data: {dirty: 1}) { seq } }",
    )
    .await;
    assert!(body["data"]["publish"]["seq"].as_u64().is_some(), "{body}");
    let call = backend.call().await;
    assert_eq!(
        (
            call["event"].clone(),
            call["data"].clone(),
            call["client"]["transport"].clone()
        ),
        (json!("publish"), json!({"dirty": 1}), json!("http"))
    );
    let msg = reader.until(|f| f["type"] == "message").await;
    assert_eq!(
        msg["data"],
        json!({"clean": true}),
        "published as rewritten"
    );

    backend.answer(|v| {
        if v["data"] == json!(2) {
            Reply::error("spam")
        } else {
            Reply::ok()
        }
    });
    let body = mutate(
        &broker,
        &t,
        "mutation { publishBatch(messages: [{channel: \"doc:1\", data: 1}, {channel: \"doc:1\", data: 2}]) { seq } }",
    )
    .await;
    assert_eq!(body["errors"][0]["extensions"]["code"], "spam", "{body}");
    assert!(
        body["errors"][0]["message"]
            .as_str()
            .unwrap()
            .starts_with("messages[1]"),
        "{body}"
    );
    let calls = backend.calls();
    // An API key is the backend itself: no call.
    let body = mutate(
        &broker,
        API_KEY,
        "mutation { publish(channel: \"doc:1\", data: 2) { seq } }",
    )
    .await;
    assert!(body["data"]["publish"]["seq"].as_u64().is_some(), "{body}");
    assert_eq!(backend.calls(), calls);
    let msg = reader.until(|f| f["type"] == "message").await;
    assert_eq!(
        msg["data"],
        json!(2),
        "the refused batch sent nothing before it: {msg}"
    );
}
