//! GraphQL subscriptions across the nodes of a cluster on a real Redis
//! (§12, §7): a subscription on one node gets what another node's HTTP
//! publish and `publish` mutation sent, in `seq` order, recovering after
//! `since`; a token's account budget is one budget across both nodes'
//! sockets, and its breach closes them all with 1008.

use serde_json::json;

use crate::cluster::{bridge_up, node, prefix};
use crate::common::API_KEY;
use crate::graphql_ws::{SUB, connected, live, next_for, subscribe};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_and_budgets_span_the_cluster() {
    let redis = crate::redis_server::RedisServer::start();
    let p = prefix();
    let extra = "[plans.free]\naccount_burst = 12\naccount_messages_per_sec = 0.01\naccount_sample_every = 1\n";
    let a = node(&redis, "a", &p, extra);
    let b = node(&redis, "b", &p, extra);
    bridge_up(&a, true).await;
    bridge_up(&b, true).await;
    // A position first, so the subscription recovers whatever is published
    // while it joins (the join completes through Redis).
    let r = b.publish_http("doc:x", json!(0)).await;
    let s0 = r.json::<serde_json::Value>().await.unwrap()["seq"]
        .as_u64()
        .unwrap();
    let mut on_a = connected(&a, API_KEY).await;
    subscribe(&mut on_a, "s", SUB, json!({"c":"doc:x","s": s0})).await;
    let mut on_b = connected(&b, API_KEY).await;
    subscribe(
        &mut on_b,
        "m",
        "mutation { publish(channel: \"doc:x\", data: 1) { seq } }",
        json!({}),
    )
    .await;
    let m = next_for(&mut on_b, "m").await;
    let s1 = m["payload"]["data"]["publish"]["seq"].as_u64().unwrap();
    let r = b.publish_http("doc:x", json!(2)).await;
    let s2 = r.json::<serde_json::Value>().await.unwrap()["seq"]
        .as_u64()
        .unwrap();
    let mut got = Vec::new();
    while got.len() < 2 {
        let m = next_for(&mut on_a, "s").await;
        assert_eq!(m["type"], "next", "{m}");
        got.push(m["payload"]["data"]["messages"]["seq"].as_u64().unwrap());
    }
    assert_eq!(got, vec![s1, s2], "cluster-wide, in order, once");
    // One account budget (12) across both nodes: three operations at 3 on
    // a, two on b: the last refused, and every socket of the account
    // closes with 1008 on both nodes.
    let token = a.token("acme2");
    let mut ta = connected(&a, &token).await;
    let mut tb = connected(&b, &token).await;
    for id in ["1", "2", "3"] {
        subscribe(&mut ta, id, SUB, json!({"c": format!("doc:{id}")})).await;
    }
    for id in ["1", "2", "3"] {
        live(&a, &format!("doc:{id}"), 1).await;
    }
    subscribe(&mut tb, "4", SUB, json!({"c":"doc:4"})).await;
    subscribe(&mut tb, "5", SUB, json!({"c":"doc:5"})).await;
    assert_eq!(tb.closed().await, Some(1008));
    assert_eq!(
        ta.closed().await,
        Some(1008),
        "the breach reaches the other node"
    );
}
