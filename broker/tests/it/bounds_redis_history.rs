//! Issue 26: the history held in Redis is bounded over all channels, not
//! only per channel: `history.cluster_max_bytes` evicts the oldest
//! messages first, whichever channel (and whichever master) holds them,
//! and what is left still recovers. Read back from Redis itself.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::cluster::{prefix, two_nodes};
use crate::cluster_sharded::master;
use crate::common::PATIENCE;
use crate::redis_cluster::{Backend, on_both};

on_both!(
    redis_history_stays_under_the_cluster_budget_oldest_first,
    a_message_leaves_redis_history_after_the_ttl_though_its_channel_stays_busy,
);

/// The budget of the test: 1 MiB for the whole cluster.
const BUDGET: usize = 1 << 20;

/// Every `hist:` list under `prefix`, on every master: channel → the
/// length and `seq` of each held message.
async fn held(redis: &impl Backend, prefix: &str) -> HashMap<String, Vec<(usize, u64)>> {
    let mut lists = HashMap::new();
    for port in redis.ports() {
        let mut conn = master(port).await;
        let mut cursor = 0u64;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(format!("{prefix}hist:*"))
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut conn)
                .await
                .unwrap();
            for key in keys {
                let msgs: Vec<Vec<u8>> = redis::cmd("LRANGE")
                    .arg(&key)
                    .arg(0)
                    .arg(-1)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                let channel = key[prefix.len() + "hist:".len()..]
                    .trim_start_matches('{')
                    .trim_end_matches('}')
                    .to_owned();
                let msgs = msgs.iter().map(|m| {
                    let v: serde_json::Value = serde_json::from_slice(m).unwrap();
                    (m.len(), v["seq"].as_u64().unwrap())
                });
                lists.insert(channel, msgs.collect());
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
    lists
}

/// Waits until the index's byte counter is exactly what the lists hold
/// (each message's bytes plus its index entry `len:seq:channel`: every
/// eviction trimmed, nothing left to flush) and the lists are within the
/// budget; the lists and their total bytes.
async fn settled(
    redis: &impl Backend,
    p: &str,
    budget: usize,
) -> (HashMap<String, Vec<(usize, u64)>>, usize) {
    let counter = if redis.mode() == "redis" {
        format!("{p}hbytes:budget")
    } else {
        format!("{p}hbytes:{{budget}}")
    };
    let deadline = Instant::now() + PATIENCE;
    loop {
        let lists = held(redis, p).await;
        let total: usize = lists.values().flatten().map(|(len, _)| len).sum();
        let cost: usize = lists
            .iter()
            .flat_map(|(c, msgs)| msgs.iter().map(move |(len, seq)| (c, len, seq)))
            .map(|(c, len, seq)| len + format!("{len}:{seq}:{c}").len())
            .sum();
        let counted: Option<usize> =
            crate::redis_cluster::on_owner(redis, redis::cmd("GET").arg(&counter)).await;
        if cost <= budget && counted == Some(cost) {
            return (lists, total);
        }
        assert!(
            Instant::now() < deadline,
            "Redis holds {total} bytes of history (budget {budget}), the index counts \
             {counted:?} of {cost}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Publishes 8 messages of 8 KiB on each of `channels`, in order, through
/// `b`; the first `seq` of each.
async fn fill(b: &crate::common::Broker, channels: &[String]) -> Vec<u64> {
    let data = format!("\"{}\"", "x".repeat(8 << 10));
    let mut first = Vec::new();
    for ch in channels {
        first.push(b.node.publish(ch, &data, "test", None).await.seq);
        for _ in 1..8 {
            b.node.publish(ch, &data, "test", None).await;
        }
    }
    first
}

/// How many messages each of `channels` keeps.
fn kept(lists: &HashMap<String, Vec<(usize, u64)>>, channels: &[String]) -> Vec<usize> {
    channels
        .iter()
        .map(|c| lists.get(c).map_or(0, Vec::len))
        .collect()
}

async fn redis_history_stays_under_the_cluster_budget_oldest_first(redis: &impl Backend) {
    let p = prefix();
    let config = "[history]\nsize = 100\nttl_ms = 600000\ncluster_max_bytes = 1048576\n";
    let (a, b) = two_nodes(redis, &p, config).await;
    // 40 channels of 8 messages of 8 KiB through node a, oldest channel
    // first: 2.6 MiB, two and a half times the budget, spread over every
    // master.
    let channels: Vec<String> = (0..40).map(|i| format!("doc:h{i}")).collect();
    let first = fill(&a, &channels).await;
    let (lists, total) = settled(redis, &p, BUDGET).await;
    assert!(total > BUDGET / 2, "only {total} bytes kept");
    let metric = a.metric("tidegate_redis_history_bytes").await;
    assert!(
        metric > 0.0 && metric <= BUDGET as f64,
        "tidegate_redis_history_bytes = {metric}"
    );
    // Oldest first: how many messages each channel keeps never decreases
    // in publish order; the oldest channel lost everything, the newest
    // nothing.
    let k = kept(&lists, &channels);
    assert!(k.windows(2).all(|w| w[0] <= w[1]), "{k:?}");
    assert_eq!((k[0], k[39]), (0, 8), "{k:?}");

    // The budget is the cluster's, not a node's: 10 more channels through
    // node b push out a's oldest remaining history, and keep their own.
    let more: Vec<String> = (0..10).map(|i| format!("doc:m{i}")).collect();
    fill(&b, &more).await;
    let (lists, _) = settled(redis, &p, BUDGET).await;
    assert_eq!(kept(&lists, &more), vec![8; 10]);
    let oldest_kept = k.iter().position(|n| *n > 0).unwrap();
    assert_eq!(kept(&lists, &channels)[oldest_kept], 0, "{k:?}");
    assert_eq!(kept(&lists, &channels)[39], 8);

    // What is left still recovers, in order; what was evicted says so.
    let mut c = a.client("acme").await;
    let old = c
        .call(
            json!({"type":"subscribe","channel":channels[0],"since":first[0] - 1}),
            1,
        )
        .await;
    assert_eq!(old["recovered"], false, "{old}");
    let new = c
        .call(
            json!({"type":"subscribe","channel":channels[39],"since":first[39] - 1}),
            2,
        )
        .await;
    assert_eq!(new["recovered"], true, "{new}");
    for i in 0..8 {
        let m = c.until(|v| v["type"] == "message").await;
        assert_eq!(m["channel"], channels[39].as_str(), "{m}");
        assert_eq!(m["seq"].as_u64().unwrap(), first[39] + i, "{m}");
    }

    // A reload applies a smaller budget at the next flush.
    let half = config.replace("1048576", "524288");
    a.node
        .reload(crate::common::config(&crate::cluster::node_config(
            redis, "a", &p, &half,
        )))
        .expect("the reload applies");
    fill(&a, &["doc:after".to_owned()]).await;
    let (lists, _) = settled(redis, &p, BUDGET / 2).await;
    assert_eq!(lists["doc:after"].len(), 8);
}

async fn a_message_leaves_redis_history_after_the_ttl_though_its_channel_stays_busy(
    redis: &impl Backend,
) {
    let p = prefix();
    let b = crate::cluster::node(redis, "a", &p, "[history]\nsize = 1000\nttl_ms = 300\n");
    crate::cluster::bridge_up(&b, true).await;
    let first = b.node.publish("doc:busy", "0", "test", None).await.seq;
    // Every publish renews the list's own TTL, so only the index's
    // per-message expiry can take the first one out.
    let deadline = Instant::now() + PATIENCE;
    loop {
        b.node.publish("doc:busy", "1", "test", None).await;
        let held = held(redis, &p).await;
        let seqs: Vec<u64> = held["doc:busy"].iter().map(|(_, seq)| *seq).collect();
        if seqs[0] > first {
            assert!(seqs.len() < 1000, "trimmed by age, not by size");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the first message outlived its TTL"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
