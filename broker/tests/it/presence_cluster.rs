//! §13 across nodes: members and counts from any node, `max_members`
//! counted cluster-wide, diffs of other nodes' joins, a SIGKILLed node's
//! members gone with their leaves sent (in channels on every shard), each
//! on one real Redis and on a real three-master Redis Cluster; and a Redis
//! outage answered from the node's own members with `partial: true`.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::cluster::{bridge_up, node, prefix};
use crate::common::{Broker, Client, PATIENCE};
use crate::presence_single::conns;
use crate::redis_cluster::{Backend, on_both};
use crate::redis_server::RedisServer;

on_both!(
    members_and_counts_are_the_same_from_any_node_and_max_members_is_cluster_wide,
    a_killed_nodes_members_leave_within_its_lease,
);

const NS: &str = "[namespaces.note]\npresence = true\njoin_leave = true\ndiff_ms = 100\n";

fn token(b: &Broker, user: &str) -> String {
    b.member_token(user, &["note:*"], Some(json!({ "name": user })))
}

/// Connects to `ws` and subscribes to `channel`: the client and its
/// connection id (or the refusal frame).
async fn join_at(ws: &str, token: &str, channel: &str) -> (Client, String, Value) {
    let mut c = Client::connect(ws, token).await.unwrap();
    let welcome = c.next_json().await;
    let conn = welcome["connId"].as_str().unwrap().to_owned();
    let ack = c
        .call(json!({"type":"subscribe","channel":channel}), 1)
        .await;
    (c, conn, ack)
}

/// The bridge is up and presence reached Redis (shared with the GraphQL
/// presence tests).
pub(crate) async fn up(b: &Broker) {
    bridge_up(b, true).await;
    let deadline = Instant::now() + PATIENCE;
    while !b.node.presence.is_up() {
        assert!(Instant::now() < deadline, "presence never reached Redis");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Reads presence through `c` until `pred` holds (the other node's view
/// settles asynchronously), bounded by [`PATIENCE`].
async fn read_until(c: &mut Client, channel: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + PATIENCE;
    let mut id = 100;
    loop {
        id += 1;
        let r = c
            .call(json!({"type":"presence","channel":channel}), id)
            .await;
        if pred(&r) {
            return r;
        }
        assert!(Instant::now() < deadline, "presence never matched: {r}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Three channels; on a Redis Cluster, one on each master (their keys
/// are tagged by the channel, so each channel's slot is its name's).
async fn on_every_shard(redis: &impl Backend) -> Vec<String> {
    let ports = redis.ports();
    if ports.len() == 1 {
        return (0..3).map(|i| format!("note:k{i}")).collect();
    }
    let mut found: Vec<Option<String>> = vec![None; 3];
    for i in 0.. {
        let name = format!("note:k{i}");
        let slot: u16 =
            crate::redis_cluster::on_owner(redis, redis::cmd("CLUSTER").arg("KEYSLOT").arg(&name))
                .await;
        // The masters' slot ranges (redis_cluster.rs).
        let master = match slot {
            0..=5460 => 0,
            5461..=10922 => 1,
            _ => 2,
        };
        found[master].get_or_insert(name);
        if found.iter().all(Option::is_some) {
            return found.into_iter().flatten().collect();
        }
    }
    unreachable!()
}

async fn members_and_counts_are_the_same_from_any_node_and_max_members_is_cluster_wide(
    redis: &impl Backend,
) {
    let p = prefix();
    let extra = format!("{NS}max_members = 2\n");
    let a = node(redis, "a", &p, &extra);
    let b = node(redis, "b", &p, &extra);
    up(&a).await;
    up(&b).await;
    let (mut ca, ida, ack) = join_at(&a.ws_url(), &token(&a, "ann"), "note:1").await;
    assert_eq!(ack["type"], "ack", "{ack}");
    let (mut cb, idb, ack) = join_at(&b.ws_url(), &token(&b, "bob"), "note:1").await;
    assert_eq!(ack["type"], "ack", "{ack}");
    let both = {
        let mut v = vec![ida.clone(), idb.clone()];
        v.sort();
        v
    };
    for c in [&mut ca, &mut cb] {
        let r = c
            .call(json!({"type":"presence","channel":"note:1"}), 5)
            .await;
        assert_eq!(conns(&r["members"]), both, "{r}");
        assert_eq!(
            (r["users"].clone(), r["connections"].clone()),
            (json!(2), json!(2))
        );
        assert!(r.get("partial").is_none(), "{r}");
    }
    // Ann on node a hears of Bob's join on node b.
    let diff = ca
        .until(|v| v["type"] == "presence_diff" && conns(&v["joins"]).contains(&idb))
        .await;
    assert_eq!(diff["channel"], "note:1");
    // Two members in the cluster: a third on either node is refused.
    for n in [&a, &b] {
        let (_c, _, e) = join_at(&n.ws_url(), &token(n, "cat"), "note:1").await;
        assert_eq!(e["code"], "presence_full", "{e}");
    }
    let resp = reqwest::Client::new()
        .get(b.url("/v1/presence?channel=note:1"))
        .bearer_auth(crate::common::API_KEY)
        .send()
        .await
        .unwrap();
    let body: Value = resp.json().await.unwrap();
    assert_eq!(conns(&body["members"]), both, "{body}");
    // Bob leaves: Ann's node sends the leave.
    drop(cb);
    let diff = ca
        .until(|v| v["type"] == "presence_diff" && conns(&v["leaves"]).contains(&idb))
        .await;
    assert_eq!(diff["joins"], json!([]), "{diff}");
}

async fn a_killed_nodes_members_leave_within_its_lease(redis: &impl Backend) {
    let p = prefix();
    let mode = format!("mode = \"{}\"", redis.mode());
    let config = crate::process::shipped(&[
        ("mode = \"memory\"", &mode),
        (
            "redis_url = \"redis://127.0.0.1:6379/\"",
            &format!("redis_url = \"{}\"", redis.url()),
        ),
        (
            "key_prefix = \"tidegate:\"",
            &format!("key_prefix = \"{p}\""),
        ),
        ("lease_ms = 10000", "lease_ms = 1000"),
        ("id = \"n1\"", "id = \"doomed\""),
        ("diff_ms = 200", "diff_ms = 100"),
    ]);
    let mut doomed = crate::process::Proc::start(&config).await;
    let a = node(redis, "a", &p, NS);
    up(&a).await;
    // Ann watches three channels (one per shard on a Redis Cluster); Zoe
    // is in all three through the doomed node.
    let channels = on_every_shard(redis).await;
    let mut watchers = Vec::new();
    for ch in &channels {
        watchers.push(join_at(&a.ws_url(), &token(&a, "ann"), ch).await);
    }
    let mut zoes = Vec::new();
    for ch in &channels {
        // Its first joins may be checked locally, then registered on its
        // lease tick: either way Ann sees Zoe.
        let (zoe, idz, ack) = join_at(&doomed.ws(), &token(&a, "zoe"), ch).await;
        assert_eq!(ack["type"], "ack", "{ack}");
        zoes.push((zoe, idz));
    }
    for ((watcher, _, _), (ch, (_, idz))) in watchers.iter_mut().zip(channels.iter().zip(&zoes)) {
        watcher
            .until(|v| v["type"] == "presence_diff" && conns(&v["joins"]).contains(idz))
            .await;
        let r = read_until(watcher, ch, |r| r["connections"] == 2).await;
        assert!(conns(&r["members"]).contains(idz));
    }
    doomed.kill9().await;
    // No goodbye from the node: its lease runs out and Ann is told, in
    // every channel.
    for ((watcher, ida, _), (ch, (_, idz))) in watchers.iter_mut().zip(channels.iter().zip(&zoes)) {
        let diff = watcher
            .until(|v| v["type"] == "presence_diff" && conns(&v["leaves"]).contains(idz))
            .await;
        assert_eq!(diff["joins"], json!([]), "{diff}");
        let r = watcher
            .call(json!({"type":"presence","channel":ch}), 50)
            .await;
        assert_eq!(conns(&r["members"]), vec![ida.clone()], "no ghost: {r}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_outage_answers_partially_and_members_come_back_after_it() {
    let mut redis = RedisServer::start();
    let p = prefix();
    let a = node(&redis, "a", &p, NS);
    let b = node(&redis, "b", &p, NS);
    up(&a).await;
    up(&b).await;
    let (mut ca, ida, _) = join_at(&a.ws_url(), &token(&a, "ann"), "note:3").await;
    let (_cb, idb, _) = join_at(&b.ws_url(), &token(&b, "bob"), "note:3").await;
    read_until(&mut ca, "note:3", |r| r["connections"] == 2).await;
    redis.kill();
    let r = read_until(&mut ca, "note:3", |r| r["partial"] == true).await;
    assert_eq!(conns(&r["members"]), vec![ida.clone()], "only its own: {r}");
    assert_eq!(r["connections"], 1);
    // Redis comes back empty: both nodes register their members again.
    redis.restart();
    let r = read_until(&mut ca, "note:3", |r| {
        r.get("partial").is_none() && r["connections"] == 2
    })
    .await;
    let mut both = vec![ida, idb];
    both.sort();
    assert_eq!(conns(&r["members"]), both, "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leave_while_redis_is_unreachable_leaves_no_ghost_when_it_answers_again() {
    let redis = RedisServer::start();
    let p = prefix();
    let a = node(&redis, "a", &p, NS);
    let b = node(&redis, "b", &p, NS);
    up(&a).await;
    up(&b).await;
    let (mut ca, ida, _) = join_at(&a.ws_url(), &token(&a, "ann"), "note:4").await;
    let (cb, idb, _) = join_at(&b.ws_url(), &token(&b, "bob"), "note:4").await;
    read_until(&mut ca, "note:4", |r| r["connections"] == 2).await;
    // Redis keeps its data but stops taking writes for a while: node b
    // finds it unreachable, and Bob leaves meanwhile (nothing reaches
    // Redis, nothing is queued there).
    let client = redis::Client::open(redis.url()).unwrap();
    let mut admin = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(4000)
        .arg("WRITE")
        .query_async(&mut admin)
        .await
        .unwrap();
    let deadline = Instant::now() + PATIENCE;
    while b.node.presence.is_up() {
        assert!(Instant::now() < deadline, "node b never noticed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(cb);
    b.wait_sockets(0).await;
    // Writes resume: node b writes its members again in full, so Bob is
    // gone from Redis and Ann's node sends his leave.
    ca.until(|v| v["type"] == "presence_diff" && conns(&v["leaves"]).contains(&idb))
        .await;
    let r = read_until(&mut ca, "note:4", |r| {
        r.get("partial").is_none() && r["connections"] == 1
    })
    .await;
    assert_eq!(conns(&r["members"]), vec![ida], "no ghost: {r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_cluster_a_dead_shard_answers_partially_until_its_replica_takes_over() {
    let mut cluster = crate::redis_cluster::RedisCluster::start_with_replicas();
    let p = prefix();
    let a = node(&cluster, "a", &p, NS);
    let b = node(&cluster, "b", &p, NS);
    up(&a).await;
    up(&b).await;
    let (mut ca, ida, _) = join_at(&a.ws_url(), &token(&a, "ann"), "note:5").await;
    let (_cb, idb, _) = join_at(&b.ws_url(), &token(&b, "bob"), "note:5").await;
    read_until(&mut ca, "note:5", |r| r["connections"] == 2).await;
    let slot: u16 = crate::redis_cluster::on_owner(
        &cluster,
        redis::cmd("CLUSTER").arg("KEYSLOT").arg("note:5"),
    )
    .await;
    let dead = cluster.master_of(slot);
    cluster.kill(dead);
    // The channel's shard is gone: node a answers from its own members.
    let r = read_until(&mut ca, "note:5", |r| r["partial"] == true).await;
    assert_eq!(conns(&r["members"]), vec![ida.clone()], "only its own: {r}");
    assert_eq!(r["connections"], 1);
    // A replica takes the slot over: both nodes' members are shared again.
    cluster.wait_failover(slot, dead);
    let r = read_until(&mut ca, "note:5", |r| {
        r.get("partial").is_none() && r["connections"] == 2
    })
    .await;
    let mut both = vec![ida, idb];
    both.sort();
    assert_eq!(conns(&r["members"]), both, "{r}");
}
