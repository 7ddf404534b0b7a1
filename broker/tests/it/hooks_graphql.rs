//! §15's hooks on GraphQL: the subscribe hook for a `messages`
//! subscription over graphql-ws (a refusal is an `error` message for that
//! operation, `extensions.code` the hook's code), and the publish hook for
//! the `publish` / `publishBatch` mutations of a token (rewrite, refusal,
//! a batch refused whole); an API key never calls it. Reads of a hooked
//! channel (`channel`'s history and presence, the `channels` listing, a
//! `presence` subscription) ask the subscribe hook in place of the
//! token's `sub_channels`, and a token's `info` is told to the hook.

use serde_json::{Value, json};

use crate::common::{API_KEY, Broker, Client};
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
    let reader_token = broker.token_with("reader", &["doc:*", "chat:*"], &[], None);
    let mut reader = Client::connect(&broker.ws_url(), &reader_token)
        .await
        .unwrap();
    assert_eq!(reader.next_json().await["type"], "welcome");
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

/// The presence namespace the read tests use; `doc:*` is hooked.
const PRESENCE_NS: &str = "\n[namespaces.doc]\npresence = true\njoin_leave = true\n";

fn hooked_reads(backend: &Backend) -> Broker {
    Broker::start(&format!(
        "{}{PRESENCE_NS}",
        backend.hook("events = [\"subscribe\"]\nchannels = [\"doc:*\"]\ntimeout_ms = 300")
    ))
}

/// `u1`'s token: `chat:*` only (the hook alone can let it read `doc:*`),
/// with an `info` claim.
fn token_with_info(broker: &Broker) -> String {
    broker.member_token("u1", &["chat:*"], Some(json!({"name": "Ann"})))
}

/// Refuses `doc:2` to `u1`, allows the rest.
fn all_but_doc2_for_u1(v: &Value) -> Reply {
    if v["channel"] == "doc:2" && v["client"]["sub"] == "u1" {
        Reply::error("not_member")
    } else {
        Reply::ok()
    }
}

async fn query(broker: &Broker, auth: &str, q: &str) -> Value {
    post(broker, Some(auth), GQL_JSON, &json!({ "query": q }))
        .await
        .body
}

const READ: &str =
    "{ channel(name: \"doc:1\") { name history(last: 5) { seq } presenceStats { users } } }";

#[actix_rt::test]
async fn the_subscribe_hook_decides_graphql_reads_of_a_hooked_channel() {
    let mut backend = Backend::start(all_but_doc2_for_u1);
    let broker = hooked_reads(&backend);
    let t = token_with_info(&broker);

    // Allowed by the hook although the token's globs do not cover it.
    let body = query(&broker, &t, READ).await;
    assert_eq!(body["data"]["channel"]["name"], "doc:1", "{body}");
    let call = backend.call().await;
    assert_eq!(
        (
            call["event"].clone(),
            call["channel"].clone(),
            call["client"]["sub"].clone(),
            call["client"]["transport"].clone(),
            call["client"]["info"].clone()
        ),
        (
            json!("subscribe"),
            json!("doc:1"),
            json!("u1"),
            json!("http"),
            json!({"name": "Ann"})
        )
    );

    // Refused: nothing of the channel is said, the hook's code is.
    let body = query(
        &broker,
        &t,
        "{ channel(name: \"doc:2\") { history { seq } presence { user } } }",
    )
    .await;
    assert!(body["data"]["channel"].is_null(), "{body}");
    assert_eq!(
        body["errors"][0]["extensions"]["code"], "not_member",
        "{body}"
    );

    // The hook replaces the token's globs: a token allowed `doc:*` is
    // still refused when the hook refuses.
    let wide = broker.token_with("u1", &["doc:*"], &[], None);
    let body = query(
        &broker,
        &wide,
        "{ channel(name: \"doc:2\") { history { seq } } }",
    )
    .await;
    assert_eq!(
        body["errors"][0]["extensions"]["code"], "not_member",
        "{body}"
    );

    // A failing backend under `deny`: HOOK_UNAVAILABLE, nothing read.
    backend.answer(|_| Reply::Status(500));
    let body = query(&broker, &t, READ).await;
    assert!(body["data"]["channel"].is_null(), "{body}");
    assert_eq!(
        body["errors"][0]["extensions"]["code"], "HOOK_UNAVAILABLE",
        "{body}"
    );

    // An API key is the backend itself: no call; a channel no hook
    // covers: the token decides, no call.
    let before = backend.calls();
    let body = query(&broker, API_KEY, READ).await;
    assert_eq!(body["data"]["channel"]["name"], "doc:1", "{body}");
    let body = query(&broker, &t, "{ channel(name: \"chat:1\") { name } }").await;
    assert_eq!(body["data"]["channel"]["name"], "chat:1", "{body}");
    assert_eq!(backend.calls(), before);
}

#[actix_rt::test]
async fn a_channels_listing_shows_a_hooked_channel_only_if_the_hook_allows_it() {
    let backend = Backend::start(all_but_doc2_for_u1);
    let broker = hooked_reads(&backend);
    // Occupy doc:1, doc:2 (a reader the hook allows) and chat:1.
    let reader_token = broker.token_with("reader", &["doc:*", "chat:*"], &[], None);
    let mut reader = Client::connect(&broker.ws_url(), &reader_token)
        .await
        .unwrap();
    assert_eq!(reader.next_json().await["type"], "welcome");
    for (i, ch) in ["doc:1", "doc:2", "chat:1"].into_iter().enumerate() {
        let ack = reader
            .call(json!({"type": "subscribe", "channel": ch}), i as u64 + 1)
            .await;
        assert_eq!(ack["type"], "ack", "{ack}");
    }
    let reader_calls = backend.calls();
    let t = token_with_info(&broker);
    let body = query(&broker, &t, "{ channels(prefix: \"\") { name } }").await;
    assert_eq!(
        body["data"]["channels"],
        json!([{"name": "chat:1"}, {"name": "doc:1"}]),
        "doc:2 is refused by the hook, not listed: {body}"
    );
    assert_eq!(
        backend.calls() - reader_calls,
        2,
        "one call per hooked channel listed or left out"
    );
    // `first` bounds the calls: with room for one entry, only doc:1 of
    // the hooked channels is asked about (from the cache-less backend).
    let before = backend.calls();
    let body = query(
        &broker,
        &t,
        "{ channels(prefix: \"doc:\", first: 1) { name } }",
    )
    .await;
    assert_eq!(
        body["data"]["channels"],
        json!([{"name": "doc:1"}]),
        "{body}"
    );
    assert_eq!(backend.calls() - before, 1);
}

const PRESENCE: &str =
    "subscription($c: String!) { presence(channel: $c) { channel joins { connId } } }";

#[actix_rt::test]
async fn the_subscribe_hook_decides_a_graphql_ws_presence_subscription() {
    let mut backend = Backend::start(all_but_doc2_for_u1);
    let broker = hooked_reads(&backend);
    // A member of doc:1 (its own subscribe asked the hook, allowed).
    let mut member = Client::connect(&broker.ws_url(), &broker.token("m1"))
        .await
        .unwrap();
    let conn = member.next_json().await["connId"].clone();
    let ack = member
        .call(json!({"type": "subscribe", "channel": "doc:1"}), 1)
        .await;
    assert_eq!(ack["type"], "ack", "{ack}");
    assert_eq!(backend.call().await["client"]["sub"], "m1");

    let mut c = connected(&broker, &token_with_info(&broker)).await;
    subscribe(&mut c, "p1", PRESENCE, json!({"c": "doc:1"})).await;
    let call = backend.call().await;
    assert_eq!(
        (
            call["channel"].clone(),
            call["client"]["transport"].clone(),
            call["client"]["info"].clone()
        ),
        (json!("doc:1"), json!("graphql-ws"), json!({"name": "Ann"}))
    );
    // The hook let the token watch doc:1: the member's join comes (in
    // the first diff or a later one).
    let next = c
        .until(|v| {
            v["id"] == "p1"
                && (v["type"] != "next" || v["payload"]["data"]["presence"]["joins"] != json!([]))
        })
        .await;
    assert_eq!(
        next["payload"]["data"]["presence"]["joins"],
        json!([{ "connId": conn }]),
        "{next}"
    );

    subscribe(&mut c, "p2", PRESENCE, json!({"c": "doc:2"})).await;
    let e = next_for(&mut c, "p2").await;
    assert_eq!(e["type"], "error", "{e}");
    assert_eq!(e["payload"][0]["extensions"]["code"], "not_member", "{e}");

    backend.answer(|_| Reply::disconnect(4403));
    subscribe(&mut c, "p3", PRESENCE, json!({"c": "doc:3"})).await;
    assert_eq!(
        c.closed().await,
        Some(4403),
        "a disconnect closes with its code"
    );
}
