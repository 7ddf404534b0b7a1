//! Faults injected into a real Redis on purpose (issue 15): Redis slow
//! rather than dead, and Redis dropping every connection again and again.
//! The node must keep its pending work bounded, keep serving its local
//! traffic, and come back whole.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::cluster::{bridge_up, node, prefix, subscribed};
use crate::common::{Got, PATIENCE};
use crate::redis_server::RedisServer;

/// One command to the test's Redis on a connection of its own (through the
/// `redis` crate, so no `redis-cli` is needed). `CLIENT KILL` with a filter
/// spares the connection that sends it.
fn redis_cmd(redis: &RedisServer, args: &[&str]) -> redis::Value {
    let mut conn = redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .expect("the test reaches its Redis");
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query(&mut conn).expect("Redis accepts the command")
}

/// Redis paused (every client's commands wait, below the command timeout):
/// HTTP publishes pile up, but never more than `cluster.max_pending`
/// commands are in flight, and a socket's own traffic (a `budget` call)
/// is answered while they wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_paused_keeps_pending_work_bounded_and_local_traffic_moving() {
    let redis = RedisServer::start();
    // (The helper's config ends inside `[cluster]`.)
    let n = node(&redis, "a", &prefix(), "max_pending = 16\n");
    bridge_up(&n, true).await;
    let mut local = n.client("local").await;

    assert_eq!(
        redis_cmd(&redis, &["CLIENT", "PAUSE", "800", "ALL"]),
        redis::Value::Okay
    );
    let publishes: Vec<_> = (0..60)
        .map(|i| {
            let url = n.url("/v1/publish");
            tokio::spawn(async move {
                reqwest::Client::new()
                    .post(url)
                    .bearer_auth(crate::common::API_KEY)
                    .json(&json!({"channel": "doc:paused", "data": i}))
                    .send()
                    .await
                    .map(|r| r.status().as_u16())
            })
        })
        .collect();
    // Wait until the pause holds work in flight.
    let deadline = Instant::now() + PATIENCE;
    while n.node.metrics.bridge_pending.get() == 0 {
        assert!(Instant::now() < deadline, "nothing ever waited on Redis");
        tokio::task::yield_now().await;
    }
    let budget = local.call(json!({"type":"budget"}), 1).await;
    assert_eq!(budget["type"], "budget");
    let waiting = publishes.iter().filter(|p| !p.is_finished()).count();
    let pending = n.node.metrics.bridge_pending.get();
    assert!(
        waiting > 0,
        "the budget call was answered while publishes still waited on Redis"
    );
    assert!(
        (1..=16).contains(&pending),
        "{pending} commands in flight, max_pending is 16"
    );
    for p in publishes {
        let status = p.await.unwrap().expect("every publish is answered");
        assert_eq!(status, 200, "a publish failed while Redis was slow");
        assert!(n.node.metrics.bridge_pending.get() <= 16);
    }
    let deadline = Instant::now() + PATIENCE;
    while n.node.metrics.bridge_pending.get() != 0 {
        assert!(Instant::now() < deadline, "pending work never drained");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Redis drops every connection (commands and subscriptions) ten times in
/// a row; afterwards both nodes are back and a message crosses between
/// them again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_dropping_connections_repeatedly_is_survived() {
    let redis = RedisServer::start();
    let p = prefix();
    let (a, b) = (node(&redis, "a", &p, ""), node(&redis, "b", &p, ""));
    bridge_up(&a, true).await;
    bridge_up(&b, true).await;
    let mut on_a = subscribed(&a, "s", "doc:kill").await;
    let mut pub_b = b.client("p").await;
    for round in 0..10u64 {
        redis_cmd(&redis, &["CLIENT", "KILL", "TYPE", "normal"]);
        redis_cmd(&redis, &["CLIENT", "KILL", "TYPE", "pubsub"]);
        // Traffic during the drops is answered, one way or another.
        let ack = pub_b
            .call(
                json!({"type":"publish","channel":"doc:kill","data":round}),
                round,
            )
            .await;
        assert!(ack["type"] == "ack" || ack["type"] == "error", "{ack}");
    }
    bridge_up(&a, true).await;
    bridge_up(&b, true).await;
    // Once back, a publish on b reaches the subscriber on a.
    let deadline = Instant::now() + PATIENCE;
    let mut id = 100u64;
    'crossed: loop {
        assert!(
            Instant::now() < deadline,
            "no message crossed after the drops"
        );
        id += 1;
        let ack = pub_b
            .call(
                json!({"type":"publish","channel":"doc:kill","data":"after"}),
                id,
            )
            .await;
        assert_eq!(ack["type"], "ack", "{ack}");
        loop {
            match tokio::time::timeout(Duration::from_millis(200), on_a.next()).await {
                Ok(Got::Json(m)) if m["type"] == "message" && m["data"] == "after" => {
                    break 'crossed;
                }
                Ok(Got::Json(_)) => {}
                Ok(other) => panic!("the subscriber on a went away: {other:?}"),
                Err(_) => break,
            }
        }
    }
    assert_eq!(a.node.metrics.bridge_pending.get(), 0);
}
