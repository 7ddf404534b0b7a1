//! §10 across a cluster: a ban, an unban and a disconnect taken on one node
//! apply on every node, a node that starts later reads the bans in force,
//! and the overview from any node lists every live node (and drops a
//! stopped one). The body runs on one Redis and on a three-master Redis
//! Cluster.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::admin::{admin_config, ban, close_frame, disconnect, overview, unban};
use crate::common::{Broker, PATIENCE};
use crate::redis_cluster::{Backend, on_both};

on_both!(a_ban_on_one_node_closes_and_refuses_on_every_node_through_redis);

/// Polls (with a deadline) until the overview from `from` lists exactly
/// `want` as its nodes, cluster-wide.
async fn overview_lists(from: &Broker, want: &[&str]) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let o = overview(from).await;
        let ids: Vec<&str> = o["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|n| n["id"].as_str())
            .collect();
        if ids == want {
            assert_eq!(o["clusterWide"], true, "{o}");
            return;
        }
        assert!(Instant::now() < deadline, "nodes in the overview: {ids:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn a_ban_on_one_node_closes_and_refuses_on_every_node_through_redis(redis: &impl Backend) {
    let prefix = format!("adm{}x{}:", std::process::id(), crate::common::unique());
    let cfg = |id: &str| {
        format!(
            "[node]\nid = \"{id}\"\n[cluster]\nmode = \"{}\"\nredis_url = \"{}\"\nkey_prefix = \"{prefix}\"\nlease_ms = 1000\n{}",
            redis.mode(),
            redis.url(),
            admin_config()
        )
    };
    let a = Broker::start(&cfg("a"));
    let b = Broker::start(&cfg("b"));
    for n in [&a, &b] {
        let deadline = Instant::now() + PATIENCE;
        while !n.node.bridge.is_up() {
            assert!(Instant::now() < deadline, "bridge never came up");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let mut on_b = b.client("acme").await;
    let answer = ban(&a, json!({"account":"acme","ttlMs":60_000})).await;
    assert_eq!(answer["closed"], 0, "node a had none of its sockets");
    assert_eq!(close_frame(&mut on_b).await, (4003, "banned".into()));
    let Err((status, body, retry)) = b.try_connect(&b.token("acme")).await else {
        panic!("node b admitted a banned account");
    };
    assert_eq!((status, body["error"].as_str()), (403, Some("banned")));
    assert!(retry.unwrap() >= 55);

    // A node that starts after the ban reads it from Redis.
    let late = Broker::start(&cfg("late"));
    let deadline = Instant::now() + PATIENCE;
    while late.node.admin.bans.check(Some("acme"), None).is_none() {
        assert!(
            Instant::now() < deadline,
            "the late node never learned the ban"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Disconnect by connection id reaches the node that holds it.
    let mut other = b.client("other").await;
    let conn = b.node.sockets.iter().next().unwrap().label.to_string();
    let answer = disconnect(&a, json!({"connId": conn})).await;
    assert_eq!(answer["closed"], 0);
    assert_eq!(close_frame(&mut other).await, (4003, "disconnected".into()));

    // Unban on b lifts it on a.
    unban(&b, json!({"account":"acme"})).await;
    let deadline = Instant::now() + PATIENCE;
    while a.node.admin.bans.check(Some("acme"), None).is_some() {
        assert!(Instant::now() < deadline, "the unban never reached node a");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    a.client("acme").await;

    // The overview from one node lists every node, and a stopped node
    // drops out once its summary expires.
    overview_lists(&a, &["a", "b", "late"]).await;
    drop(late);
    overview_lists(&b, &["a", "b"]).await;
}
