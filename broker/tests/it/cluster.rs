//! The Redis bridge: several nodes (each a real broker on its own port)
//! sharing fan-out, `seq`, history and account state through a real Redis
//! this test starts, kills and restarts.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{Broker, Client, PATIENCE, metric_value};
use crate::redis_cluster::{Backend, on_both};
use crate::redis_server::RedisServer;

pub fn prefix() -> String {
    format!("t{}x{}:", std::process::id(), crate::common::unique())
}

/// A node of a cluster on `redis` (one server or a Redis Cluster), with
/// `extra` config.
pub fn node(redis: &impl Backend, id: &str, prefix: &str, extra: &str) -> Broker {
    Broker::start(&node_config(redis, id, prefix, extra))
}

/// The config overrides of [`node`] (what a reload of such a node starts
/// from).
pub fn node_config(redis: &impl Backend, id: &str, prefix: &str, extra: &str) -> String {
    format!(
        "[node]\nid = \"{id}\"\n[cluster]\nmode = \"{}\"\nredis_url = \"{}\"\nkey_prefix = \"{prefix}\"\nlease_ms = 1000\n{extra}",
        redis.mode(),
        redis.url()
    )
}

on_both!(
    a_message_published_on_any_node_reaches_every_subscriber_once_in_order,
    the_subscribe_ack_carries_the_cluster_position_on_every_node,
    subscribing_again_to_recover_does_not_keep_the_node_listening_after_unsubscribe,
    history_published_on_one_node_is_recovered_through_another,
    an_abusive_account_spread_over_nodes_is_closed_1008_on_every_node,
    the_connection_cap_is_cluster_wide,
);

/// Two nodes `a` and `b` of a cluster on `redis`, with `extra` config,
/// both bridged.
pub async fn two_nodes(redis: &impl Backend, prefix: &str, extra: &str) -> (Broker, Broker) {
    let (a, b) = (
        node(redis, "a", prefix, extra),
        node(redis, "b", prefix, extra),
    );
    bridge_up(&a, true).await;
    bridge_up(&b, true).await;
    (a, b)
}

/// Waits (polling, with a deadline) for a node's bridge to be up or down.
pub async fn bridge_up(b: &Broker, up: bool) {
    let deadline = Instant::now() + PATIENCE;
    while b.node.bridge.is_up() != up {
        assert!(
            Instant::now() < deadline,
            "bridge never became {}",
            if up { "up" } else { "down" }
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub async fn subscribed(b: &Broker, account: &str, channel: &str) -> Client {
    let mut c = b.client(account).await;
    let ack = c
        .call(json!({"type":"subscribe","channel":channel}), 1)
        .await;
    assert_eq!(ack["type"], "ack", "{ack}");
    c
}

/// Reads `n` messages, asserting strictly increasing seqs; returns them.
async fn messages(c: &mut Client, n: usize) -> Vec<(u64, Value)> {
    let mut out: Vec<(u64, Value)> = Vec::new();
    while out.len() < n {
        let m = c.until(|v| v["type"] == "message").await;
        let seq = m["seq"].as_u64().unwrap();
        if let Some((last, _)) = out.last() {
            assert!(seq > *last, "seq went from {last} to {seq}");
        }
        out.push((seq, m["data"].clone()));
    }
    out
}

async fn a_message_published_on_any_node_reaches_every_subscriber_once_in_order(
    redis: &impl Backend,
) {
    let p = prefix();
    let (a, b) = (node(redis, "a", &p, ""), node(redis, "b", &p, ""));
    bridge_up(&a, true).await;
    bridge_up(&b, true).await;
    let mut on_a = subscribed(&a, "s1", "doc:x").await;
    let mut on_b = subscribed(&b, "s2", "doc:x").await;
    let mut pub_a = a.client("p1").await;
    for i in 0..10u64 {
        let ack = pub_a
            .call(
                json!({"type":"publish","channel":"doc:x","data":i}),
                100 + i,
            )
            .await;
        assert_eq!(ack["type"], "ack");
        // Interleave an HTTP publish on the other node.
        assert_eq!(b.publish_http("doc:x", json!(1000 + i)).await.status(), 200);
    }
    let got_a = messages(&mut on_a, 20).await;
    let got_b = messages(&mut on_b, 20).await;
    assert_eq!(
        got_a, got_b,
        "both nodes deliver the same messages, in the same order"
    );
    let distinct: HashSet<_> = got_a.iter().map(|(s, _)| *s).collect();
    assert_eq!(distinct.len(), 20, "exactly once");
    // Nothing more arrives: the next frame answers a later request.
    assert_eq!(
        on_b.call(json!({"type":"budget"}), 9).await["type"],
        "budget"
    );
    // Each Redis script call is timed, by script.
    let text = a.metrics().await;
    let count = |s: &str| {
        metric_value(
            &text,
            &format!("tidegate_redis_script_duration_seconds_count{{script=\"{s}\"}}"),
        )
    };
    assert!(count("publish") >= 10.0, "{text}");
    assert!(count("bucket") >= 1.0, "{text}");
}

async fn the_subscribe_ack_carries_the_cluster_position_on_every_node(redis: &impl Backend) {
    let p = prefix();
    let (a, b) = (node(redis, "a", &p, ""), node(redis, "b", &p, ""));
    bridge_up(&a, true).await;
    bridge_up(&b, true).await;
    // A channel no node has seen: the position exists before any message,
    // and the first publish, wherever it happens, is right above it.
    let mut on_b = b.client("s").await;
    let ack = on_b
        .call(json!({"type":"subscribe","channel":"doc:p"}), 1)
        .await;
    let pos = ack["seq"].as_u64().expect("the ack carries seq");
    let mut pub_a = a.client("p").await;
    let first = pub_a
        .call(json!({"type":"publish","channel":"doc:p","data":1}), 2)
        .await;
    assert_eq!(first["seq"].as_u64(), Some(pos + 1));
    assert_eq!(messages(&mut on_b, 1).await[0].0, pos + 1);
    // A node that has never held the channel answers with the cluster's
    // last seq; `since` from the first ack recovers what followed.
    let mut on_a = a.client("s2").await;
    let ack = on_a
        .call(json!({"type":"subscribe","channel":"doc:p","since":pos}), 3)
        .await;
    assert_eq!(
        (ack["recovered"].clone(), ack["seq"].as_u64()),
        (json!(true), Some(pos + 1))
    );
    assert_eq!(messages(&mut on_a, 1).await[0].0, pos + 1);
    let mut fresh = b.client("s3").await;
    let ack = fresh
        .call(json!({"type":"subscribe","channel":"doc:p"}), 4)
        .await;
    assert_eq!(ack["seq"].as_u64(), Some(pos + 1));
}

/// Redis subscribers of a channel's topic (the nodes listening to it),
/// summed over every master (on Redis Cluster the shard's sharded
/// subscribers of the hash-tagged topic).
async fn listeners(redis: &impl Backend, prefix: &str, channel: &str) -> u64 {
    let (cmd, topic) = if redis.mode() == "redis" {
        ("NUMSUB", format!("{prefix}ch:{channel}"))
    } else {
        ("SHARDNUMSUB", format!("{prefix}ch:{{{channel}}}"))
    };
    let mut total = 0;
    for port in redis.ports() {
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let (_, n): (String, u64) = redis::cmd("PUBSUB")
            .arg(cmd)
            .arg(&topic)
            .query_async(&mut conn)
            .await
            .unwrap();
        total += n;
    }
    total
}

async fn subscribing_again_to_recover_does_not_keep_the_node_listening_after_unsubscribe(
    redis: &impl Backend,
) {
    let p = prefix();
    let a = node(redis, "a", &p, "");
    bridge_up(&a, true).await;
    let mut c = subscribed(&a, "s", "doc:r").await;
    let pos = c
        .call(json!({"type":"subscribe","channel":"doc:r"}), 2)
        .await["seq"]
        .as_u64()
        .unwrap();
    // What the SDK does after slow_consumer: the same channel, with since.
    let ack = c
        .call(json!({"type":"subscribe","channel":"doc:r","since":pos}), 3)
        .await;
    assert_eq!(ack["recovered"], true, "{ack}");
    assert_eq!(listeners(redis, &p, "doc:r").await, 1);
    c.call(json!({"type":"unsubscribe","channel":"doc:r"}), 4)
        .await;
    let deadline = Instant::now() + PATIENCE;
    while listeners(redis, &p, "doc:r").await != 0 {
        assert!(Instant::now() < deadline, "the node still listens to doc:r");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn history_published_on_one_node_is_recovered_through_another(redis: &impl Backend) {
    let p = prefix();
    let (a, b) = (node(redis, "a", &p, ""), node(redis, "b", &p, ""));
    bridge_up(&a, true).await;
    bridge_up(&b, true).await;
    let mut pub_a = a.client("p").await;
    let mut seqs = Vec::new();
    for i in 0..5 {
        let ack = pub_a
            .call(json!({"type":"publish","channel":"doc:h","data":i}), i)
            .await;
        seqs.push(ack["seq"].as_u64().unwrap());
    }
    let mut c = b.client("s").await;
    let ack = c
        .call(
            json!({"type":"subscribe","channel":"doc:h","since":seqs[0]}),
            50,
        )
        .await;
    assert_eq!(ack["recovered"], true, "{ack}");
    let got = messages(&mut c, 4).await;
    assert_eq!(got.iter().map(|(s, _)| *s).collect::<Vec<_>>(), seqs[1..]);
    // Live messages follow the recovered ones.
    pub_a
        .call(
            json!({"type":"publish","channel":"doc:h","data":"live"}),
            99,
        )
        .await;
    assert_eq!(messages(&mut c, 1).await[0].1, "live");
    let ack = c
        .call(
            json!({"type":"subscribe","channel":"doc:never","since":3}),
            51,
        )
        .await;
    assert_eq!(ack["recovered"], false);
}

async fn an_abusive_account_spread_over_nodes_is_closed_1008_on_every_node(redis: &impl Backend) {
    let p = prefix();
    let limits = "[plans.free]\nmessages_per_sec = 200\nburst = 200\naccount_messages_per_sec = 10\naccount_burst = 50\naccount_sample_every = 5\n";
    let (a, b) = (node(redis, "a", &p, limits), node(redis, "b", &p, limits));
    bridge_up(&a, true).await;
    bridge_up(&b, true).await;
    let mut flooders = vec![a.client("abuser").await, a.client("abuser").await];
    let mut idle_on_b = [b.client("abuser").await, b.client("abuser").await];
    let bystander = b.client("someone-else").await;
    for c in &mut flooders {
        for i in 0..60u64 {
            c.send(json!({"type":"publish","channel":"doc:f","data":i}))
                .await;
        }
    }
    for c in flooders.iter_mut().chain(idle_on_b.iter_mut()) {
        let notice = c.until(|v| v["type"] == "error").await;
        assert_eq!(notice["code"], "account_rate_limited");
        assert_eq!(c.closed().await, Some(1008));
    }
    let mut bystander = bystander;
    assert_eq!(
        bystander.call(json!({"type":"budget"}), 1).await["type"],
        "budget",
        "other accounts are untouched"
    );
}

async fn the_connection_cap_is_cluster_wide(redis: &impl Backend) {
    let p = prefix();
    let cap = "[plans.free]\nmax_connections = 3\n";
    let (a, b) = (node(redis, "a", &p, cap), node(redis, "b", &p, cap));
    bridge_up(&a, true).await;
    bridge_up(&b, true).await;
    let token = a.token("capped");
    let first = a.try_connect(&token).await.unwrap();
    let _second = a.try_connect(&token).await.unwrap();
    let _third = b.try_connect(&token).await.unwrap();
    for broker in [&a, &b] {
        let (status, body, _) = broker.try_connect(&token).await.err().expect("cap reached");
        assert_eq!(
            (status, body["error"].as_str()),
            (429, Some("too_many_connections"))
        );
        assert!(body["message"].as_str().unwrap().contains("3 of 3"));
    }
    drop(first);
    a.wait_sockets(1).await;
    // The release reaches Redis asynchronously: retry until admitted.
    let deadline = Instant::now() + PATIENCE;
    while b.try_connect(&token).await.is_err() {
        assert!(
            Instant::now() < deadline,
            "the freed place never reached the other node"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_outage_keeps_local_traffic_and_delivery_resumes_when_it_returns() {
    let mut redis = RedisServer::start();
    let p = prefix();
    let (a, b) = (node(&redis, "a", &p, ""), node(&redis, "b", &p, ""));
    bridge_up(&a, true).await;
    bridge_up(&b, true).await;
    let mut sub_a = subscribed(&a, "s1", "doc:o").await;
    let mut sub_b = subscribed(&b, "s2", "doc:o").await;
    let mut pub_a = a.client("p").await;
    let before = pub_a
        .call(
            json!({"type":"publish","channel":"doc:o","data":"before"}),
            1,
        )
        .await["seq"]
        .as_u64()
        .unwrap();
    assert_eq!(messages(&mut sub_a, 1).await[0].0, before);
    assert_eq!(messages(&mut sub_b, 1).await[0].0, before);
    // Each node has seen the other's lease: its share will be 1/2.
    for n in [&a, &b] {
        let deadline = Instant::now() + PATIENCE;
        while n.metric("tidegate_cluster_live_nodes").await < 2.0 {
            assert!(Instant::now() < deadline, "the nodes never saw each other");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    redis.kill();
    bridge_up(&a, false).await;
    bridge_up(&b, false).await;
    // Local traffic continues, seq keeps rising on each node.
    let mut during = Vec::new();
    for i in 0..5 {
        let ack = pub_a
            .call(
                json!({"type":"publish","channel":"doc:o","data":format!("during{i}")}),
                10 + i,
            )
            .await;
        during.push(ack["seq"].as_u64().unwrap());
    }
    let got = messages(&mut sub_a, 5).await;
    assert_eq!(got.iter().map(|(s, _)| *s).collect::<Vec<_>>(), during);
    assert!(during[0] > before);
    let text = a.metrics().await;
    assert_eq!(metric_value(&text, "tidegate_cluster_bridge_up"), 0.0);
    assert_eq!(
        metric_value(&text, "tidegate_cluster_bridge_outages_total"),
        1.0,
        "one outage counted, however many commands failed in it"
    );
    assert_eq!(
        metric_value(&text, "tidegate_cluster_bridge_pending_commands"),
        0.0,
        "nothing queued toward Redis"
    );
    assert_eq!(
        reqwest::get(a.url("/readyz")).await.unwrap().status(),
        200,
        "still serving"
    );
    // Limits in force are this node's share of the cluster's (2 nodes).
    let mut fresh = Client::connect(&a.ws_url(), &a.token("new")).await.unwrap();
    let welcome = fresh.next_json().await;
    assert_eq!(welcome["limits"]["maxConnections"], 4);
    assert_eq!(welcome["limits"]["accountBurst"], 100);

    redis.restart();
    bridge_up(&a, true).await;
    bridge_up(&b, true).await;
    let ack = pub_a
        .call(
            json!({"type":"publish","channel":"doc:o","data":"after"}),
            99,
        )
        .await;
    let after = ack["seq"].as_u64().unwrap();
    assert!(
        after > *during.last().unwrap(),
        "the cluster counter was raised above the outage's seqs"
    );
    assert_eq!(messages(&mut sub_a, 1).await[0], (after, json!("after")));
    assert_eq!(
        messages(&mut sub_b, 1).await[0],
        (after, json!("after")),
        "cross-node delivery resumed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_nodes_connections_stop_counting_after_its_lease() {
    let redis = RedisServer::start();
    let p = prefix();
    let config = crate::process::shipped(&[
        ("mode = \"memory\"", "mode = \"redis\""),
        (
            "redis_url = \"redis://127.0.0.1:6379/\"",
            &format!("redis_url = \"{}\"", redis.url()),
        ),
        (
            "key_prefix = \"tidegate:\"",
            &format!("key_prefix = \"{p}\""),
        ),
        ("lease_ms = 10000", "lease_ms = 1000"),
        ("max_connections = 8\n", "max_connections = 2\n"),
        ("id = \"n1\"", "id = \"doomed\""),
    ]);
    let mut doomed = crate::process::Proc::start(&config).await;
    let a = node(&redis, "a", &p, "[plans.free]\nmax_connections = 2\n");
    bridge_up(&a, true).await;
    let deadline = Instant::now() + PATIENCE;
    while metric_value(&doomed.metrics().await, "tidegate_cluster_bridge_up") != 1.0 {
        assert!(
            Instant::now() < deadline,
            "the other node never joined the cluster"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let token = a.token("acct");
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut c = Client::connect(&doomed.ws(), &token).await.unwrap();
        c.next_json().await;
        held.push(c);
    }
    let (status, ..) = a
        .try_connect(&token)
        .await
        .err()
        .expect("2 of 2 open on the other node");
    assert_eq!(status, 429);
    doomed.kill9().await;
    let deadline = Instant::now() + PATIENCE;
    while a.try_connect(&token).await.is_err() {
        assert!(
            Instant::now() < deadline,
            "the dead node's connections never expired"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
