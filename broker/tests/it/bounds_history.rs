//! Issue 26, part B: history and counters are bounded node-wide, not only
//! per channel: `history.max_bytes` evicts the oldest messages first,
//! whichever channel holds them.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::common::{Broker, PATIENCE};
use crate::redis_server::RedisServer;

#[tokio::test]
async fn the_node_wide_history_budget_evicts_the_oldest_messages_across_channels() {
    // 1 MiB for the whole node; each channel may keep 100 messages.
    let broker = Broker::start("[history]\nsize = 100\nmax_bytes = 1048576\n");
    let data = format!("\"{}\"", "x".repeat(8 << 10));
    // 300 messages of 8 KiB on three channels, oldest first: 2.4 MiB,
    // over twice the budget.
    let mut first = Vec::new();
    for ch in ["doc:old", "doc:mid", "doc:new"] {
        first.push(broker.node.publish(ch, &data, "test", None).await.seq);
        for _ in 1..100 {
            broker.node.publish(ch, &data, "test", None).await;
        }
    }
    let held = broker.metric("tidegate_history_bytes").await;
    assert!(
        held > 0.0 && held <= 1_048_576.0,
        "the node holds {held} bytes of history"
    );
    let mut c = broker.client("acme").await;
    // The oldest channel lost its history first: not recoverable.
    let old = c
        .call(
            json!({"type":"subscribe","channel":"doc:old","since":first[0] - 1}),
            1,
        )
        .await;
    assert_eq!(old["recovered"], false, "{old}");
    // The newest channel's 100 messages (800 KiB) are all still held.
    let new = c
        .call(
            json!({"type":"subscribe","channel":"doc:new","since":first[2] - 1}),
            2,
        )
        .await;
    assert_eq!(new["recovered"], true, "{new}");
    for i in 0..100 {
        let m = c.until(|v| v["type"] == "message").await;
        assert_eq!(m["seq"].as_u64().unwrap(), first[2] + i, "{m}");
    }
}

/// `PTTL key` on the test's own Redis (-2: no such key, -1: no TTL).
async fn pttl(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query_async(conn).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mere_subscribe_leaves_no_long_lived_counter_and_connection_counts_expire() {
    let redis = RedisServer::start();
    let prefix = crate::cluster::prefix();
    let b = crate::cluster::node(&redis, "n1", &prefix, "[history]\nttl_ms = 60000\n");
    crate::cluster::bridge_up(&b, true).await;
    let client = redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();

    // A subscribe to a channel nobody publishes on: its counter lives no
    // longer than the history would (60 s), not a day.
    let mut c = crate::cluster::subscribed(&b, "acme", "doc:quiet").await;
    let seq_key = format!("{prefix}seq:doc:quiet");
    let ttl = pttl(&mut conn, &seq_key).await;
    assert!((1..=60_000).contains(&ttl), "{seq_key} expires in {ttl} ms");
    // A publish gives it the full lifetime.
    assert_eq!(b.publish_http("doc:quiet", json!(1)).await.status(), 200);
    c.until(|v| v["type"] == "message").await;
    assert!(pttl(&mut conn, &seq_key).await > 60_000);

    // The account's connection counts expire (three 1 s leases), and the
    // node's lease renewal keeps pushing that back while it holds them.
    let conns = format!("{prefix}conns:acme");
    let first = pttl(&mut conn, &conns).await;
    assert!(
        (1..=3_000).contains(&first),
        "{conns} expires in {first} ms"
    );
    // Renewed: a TTL above the one read just before (against `first`
    // alone, a `first` read right after a renewal could never be passed).
    let deadline = Instant::now() + PATIENCE;
    let mut before = first;
    loop {
        let now = pttl(&mut conn, &conns).await;
        assert!((1..=3_000).contains(&now), "{conns} expires in {now} ms");
        if now > before {
            break;
        }
        before = now;
        assert!(
            Instant::now() < deadline,
            "the TTL of {conns} was never renewed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
