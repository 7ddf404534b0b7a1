//! Issue 42: a subscription is priced the same on every front. A channel
//! costs `costs.subscribe`, plus `costs.recovery` when it continues from a
//! position, whether it is a `/v1/ws` `subscribe` frame, a channel of an
//! SSE stream (charged to the stream's connection and sampled into the
//! account budget at its opening), a channel of a gRPC `Subscribe` call
//! (the API key's bucket) or a graphql-ws subscription (the connection's
//! frame bucket).

use std::time::Instant;

use serde_json::{Value, json};
use tidegate::protocol::position::Position;

use crate::common::{API_KEY, Broker, PATIENCE};
use crate::graphql::{GQL_JSON, post};
use crate::graphql_ws::{SUB, connected, live, next_for, subscribe};
use crate::grpc::{authed, connect, subscribe_req};
use crate::sse_client;

/// A plan whose buckets refill too slowly to matter in a test, whose
/// account budget sees every unit at once, and whose recovered bytes are
/// free (only the subscription's own price is measured).
fn plan(subscribe: u32, recovery: u32, max_single: u32) -> String {
    format!(
        "[[api_keys]]\nkey = \"{API_KEY}\"\naccount = \"acme\"\npub_channels = [\"*\"]\nsub_channels = [\"*\"]\n\
         [plans.free]\nburst = 20\nmessages_per_sec = 0.01\naccount_burst = 100000\n\
         account_messages_per_sec = 0.01\naccount_sample_every = 1\n\
         [plans.free.costs]\nsubscribe = {subscribe}\nrecovery = {recovery}\nrecovery_per_kib = 0\n\
         max_single = {max_single}\n"
    )
}

/// The account's budget as a GraphQL `{ budget }` read with its token sees
/// it (the read itself costs the operation's 1 unit, taken first).
pub async fn account_budget(b: &Broker, token: &str) -> i64 {
    let body = json!({"query": "{ budget { remaining } }"});
    let a = post(b, Some(token), GQL_JSON, &body).await;
    assert_eq!(a.status, 200, "{}", a.text);
    a.body["data"]["budget"]["remaining"].as_i64().unwrap()
}

/// What the account of `token` is charged, besides the budget reads, once
/// it has been charged at least `expected` since a read that saw `before`:
/// the stream's charge reaches the account through its supervisor, so the
/// reads go on until it lands (each read's own unit counted out).
pub async fn charged_since(b: &Broker, token: &str, before: i64, expected: i64) -> i64 {
    let deadline = Instant::now() + PATIENCE;
    let mut reads = 0;
    loop {
        let now = account_budget(b, token).await;
        reads += 1;
        let charged = before - now - reads;
        if charged >= expected || Instant::now() > deadline {
            return charged;
        }
        tokio::task::yield_now().await;
    }
}

/// An SSE stream of `channels` for `token`, from `position` when given;
/// open (the refusal otherwise).
pub async fn sse(
    b: &Broker,
    token: &str,
    channels: &[&str],
    position: Option<&str>,
) -> Result<sse_client::Sse, sse_client::Refused> {
    let query: String = channels.iter().map(|c| format!("&channel={c}")).collect();
    let headers: Vec<(&str, &str)> = position.map(|p| ("Last-Event-ID", p)).into_iter().collect();
    sse_client::open(b.addr, &format!("/v1/sse?token={token}{query}"), &headers).await
}

/// Two messages on `channel`; the `seq` of the first (a `since` that
/// recovers the second).
async fn history(b: &Broker, channel: &str) -> u64 {
    let mut seqs = Vec::new();
    for i in 0..2 {
        let r = b.publish_http(channel, json!(i)).await;
        assert_eq!(r.status(), 200);
        let body: Value = r.json().await.unwrap();
        seqs.push(body["seq"].as_u64().unwrap());
    }
    seqs[0]
}

#[actix_rt::test]
async fn an_sse_stream_of_8_channels_costs_what_8_socket_subscribes_cost() {
    let b = Broker::start(&plan(5, 2, 6));
    let token = b.token("streamer");
    let before = account_budget(&b, &token).await;
    let channels: Vec<String> = (0..8).map(|i| format!("doc:s{i}")).collect();
    let names: Vec<&str> = channels.iter().map(String::as_str).collect();
    let mut s = sse(&b, &token, &names, None).await.expect("opened");
    assert!(s.event().await.is("welcome"));
    assert_eq!(charged_since(&b, &token, before, 40).await, 40);
    // A channel from a position costs subscribe + recovery = 7, above
    // max_single (6): refused before anything is charged, as a socket's
    // subscribe with `since` would be.
    let mut position = Position::new(&names);
    position.set("doc:s0", 1);
    let before = account_budget(&b, &token).await;
    let (status, body, _) = sse(&b, &token, &names, Some(position.encode()))
        .await
        .err()
        .expect("refused");
    assert_eq!(
        (status, body["error"].as_str()),
        (422, Some("cost_exceeds_max")),
        "{body}"
    );
    assert_eq!(
        account_budget(&b, &token).await,
        before - 1,
        "only the read"
    );
    drop(s);
}

#[actix_rt::test]
async fn a_graphql_ws_subscription_costs_subscribe_of_the_frame_bucket() {
    let b = Broker::start(&plan(5, 2, 6));
    let mut c = connected(&b, &b.token("gql")).await;
    // A fresh bucket of 20 holds four subscriptions at 5; the fifth is
    // refused with its price.
    for i in 1..=5 {
        subscribe(&mut c, &format!("p{i}"), SUB, json!({"c": "doc:g"})).await;
    }
    let e = c.until(|v| v["type"] == "error").await;
    assert_eq!(e["id"], "p5", "{e}");
    let x = &e["payload"][0]["extensions"];
    assert_eq!(
        (x["code"].as_str(), x["cost"].as_u64()),
        (Some("RATE_LIMITED"), Some(5)),
        "{e}"
    );
    // The four took their places: a message reaches each.
    live(&b, "doc:g", 4).await;
    assert_eq!(b.publish_http("doc:g", json!(1)).await.status(), 200);
    let mut got = Vec::new();
    for _ in 1..=4 {
        let m = c.next_json().await;
        assert_eq!(m["type"], "next", "{m}");
        got.push(m["id"].as_str().unwrap().to_owned());
    }
    got.sort();
    assert_eq!(got, ["p1", "p2", "p3", "p4"]);
}

#[actix_rt::test]
async fn a_graphql_ws_subscription_from_a_position_over_max_single_is_too_expensive() {
    let b = Broker::start(&plan(1, 6, 6));
    let since = history(&b, "doc:h").await;
    let mut c = connected(&b, &b.token("gql")).await;
    subscribe(&mut c, "h", SUB, json!({"c": "doc:h", "s": since})).await;
    let e = next_for(&mut c, "h").await;
    assert_eq!(e["type"], "error", "{e}");
    let x = &e["payload"][0]["extensions"];
    assert_eq!(
        (x["code"].as_str(), x["cost"].as_u64(), x["max"].as_u64()),
        (Some("QUERY_TOO_EXPENSIVE"), Some(7), Some(6)),
        "{e}"
    );
}

/// The price of subscribing to one channel from a position, measured from
/// outside on each front, with `subscribe = 1` and `recovery = 6`.
#[actix_rt::test]
async fn every_front_charges_the_same_for_the_same_subscription() {
    let b = Broker::start(&plan(1, 6, 20));
    let since = history(&b, "doc:x").await;

    // /v1/ws: the connection's budget before and after.
    let mut ws = b.client("ws").await;
    let budget = json!({"type":"budget"});
    let full = ws.call(budget.clone(), 1).await["connection"]["remaining"]
        .as_u64()
        .unwrap();
    let ack = ws
        .call(
            json!({"type":"subscribe","channel":"doc:x","since":since}),
            2,
        )
        .await;
    assert_eq!(ack["type"], "ack", "{ack}");
    let left = ws.call(budget, 3).await["connection"]["remaining"]
        .as_u64()
        .unwrap();
    let on_ws = full - left;

    // SSE: the account budget, read with the stream's token.
    let token = b.token("sse");
    let before = account_budget(&b, &token).await;
    let mut position = Position::new(&["doc:x"]);
    position.set("doc:x", since);
    let mut s = sse(&b, &token, &["doc:x"], Some(position.encode()))
        .await
        .expect("opened");
    assert!(s.event().await.is("welcome"));
    let on_sse = charged_since(&b, &token, before, 7).await as u64;

    // gRPC: the API key's bucket, read by an HTTP publish (1) either side.
    let remaining = |r: &reqwest::Response| -> u64 {
        r.headers()["x-ratelimit-remaining"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap()
    };
    let before = remaining(&b.publish_http("doc:y", json!(0)).await);
    let mut g = connect(&b).await;
    let call = g
        .subscribe(authed(subscribe_req(&[("doc:x", Some(since))]), API_KEY))
        .await
        .expect("subscribed");
    let after = remaining(&b.publish_http("doc:y", json!(0)).await);
    let on_grpc = before - after - 1;

    // graphql-ws: what the frame bucket (burst 20) has left after the
    // subscription, counted in subscriptions of 1 until one is refused.
    let mut c = connected(&b, &b.token("gql")).await;
    subscribe(&mut c, "x", SUB, json!({"c": "doc:x", "s": since})).await;
    let first = next_for(&mut c, "x").await;
    assert_eq!(first["type"], "next", "{first}");
    for i in 1..=20 {
        subscribe(&mut c, &format!("p{i}"), SUB, json!({"c": "doc:z"})).await;
    }
    let e = c.until(|v| v["type"] == "error").await;
    let admitted: u64 = e["id"].as_str().unwrap()[1..].parse::<u64>().unwrap() - 1;
    let on_graphql_ws = 20 - admitted;

    assert_eq!(
        [on_ws, on_sse, on_grpc, on_graphql_ws],
        [7; 4],
        "/v1/ws, SSE, gRPC, graphql-ws"
    );
    drop((s, call));
}
