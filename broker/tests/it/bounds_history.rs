//! Issue 26, part B: history and counters are bounded node-wide, not only
//! per channel: `history.max_bytes` evicts the oldest messages first,
//! whichever channel holds them.

use serde_json::json;

use crate::common::Broker;

#[tokio::test]
async fn the_node_wide_history_budget_evicts_the_oldest_messages_across_channels() {
    // 1 MiB for the whole node; each channel may keep 100 messages.
    let broker = Broker::start("[history]\nsize = 100\nmax_bytes = 1048576\n");
    let data = format!("\"{}\"", "x".repeat(8 << 10));
    // 300 messages of 8 KiB on three channels, oldest first: 2.4 MiB,
    // over twice the budget.
    let mut first = Vec::new();
    for ch in ["doc:old", "doc:mid", "doc:new"] {
        first.push(broker.node.publish(ch, &data, "test").await);
        for _ in 1..100 {
            broker.node.publish(ch, &data, "test").await;
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
