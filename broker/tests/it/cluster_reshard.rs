//! Resharding on Redis Cluster: a subscribed channel's hash slot moves from
//! one master to another under traffic, the way `redis-cli --cluster
//! reshard` moves it (`CLUSTER SETSLOT … IMPORTING/MIGRATING`, `MIGRATE`
//! of the slot's keys, `CLUSTER SETSLOT … NODE` on every master). Redis
//! then drops the old owner's sharded subscriptions of that slot (an
//! `sunsubscribe` push); the nodes must subscribe again on the new owner by
//! themselves. Two nodes, a subscriber of the moved channel and of a
//! control channel (another master) on each, a publisher that never stops;
//! the channel's keys move one first, so a publish meets them split
//! (`TRYAGAIN`) and must wait for the rest rather than fail.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::cluster::{bridge_up, node, prefix};
use crate::cluster_failover::{Traffic, next_got, start_traffic};
use crate::cluster_sharded::{master, one_channel_per_shard};
use crate::common::PATIENCE;
use crate::redis_cluster::RedisCluster;

async fn myid(port: u16) -> String {
    redis::cmd("CLUSTER")
        .arg("MYID")
        .query_async(&mut master(port).await)
        .await
        .unwrap()
}

/// Waits (polling, with a deadline) until the publisher has made `n` more
/// publishes, so each step of a move sees traffic on both channels.
async fn traffic(next: &AtomicU64, n: u64) {
    let (until, deadline) = (next.load(Ordering::Acquire) + n, Instant::now() + PATIENCE);
    while next.load(Ordering::Acquire) < until {
        assert!(Instant::now() < deadline, "the publisher stalled");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Moves `keys` from the master `src` is connected to, to the one on `to`.
async fn migrate(src: &mut redis::aio::MultiplexedConnection, to: u16, keys: &[String]) {
    redis::cmd("MIGRATE")
        .arg("127.0.0.1")
        .arg(to)
        .arg("")
        .arg(0)
        .arg(5000)
        .arg("REPLACE")
        .arg("KEYS")
        .arg(keys)
        .query_async::<()>(src)
        .await
        .unwrap();
}

/// How many commands the masters on `ports` answered `TRYAGAIN`.
async fn try_again_count(ports: &[u16]) -> u64 {
    let mut n = 0;
    for port in ports {
        let info: String = redis::cmd("INFO")
            .arg("errorstats")
            .query_async(&mut master(*port).await)
            .await
            .unwrap();
        n += info
            .lines()
            .filter_map(|l| l.strip_prefix("errorstat_TRYAGAIN:count="))
            .filter_map(|c| c.parse::<u64>().ok())
            .sum::<u64>();
    }
    n
}

/// Moves `slot` from the master on `from` to the one on `to`, keys
/// included, then tells every master its new owner; publishes go on
/// between the steps.
async fn move_slot(cluster: &RedisCluster, slot: u16, from: u16, to: u16, next: &AtomicU64) {
    let (from_id, to_id) = (myid(from).await, myid(to).await);
    let (mut src, mut dst) = (master(from).await, master(to).await);
    let setslot = |state: &str, id: &str| {
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("SETSLOT").arg(slot).arg(state).arg(id);
        cmd
    };
    setslot("IMPORTING", &from_id)
        .query_async::<()>(&mut dst)
        .await
        .unwrap();
    setslot("MIGRATING", &to_id)
        .query_async::<()>(&mut src)
        .await
        .unwrap();
    // Publishes while the keys are still on the old owner.
    traffic(next, 3).await;
    // One of the channel's keys first: a publish now finds its keys split
    // between the two masters and is answered `TRYAGAIN` (as between two
    // of `redis-cli --cluster reshard`'s batches) until the rest follow.
    let tried_again = try_again_count(&[from, to]).await;
    let first: Vec<String> = redis::cmd("CLUSTER")
        .arg("GETKEYSINSLOT")
        .arg(slot)
        .arg(1)
        .query_async(&mut src)
        .await
        .unwrap();
    migrate(&mut src, to, &first).await;
    let deadline = Instant::now() + PATIENCE;
    while try_again_count(&[from, to]).await == tried_again {
        assert!(Instant::now() < deadline, "no publish met the split keys");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    loop {
        let keys: Vec<String> = redis::cmd("CLUSTER")
            .arg("GETKEYSINSLOT")
            .arg(slot)
            .arg(100)
            .query_async(&mut src)
            .await
            .unwrap();
        if keys.is_empty() {
            break;
        }
        migrate(&mut src, to, &keys).await;
    }
    // The new owner first, then the old one, then the rest (as
    // `redis-cli --cluster reshard` does).
    // Publishes follow `ASK` to the new owner, where nobody listens yet.
    traffic(next, 3).await;
    let mut order = vec![to, from];
    order.extend(cluster.ports.iter().filter(|p| **p != to && **p != from));
    for port in order {
        setslot("NODE", &to_id)
            .query_async::<()>(&mut master(port).await)
            .await
            .unwrap();
        if port == to {
            // The new owner serves the slot; the old one still holds the
            // subscriptions.
            traffic(next, 3).await;
        }
    }
}

/// The sharded subscribers of `topic` on the master on `port`.
async fn shard_listeners(port: u16, topic: &str) -> u64 {
    let (_, n): (String, u64) = redis::cmd("PUBSUB")
        .arg("SHARDNUMSUB")
        .arg(topic)
        .query_async(&mut master(port).await)
        .await
        .unwrap();
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscribed_channels_slot_moves_under_traffic_and_delivery_follows_it() {
    let cluster = RedisCluster::start();
    let p = prefix();
    let shards = one_channel_per_shard(&cluster, &p).await;
    let (moved, slot) = shards[0].clone();
    let control = shards[2].0.clone();
    let (from, to) = (cluster.ports[0], cluster.ports[1]);
    assert_eq!(cluster.master_of(slot), from);
    let channels = vec![moved.clone(), control.clone()];
    let a = Arc::new(node(&cluster, "a", &p, ""));
    let b = node(&cluster, "b", &p, "");
    bridge_up(&a, true).await;
    bridge_up(&b, true).await;

    let Traffic {
        mut rx,
        readers,
        next,
        stop,
        publisher,
    } = start_traffic(&a, &b, &channels).await;
    let deadline = Instant::now() + PATIENCE * 6;
    let mut delivered: HashSet<(&str, u64)> = HashSet::new();
    let mut seen: HashSet<(&str, String)> = HashSet::new();
    while seen.len() < 4 {
        let g = next_got(&mut rx, deadline).await;
        delivered.insert((g.who, g.index));
        seen.insert((g.who, g.channel));
    }

    // Every publish from here on must reach both subscribers.
    let start = next.load(Ordering::Acquire) + 1;
    let topic = format!("{p}ch:{{{moved}}}");
    assert_eq!(shard_listeners(from, &topic).await, 2, "both nodes on A");
    move_slot(&cluster, slot, from, to, &next).await;
    assert_eq!(cluster.master_of(slot), to);
    let after = next.load(Ordering::Acquire) + 1;

    // Both nodes subscribe again on the new owner, by themselves.
    let polls = Instant::now() + PATIENCE;
    while shard_listeners(to, &topic).await != 2 {
        assert!(
            Instant::now() < polls,
            "the nodes never subscribed {topic} on its new master ({} there, {} on the old one)",
            shard_listeners(to, &topic).await,
            shard_listeners(from, &topic).await,
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The moved channel's counter and history now live on the new owner.
    let n: u64 = redis::cmd("EXISTS")
        .arg(format!("{p}seq:{{{moved}}}"))
        .arg(format!("{p}hist:{{{moved}}}"))
        .query_async(&mut master(to).await)
        .await
        .unwrap();
    assert_eq!(n, 2, "the slot's keys migrated");

    // Deliveries of the moved channel resume on both nodes.
    let mut resumed: HashSet<&str> = HashSet::new();
    while resumed.len() < 2 {
        let g = next_got(&mut rx, deadline).await;
        delivered.insert((g.who, g.index));
        if g.channel == moved && g.index >= after {
            resumed.insert(g.who);
        }
    }
    let upto = next.load(Ordering::Acquire) + 10;
    while next.load(Ordering::Acquire) < upto {
        let g = next_got(&mut rx, deadline).await;
        delivered.insert((g.who, g.index));
    }
    stop.store(true, Ordering::Release);
    let acked = publisher.await.unwrap();

    // Every acked publish reaches both subscribers: on the control channel
    // (it never stopped) and on the moved one, also those published while
    // its slot moved (caught up from history after the resubscription).
    let want: Vec<u64> = acked
        .iter()
        .map(|(i, ..)| *i)
        .filter(|i| *i >= start)
        .collect();
    assert!(
        acked
            .iter()
            .any(|(i, c, _)| *i >= start && *i < after && *c == moved),
        "publishes on the moved channel were acked while its slot moved"
    );
    assert!(
        acked
            .iter()
            .filter(|(i, c, _)| *i >= after && *c == moved)
            .count()
            >= 5,
        "publishes on the moved channel were acked after the move"
    );
    let missing = |delivered: &HashSet<(&str, u64)>| -> Vec<(&str, u64)> {
        ["on_a", "on_b"]
            .into_iter()
            .flat_map(|who| want.iter().map(move |i| (who, *i)))
            .filter(|k| !delivered.contains(k))
            .collect()
    };
    while !missing(&delivered).is_empty() && Instant::now() < deadline {
        if let Ok(Some(g)) = tokio::time::timeout(PATIENCE, rx.recv()).await {
            delivered.insert((g.who, g.index));
        } else {
            break;
        }
    }
    let lost: Vec<_> = missing(&delivered)
        .into_iter()
        .map(|(who, i)| (who, acked.iter().find(|a| a.0 == i).cloned()))
        .collect();
    assert!(
        lost.is_empty(),
        "acked publishes never delivered (the move ran from #{start}, done at #{after}): {lost:?}"
    );
    for r in readers {
        r.abort();
    }

    // History and `since` work for the moved channel, from either node.
    let seqs: Vec<u64> = acked
        .iter()
        .filter(|(i, c, _)| *i >= after && *c == moved)
        .map(|(.., s)| *s)
        .collect();
    for broker in [&*a, &b] {
        let mut c = broker.client("late").await;
        let ack = c
            .call(
                json!({"type":"subscribe","channel":moved,"since":seqs[0]}),
                1,
            )
            .await;
        assert_eq!(ack["recovered"], true, "{ack}");
        let mut got = Vec::new();
        while got.len() < seqs.len() - 1 {
            let m = c.until(|v| v["type"] == "message").await;
            got.push(m["seq"].as_u64().unwrap());
        }
        assert_eq!(got, seqs[1..], "the backlog after `since`, in order");
    }
}
