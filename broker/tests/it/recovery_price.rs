//! Issue 42: recovery has one meaning on every front, and a refusal one
//! price. The history a `since` recovers (`recovery_per_kib` per started
//! KiB) is owed by the payer before any of it is sent and never refused,
//! so the same `since` over the same history costs the same units on
//! `/v1/ws`, SSE, gRPC `Subscribe` and graphql-ws; and a refusal of the
//! input (a forbidden channel, more subscriptions than the plan allows)
//! costs `costs.malformed` while `cost_exceeds_max` costs nothing.

use serde_json::{Value, json};
use tidegate::grpc::proto::SubscribeEvent;
use tidegate::grpc::proto::subscribe_event::Event;
use tidegate::protocol::position::Position;
use tonic::Code;

use crate::cluster::{bridge_up, node, prefix};
use crate::common::{API_KEY, Broker, Client};
use crate::graphql::{GQL_JSON, post};
use crate::graphql_ws::{SUB, connected, next_for, subscribe};
use crate::grpc::{authed, connect, subscribe_req};
use crate::redis_server::RedisServer;
use crate::subscription_price::{account_budget, charged_since, sse};

/// An API key on `doc:*`, buckets that refill too slowly to matter in a
/// test (`account_burst` units for the key and each account), an account
/// budget that sees every unit at once, and the plan's `costs`.
fn plan(account_burst: u32, extra: &str, costs: &str) -> String {
    format!(
        "[[api_keys]]\nkey = \"{API_KEY}\"\naccount = \"acme\"\npub_channels = [\"*\"]\nsub_channels = [\"doc:*\"]\n\
         [plans.free]\nburst = 20\nmessages_per_sec = 0.01\naccount_burst = {account_burst}\n\
         account_messages_per_sec = 0.01\naccount_sample_every = 1\n{extra}\
         [plans.free.costs]\n{costs}"
    )
}

/// A subscription at 1 and recovered history at 1 a started KiB.
const RECOVERY: &str = "subscribe = 1\nrecovery = 0\nrecovery_per_kib = 1\nbudget = 0\n";

/// Three messages of 1,000 bytes on `channel`: the `seq` before them (a
/// `since` recovering about 3 KiB) and the last one (a `since` recovering
/// nothing).
async fn three_kib(b: &Broker, channel: &str) -> (u64, u64) {
    let before = b.published(channel, json!("start")).await;
    let mut head = before;
    for _ in 0..3 {
        head = b.published(channel, json!("r".repeat(1000))).await;
    }
    (before, head)
}

/// The API key's balance, as an HTTP publish (1 unit) answers it.
async fn key_balance(b: &Broker) -> i64 {
    let r = b.publish_http("doc:balance", json!(0)).await;
    assert_eq!(r.status(), 200);
    r.headers()["x-ratelimit-remaining"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// What a `/v1/ws` subscribe from `since` cost the account of `token`.
async fn on_ws(b: &Broker, token: &str, since: u64, at_least: i64) -> i64 {
    let before = account_budget(b, token).await;
    let mut ws = Client::connect(&b.ws_url(), token).await.unwrap();
    let sub = json!({"type":"subscribe","channel":"doc:r","since":since});
    let ack = ws.call(sub, 1).await;
    assert_eq!(ack["type"], "ack", "{ack}");
    charged_since(b, token, before, at_least).await
}

/// What an SSE stream of `doc:r` from `since` cost the account of `token`.
async fn on_sse(b: &Broker, token: &str, since: u64, at_least: i64) -> i64 {
    let before = account_budget(b, token).await;
    let mut position = Position::new(&["doc:r"]);
    position.set("doc:r", since);
    let mut s = sse(b, token, &["doc:r"], Some(position.encode()))
        .await
        .expect("opened");
    assert!(s.event().await.is("welcome"));
    charged_since(b, token, before, at_least).await
}

/// What a gRPC `Subscribe` of `doc:r` from `since` cost the API key: the
/// charge is taken before the call answers.
async fn on_grpc(b: &Broker, since: u64) -> i64 {
    let before = key_balance(b).await;
    let mut g = connect(b).await;
    let call = g
        .subscribe(authed(subscribe_req(&[("doc:r", Some(since))]), API_KEY))
        .await
        .expect("subscribed");
    let after = key_balance(b).await;
    drop(call);
    before - after - 1
}

/// What a graphql-ws `messages` subscription of `doc:r` from `since`
/// cost the account of `token` (the operation's price and its recovery;
/// a recovered first message, `first`, arrives once it is paid for).
async fn on_graphql_ws(
    b: &Broker,
    token: &str,
    (since, first): (u64, Option<u64>),
    at_least: i64,
) -> i64 {
    let before = account_budget(b, token).await;
    let mut c = connected(b, token).await;
    subscribe(&mut c, "r", SUB, json!({"c": "doc:r", "s": since})).await;
    if let Some(seq) = first {
        let m = next_for(&mut c, "r").await;
        assert_eq!(m["payload"]["data"]["messages"]["seq"], seq, "{m}");
    }
    charged_since(b, token, before, at_least).await
}

#[actix_rt::test]
async fn the_same_recovery_costs_the_same_units_on_every_front() {
    let b = Broker::start(&plan(100_000, "", RECOVERY));
    let (since, head) = three_kib(&b, "doc:r").await;

    // The recovery alone: a subscription recovering the three messages,
    // less the same subscription from the head (the subscription's own
    // price, and on graphql-ws the operation's).
    let ws = b.token("rec-ws");
    let plain = on_ws(&b, &ws, head, 1).await;
    let on_ws = on_ws(&b, &ws, since, plain + 3).await - plain;
    assert!(on_ws >= 3, "{on_ws}: at least 3 started KiB");

    let token = b.token("rec-sse");
    let plain = on_sse(&b, &token, head, 1).await;
    let on_sse = on_sse(&b, &token, since, plain + on_ws).await - plain;

    let on_grpc = on_grpc(&b, since).await - on_grpc(&b, head).await;

    let token = b.token("rec-gql");
    let plain = on_graphql_ws(&b, &token, (head, None), 1).await;
    let from = (since, Some(since + 1));
    let on_graphql_ws = on_graphql_ws(&b, &token, from, plain + on_ws).await - plain;

    assert_eq!(
        [on_sse, on_grpc, on_graphql_ws],
        [on_ws; 3],
        "SSE, gRPC, graphql-ws against /v1/ws"
    );
}

/// A recovery larger than the payer's whole bucket is delivered, whole and
/// in order, and owed (issue 42: graphql-ws refused it with `RATE_LIMITED`
/// and gRPC with `RESOURCE_EXHAUSTED`, so a history larger than the bucket
/// could never be recovered there).
#[actix_rt::test]
async fn a_recovery_larger_than_the_bucket_is_owed_not_refused_on_grpc_and_graphql_ws() {
    // A key's bucket of 50 units; 20 messages of 4 KiB recover 80.
    let b = Broker::start(&plan(50, "", RECOVERY));
    let since = b.published("doc:big", json!(0)).await;
    for _ in 0..20 {
        b.published("doc:big", json!("b".repeat(4000))).await;
    }
    let mut g = connect(&b).await;
    let mut s = g
        .subscribe(authed(subscribe_req(&[("doc:big", Some(since))]), API_KEY))
        .await
        .expect("owed, not refused")
        .into_inner();
    let mut seqs = Vec::new();
    while seqs.len() < 20 {
        if let SubscribeEvent {
            event: Some(Event::Message(m)),
        } = s.message().await.expect("no error").expect("open")
        {
            seqs.push(m.seq);
        }
    }
    assert_eq!(seqs, (since + 1..=since + 20).collect::<Vec<_>>());
    // The key's next operation waits for the refill: it is in debt.
    let r = b.publish_http("doc:other", json!(0)).await;
    assert_eq!(r.status(), 429);

    let mut c = connected(&b, &b.token("big-gql")).await;
    subscribe(&mut c, "big", SUB, json!({"c": "doc:big", "s": since})).await;
    for seq in since + 1..=since + 20 {
        let m = next_for(&mut c, "big").await;
        assert_eq!(m["type"], "next", "{m}");
        assert_eq!(m["payload"]["data"]["messages"]["seq"], seq, "{m}");
    }
}

/// A `/v1/ws` budget frame's connection balance.
async fn connection_left(ws: &mut Client, id: u64) -> u64 {
    let b: Value = ws.call(json!({"type":"budget"}), id).await;
    b["connection"]["remaining"].as_u64().unwrap()
}

/// A refusal of the input costs `costs.malformed` (3), a refusal by a limit
/// (`cost_exceeds_max`: a subscription from a position costs 1 + 6, above
/// `max_single` 6) nothing, on `/v1/ws`, gRPC and graphql-ws (SSE:
/// `sse_admission`, `subscription_price`).
#[actix_rt::test]
async fn a_refused_input_costs_malformed_and_cost_exceeds_max_nothing_on_every_front() {
    let costs = "subscribe = 1\nrecovery = 6\nmax_single = 6\nmalformed = 3\nbudget = 0\n";
    let b = Broker::start(&plan(100_000, "max_subscriptions = 1\n", costs));

    // /v1/ws: the connection's bucket, seen by `budget` frames (free).
    let mut ws = Client::connect(&b.ws_url(), &b.token("refuse-ws"))
        .await
        .unwrap();
    let mut left = vec![connection_left(&mut ws, 1).await];
    let steps = [
        (
            json!({"type":"subscribe","channel":"secret:x"}),
            "forbidden",
        ),
        (
            json!({"type":"subscribe","channel":"doc:a","since":1}),
            "cost_exceeds_max",
        ),
        (json!({"type":"subscribe","channel":"doc:a"}), "ack"),
        (
            json!({"type":"subscribe","channel":"doc:b"}),
            "too_many_subscriptions",
        ),
    ];
    for (i, (frame, expect)) in steps.into_iter().enumerate() {
        let id = 10 + i as u64;
        let reply = ws.call(frame, id).await;
        let got = reply["code"].as_str().or(reply["type"].as_str());
        assert_eq!(got, Some(expect), "{reply}");
        left.push(connection_left(&mut ws, 100 + id).await);
    }
    let costs: Vec<u64> = left.windows(2).map(|w| w[0] - w[1]).collect();
    assert_eq!(
        costs,
        [3, 0, 1, 3],
        "forbidden, too costly, ack, over the cap"
    );

    // gRPC: the API key's bucket, seen by an HTTP publish either side.
    let mut g = connect(&b).await;
    let before = key_balance(&b).await;
    let refused = g
        .subscribe(authed(subscribe_req(&[("secret:x", None)]), API_KEY))
        .await
        .expect_err("forbidden");
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    let forbidden = before - key_balance(&b).await - 1;
    let before = key_balance(&b).await;
    let refused = g
        .subscribe(authed(subscribe_req(&[("doc:a", Some(1))]), API_KEY))
        .await
        .expect_err("too costly");
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    let too_costly = before - key_balance(&b).await - 1;
    assert_eq!((forbidden, too_costly), (3, 0), "gRPC");

    // graphql-ws: the frame bucket (20). One subscription (1) fills the
    // cap; each one over it costs 3, so six are refused for the cap and
    // the seventh by the bucket, which names its price.
    let mut c = connected(&b, &b.token("refuse-gql")).await;
    subscribe(&mut c, "in", SUB, json!({"c": "doc:g"})).await;
    let mut codes = Vec::new();
    for i in 1..=7 {
        subscribe(&mut c, &format!("p{i}"), SUB, json!({"c": "doc:g"})).await;
        let e = next_for(&mut c, &format!("p{i}")).await;
        assert_eq!(e["type"], "error", "{e}");
        let x = &e["payload"][0]["extensions"];
        codes.push((x["code"].as_str().unwrap().to_owned(), x["cost"].as_u64()));
    }
    let over = ("TOO_MANY_SUBSCRIPTIONS".to_owned(), None);
    let mut expected = vec![over; 6];
    expected.push(("RATE_LIMITED".to_owned(), Some(3)));
    assert_eq!(codes, expected, "graphql-ws");
}

/// The debt is kept where the buckets are: in a cluster, in Redis (the
/// bucket scripts' `owed` flag). A gRPC call recovering more than the
/// key's bucket, and a graphql-ws subscription recovering more than the
/// token's account budget, are delivered; the key and the account are in
/// debt after them, cluster-wide.
#[actix_rt::test]
async fn in_a_cluster_the_debt_is_taken_in_redis() {
    let redis = RedisServer::start();
    let b = node(&redis, "a", &prefix(), &plan(50, "", RECOVERY));
    bridge_up(&b, true).await;
    let since = b.node.publish("doc:big", "0", "test", None).await.seq;
    let data = format!("\"{}\"", "b".repeat(4000));
    for _ in 0..20 {
        b.node.publish("doc:big", &data, "test", None).await;
    }
    let mut g = connect(&b).await;
    let mut s = g
        .subscribe(authed(subscribe_req(&[("doc:big", Some(since))]), API_KEY))
        .await
        .expect("owed, not refused")
        .into_inner();
    let r = b.publish_http("doc:other", json!(0)).await;
    assert_eq!(r.status(), 429, "the key is in debt");
    let mut seqs = Vec::new();
    while seqs.len() < 20 {
        if let SubscribeEvent {
            event: Some(Event::Message(m)),
        } = s.message().await.expect("no error").expect("open")
        {
            seqs.push(m.seq);
        }
    }
    assert_eq!(seqs, (since + 1..=since + 20).collect::<Vec<_>>());

    let token = b.token("big-gql-cluster");
    let mut c = connected(&b, &token).await;
    subscribe(&mut c, "big", SUB, json!({"c": "doc:big", "s": since})).await;
    let first = next_for(&mut c, "big").await;
    assert_eq!(
        first["payload"]["data"]["messages"]["seq"],
        since + 1,
        "{first}"
    );
    // Paid before the first message: the account's next operation waits.
    let body = json!({"query": "{ budget { remaining } }"});
    let a = post(&b, Some(&token), GQL_JSON, &body).await;
    assert_eq!(a.status, 429, "the account is in debt: {}", a.text);
}
