//! Failover on Redis Cluster: three masters with a replica each, two broker
//! nodes, subscribers on a channel of every shard on both nodes, and a
//! publisher that never stops. The master owning one channel's slot is
//! killed (SIGKILL, by PID); its replica takes over. The nodes must follow
//! by themselves: that channel resumes without a restart, the other
//! shards' channels keep flowing while it is away, no subscriber sees a
//! `seq` go backwards, the publisher's acked `seq`s only rise, and every
//! publish acked after the failover reaches every subscriber.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::sync::mpsc;

use crate::cluster::{bridge_up, node, prefix, subscribed};
use crate::cluster_sharded::one_channel_per_shard;
use crate::common::{Broker, Client, PATIENCE};
use crate::redis_cluster::{Backend, RedisCluster, on_owner};

/// A delivered message: which subscriber, channel, publish index.
#[derive(Debug, Clone)]
pub struct Got {
    pub who: &'static str,
    pub channel: String,
    pub index: u64,
}

/// Subscribes `c` to every channel, then forwards its messages, checking
/// that each channel's `seq` only ever rises on this subscriber.
pub async fn listen(
    who: &'static str,
    mut c: Client,
    channels: Vec<String>,
    out: mpsc::UnboundedSender<Got>,
) {
    for (i, ch) in channels.iter().enumerate() {
        let ack = c
            .call(json!({"type":"subscribe","channel":ch}), i as u64 + 1)
            .await;
        assert_eq!(ack["type"], "ack", "{ack}");
    }
    let mut last: HashMap<String, u64> = HashMap::new();
    loop {
        let m = c.until(|v| v["type"] == "message").await;
        let channel = m["channel"].as_str().unwrap().to_owned();
        let seq = m["seq"].as_u64().unwrap();
        let prev = last.insert(channel.clone(), seq).unwrap_or(0);
        assert!(seq > prev, "{who}: {channel} seq went from {prev} to {seq}");
        let index = m["data"]["i"].as_u64().unwrap();
        if out
            .send(Got {
                who,
                channel,
                index,
            })
            .is_err()
        {
            return;
        }
    }
}

/// Publishes `{"i": n}` round-robin on `channels` through node `a` over
/// HTTP until `stop`, paced under the API key's account budget; records the
/// publishes acked (200): index, channel and `seq`.
pub async fn publish(
    a: Arc<Broker>,
    channels: Vec<String>,
    next: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) -> Vec<(u64, String, u64)> {
    let mut acked = Vec::new();
    while !stop.load(Ordering::Acquire) {
        let i = next.load(Ordering::Acquire);
        let channel = &channels[i as usize % channels.len()];
        let r = a.publish_http(channel, json!({"i": i})).await;
        if r.status() == 200 {
            let body: serde_json::Value = r.json().await.unwrap();
            acked.push((i, channel.clone(), body["seq"].as_u64().unwrap()));
        }
        next.store(i + 1, Ordering::Release);
        // Pacing (about 60/s), not a wait for an event: the API key's
        // account refills 100 messages a second.
        tokio::time::sleep(Duration::from_millis(16)).await;
    }
    acked
}

/// Traffic through two nodes: a subscriber on each (`listen`) reading
/// `channels`, and a publisher on `a` (`publish`) until `stop`.
pub struct Traffic {
    pub rx: mpsc::UnboundedReceiver<Got>,
    pub readers: [tokio::task::JoinHandle<()>; 2],
    pub next: Arc<AtomicU64>,
    pub stop: Arc<AtomicBool>,
    pub publisher: tokio::task::JoinHandle<Vec<(u64, String, u64)>>,
}

pub async fn start_traffic(a: &Arc<Broker>, b: &Broker, channels: &[String]) -> Traffic {
    let (tx, rx) = mpsc::unbounded_channel();
    let readers = [
        tokio::spawn(listen(
            "on_a",
            a.client("s1").await,
            channels.to_vec(),
            tx.clone(),
        )),
        tokio::spawn(listen(
            "on_b",
            b.client("s2").await,
            channels.to_vec(),
            tx.clone(),
        )),
    ];
    let (next, stop) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicBool::new(false)),
    );
    let publisher = tokio::spawn(publish(
        a.clone(),
        channels.to_vec(),
        next.clone(),
        stop.clone(),
    ));
    Traffic {
        rx,
        readers,
        next,
        stop,
        publisher,
    }
}

pub async fn next_got(rx: &mut mpsc::UnboundedReceiver<Got>, deadline: Instant) -> Got {
    tokio::time::timeout_at(deadline.into(), rx.recv())
        .await
        .expect("deliveries kept coming")
        .expect("the subscribers are listening")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_killed_under_traffic_fails_over_and_only_its_channels_pause() {
    // The nodes' and the Redis client's logs, with `RUST_LOG` (what a
    // failure under load is read from).
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_ansi(false)
        .with_thread_names(true)
        .try_init();
    let mut cluster = RedisCluster::start_with_replicas();
    let p = prefix();
    let shards = one_channel_per_shard(&cluster, &p).await;
    let channels: Vec<String> = shards.iter().map(|(c, _)| c.clone()).collect();
    let (victim, victim_slot) = shards[0].clone();
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

    // Every message read, whichever step reads it: the one that ends a
    // step may already be one the last step waits for (a subscriber on
    // node b can get a publish before node a's answer to it moves `next`).
    let mut delivered: HashSet<(&str, u64)> = HashSet::new();

    // Traffic flows on every shard to both nodes.
    let mut seen: HashSet<(&str, String)> = HashSet::new();
    while seen.len() < 2 * channels.len() {
        let g = next_got(&mut rx, deadline).await;
        delivered.insert((g.who, g.index));
        seen.insert((g.who, g.channel));
    }

    let dead = cluster.master_of(victim_slot);
    cluster.kill(dead);
    // The publish numbered `next` may have been in flight at the kill.
    let killed_at = next.load(Ordering::Acquire) + 1;

    // Until the victim's channel is back on node b (published on a after
    // the kill, so it went through the new master), the other shards'
    // channels keep arriving there.
    let mut during: HashSet<String> = HashSet::new();
    loop {
        let g = next_got(&mut rx, deadline).await;
        delivered.insert((g.who, g.index));
        if g.who != "on_b" || g.index < killed_at {
            continue;
        }
        if g.channel == victim {
            break;
        }
        during.insert(g.channel);
    }
    let others: HashSet<String> = channels[1..].iter().cloned().collect();
    assert_eq!(
        during, others,
        "the shards that did not fail kept delivering across nodes during the outage"
    );

    // After the failover (the replica serves the slot and both nodes have
    // re-synced), every acked publish reaches both subscribers.
    tokio::task::block_in_place(|| cluster.wait_failover(victim_slot, dead));
    bridge_up(&a, true).await;
    bridge_up(&b, true).await;
    let after = next.load(Ordering::Acquire);
    let mut max_index = 0;
    while max_index < after + 3 * 10 {
        let g = next_got(&mut rx, deadline).await;
        max_index = max_index.max(g.index);
        delivered.insert((g.who, g.index));
    }
    stop.store(true, Ordering::Release);
    let acked = publisher.await.unwrap();
    // The publishing node never got a `seq` twice on a channel, also
    // across the failover, where the promoted replica may lack the last
    // increments of the counter: each publish carries the node's last
    // `seq` of the channel as a floor, and the slot recovery raises the
    // counter to it.
    for ch in &channels {
        let seqs: Vec<u64> = acked
            .iter()
            .filter(|(_, c, _)| c == ch)
            .map(|(.., s)| *s)
            .collect();
        assert!(
            seqs.windows(2).all(|w| w[1] > w[0]),
            "{ch}: acked seqs {seqs:?}"
        );
    }
    let want: Vec<u64> = acked
        .iter()
        .map(|(i, ..)| *i)
        .filter(|i| *i >= after)
        .collect();
    assert!(want.len() >= 10, "publishes were acked after the failover");
    for who in ["on_a", "on_b"] {
        for i in &want {
            while !delivered.contains(&(who, *i)) {
                let g = next_got(&mut rx, deadline).await;
                delivered.insert((g.who, g.index));
            }
        }
    }
    for r in readers {
        r.abort();
    }
}

/// The cluster client falls back to its seeds when it cannot rebuild the
/// topology from the connections it holds (a master died and its slots
/// have no owner yet). Seeded with the configured node alone, once that
/// node is the dead one the client asks it alone, again and again, long
/// after its replica took over. So the seeds are every master and replica
/// the configured node names.
#[tokio::test]
async fn the_cluster_client_is_seeded_with_every_master_and_replica() {
    let cluster = RedisCluster::start_with_replicas();
    let section = tidegate::config::ClusterSection {
        redis_url: cluster.url(),
        ..Default::default()
    };
    let target = tidegate::cluster::redis::RedisTarget::open(&section).unwrap();
    let every: HashSet<u16> = cluster
        .ports
        .iter()
        .chain(&cluster.replica_ports)
        .copied()
        .collect();
    // A replica is named once the configured node has heard of it (the
    // cluster's gossip); the masters are named from the start.
    let deadline = Instant::now() + PATIENCE;
    let seeds = loop {
        let seeds = target.cluster_seeds().await;
        let ports: HashSet<u16> = seeds
            .iter()
            .filter_map(|s| match s.addr() {
                redis::ConnectionAddr::Tcp(_, port) => Some(*port),
                _ => None,
            })
            .collect();
        assert!(
            cluster.ports.iter().all(|p| ports.contains(p)),
            "every master is a seed: {seeds:?}"
        );
        if ports == every {
            break seeds;
        }
        assert!(Instant::now() < deadline, "seeds {seeds:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(seeds.len(), every.len(), "no node twice: {seeds:?}");
}

/// Publishes `{"i": i}` on `channel` through `node`; the acked `seq`.
async fn acked_seq(node: &Broker, channel: &str, i: u64) -> u64 {
    let r = node.publish_http(channel, json!({ "i": i })).await;
    assert_eq!(r.status(), 200);
    let body: serde_json::Value = r.json().await.unwrap();
    body["seq"].as_u64().unwrap()
}

/// The next message `c` reads: its `seq` and index.
async fn next_message(c: &mut Client) -> (u64, u64) {
    let m = tokio::time::timeout(PATIENCE, c.until(|v| v["type"] == "message"))
        .await
        .expect("the message was delivered");
    (m["seq"].as_u64().unwrap(), m["data"]["i"].as_u64().unwrap())
}

/// Puts the channel's keys in the state a promoted replica may hold: the
/// counter without increments it missed (back at `seq`), last written by
/// another master (its old one).
async fn as_promoted_replica_holds_it(cluster: &RedisCluster, p: &str, channel: &str, seq: u64) {
    let counter = redis::cmd("SET")
        .arg(format!("{p}seq:{{{channel}}}"))
        .arg(seq)
        .clone();
    let () = on_owner(cluster, &counter).await;
    let owner = redis::cmd("SET")
        .arg(format!("{p}own:{{{channel}}}"))
        .arg("0".repeat(40))
        .clone();
    let () = on_owner(cluster, &owner).await;
}

/// The failover case no floor covers: the node publishing has no
/// subscribers of the channel, so it knows no `seq` of it, and the
/// promoted replica's counter is behind what the following node already
/// delivered. The fence raises the counter before the first publish (or
/// join) on the new master, so nothing is reissued and dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counter_the_promoted_replica_missed_is_fenced_before_it_is_used_again() {
    let cluster = RedisCluster::start();
    let p = prefix();
    let channel = "doc:fence";
    let follower = node(&cluster, "a", &p, "");
    let publisher = node(&cluster, "c", &p, "");
    bridge_up(&follower, true).await;
    bridge_up(&publisher, true).await;
    let mut sub = subscribed(&follower, "s1", channel).await;
    let mut seqs = Vec::new();
    for i in 0..3 {
        seqs.push(acked_seq(&publisher, channel, i).await);
    }
    for (i, seq) in seqs.iter().enumerate() {
        assert_eq!(next_message(&mut sub).await, (*seq, i as u64));
    }

    // A publish through the node without subscribers.
    as_promoted_replica_holds_it(&cluster, &p, channel, seqs[0]).await;
    let fenced = acked_seq(&publisher, channel, 3).await;
    assert!(fenced > seqs[2], "{fenced} reissued a seq of {seqs:?}");
    assert_eq!(next_message(&mut sub).await, (fenced, 3));
    let next = acked_seq(&publisher, channel, 4).await;
    assert_eq!(next, fenced + 1, "the fence fires once per new master");
    assert_eq!(next_message(&mut sub).await, (next, 4));

    // A subscriber joining through that node first: its position is past
    // everything delivered, and the next publish reaches both. (A second
    // failover within the same millisecond would break the fence's
    // assumption, that the clock floor has passed the old master's `seq`s:
    // let the clock pass `next` first, as any real failover's time does.)
    while tidegate::hub::seq_floor() <= next {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    as_promoted_replica_holds_it(&cluster, &p, channel, seqs[0]).await;
    let mut joined = publisher.client("s2").await;
    let ack = joined
        .call(json!({"type":"subscribe","channel":channel}), 1)
        .await;
    let position = ack["seq"].as_u64().expect("the ack carries the position");
    assert!(position > next, "joined at {position}, delivered {next}");
    let last = acked_seq(&publisher, channel, 5).await;
    assert_eq!(last, position + 1);
    assert_eq!(next_message(&mut sub).await, (last, 5));
    assert_eq!(next_message(&mut joined).await, (last, 5));
}
