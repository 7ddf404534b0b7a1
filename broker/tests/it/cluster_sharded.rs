//! What only Redis Cluster has: channels spread over shards. The shared
//! cluster test bodies (cluster.rs) run on it too; this checks that the
//! spreading is real.

use serde_json::json;

use crate::cluster::{bridge_up, node, prefix};
use crate::common::PATIENCE;
use crate::redis_cluster::RedisCluster;

/// A direct (non-cluster) connection to one master.
pub async fn master(port: u16) -> redis::aio::MultiplexedConnection {
    redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// One channel per master, with its slot: the first `doc:N` whose tagged
/// key falls in that master's slot range.
pub async fn one_channel_per_shard(cluster: &RedisCluster, p: &str) -> Vec<(String, u16)> {
    let mut probe = master(cluster.ports[0]).await;
    let mut channels = Vec::new();
    for range in [(0, 5460), (5461, 10922), (10923, 16383)] {
        for n in 0.. {
            let channel = format!("doc:{n}");
            let slot: u16 = redis::cmd("CLUSTER")
                .arg("KEYSLOT")
                .arg(format!("{p}seq:{{{channel}}}"))
                .query_async(&mut probe)
                .await
                .unwrap();
            if (range.0..=range.1).contains(&slot) {
                channels.push((channel, slot));
                break;
            }
        }
    }
    channels
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_shard_owns_its_channels_and_every_node_receives_them_all() {
    let cluster = RedisCluster::start();
    let p = prefix();
    let channels: Vec<String> = one_channel_per_shard(&cluster, &p)
        .await
        .into_iter()
        .map(|(c, _)| c)
        .collect();
    let (a, b) = (node(&cluster, "a", &p, ""), node(&cluster, "b", &p, ""));
    bridge_up(&a, true).await;
    bridge_up(&b, true).await;
    let mut sub = b.client("s").await;
    for (i, c) in channels.iter().enumerate() {
        let ack = sub
            .call(json!({"type":"subscribe","channel":c}), i as u64)
            .await;
        assert_eq!(ack["type"], "ack", "{ack}");
    }
    for c in &channels {
        assert_eq!(a.publish_http(c, json!(c)).await.status(), 200);
    }
    let mut got = Vec::new();
    while got.len() < channels.len() {
        let m = tokio::time::timeout(PATIENCE, sub.until(|v| v["type"] == "message"))
            .await
            .expect("every shard's message reaches the other node");
        got.push(m["channel"].as_str().unwrap().to_owned());
    }
    got.sort();
    let mut want = channels.clone();
    want.sort();
    assert_eq!(got, want);
    // Each channel's counter and history live on the master that owns its
    // slot (a direct read elsewhere would be answered MOVED).
    for (port, c) in cluster.ports.iter().zip(&channels) {
        let mut conn = master(*port).await;
        let n: u64 = redis::cmd("EXISTS")
            .arg(format!("{p}seq:{{{c}}}"))
            .arg(format!("{p}hist:{{{c}}}"))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(n, 2, "{c} on master {port}");
    }
}
