//! What presence may cost Redis, on a real Redis this test starts: every
//! presence key expires (joins of many distinct channels leave none
//! without a TTL, and a dead node's members and keys go within its
//! lease), a read's Redis output is in proportion to what it returns
//! (`presence` with a small `limit` and `presence_stats` on a channel of
//! many members with large infos), and a presence event not sealed with
//! `cluster.secret` is ignored.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::cluster::{node, prefix};
use crate::common::{Broker, Client, PATIENCE, metric_value};
use crate::presence_cluster::up;
use crate::presence_single::conns;
use crate::redis_server::RedisServer;

const NS: &str = "[namespaces.note]\npresence = true\njoin_leave = true\ndiff_ms = 50\n";

/// A connection may send more than the default 20 frames a second (the
/// tests subscribe and read in bursts).
const FAST: &str = "[plans.free]\nmessages_per_sec = 1000\nburst = 1000\n";

fn token(b: &Broker, user: &str, info: Value) -> String {
    b.member_token(user, &["note:*"], Some(info))
}

async fn redis_conn(redis: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Every key under `pattern`, with its PTTL.
async fn keys_and_ttls(
    conn: &mut redis::aio::MultiplexedConnection,
    pattern: &str,
) -> Vec<(String, i64)> {
    let mut keys: Vec<String> = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(conn)
            .await
            .unwrap();
        keys.extend(batch);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    let mut out = Vec::new();
    for k in keys {
        let ttl: i64 = redis::cmd("PTTL").arg(&k).query_async(conn).await.unwrap();
        // A key that expired between the scan and its PTTL is not kept.
        if ttl != -2 {
            out.push((k, ttl));
        }
    }
    out
}

async fn subscribe_many(c: &mut Client, channels: impl Iterator<Item = String>) {
    let mut id = 0;
    for ch in channels {
        id += 1;
        let ack = c.call(json!({"type":"subscribe","channel":ch}), id).await;
        assert_eq!(ack["type"], "ack", "{ack}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_presence_key_expires_and_a_dead_nodes_members_and_keys_go_within_its_lease() {
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
        ("id = \"n1\"", "id = \"doomed\""),
        (
            "messages_per_sec = 20\nburst = 20\n",
            "messages_per_sec = 1000\nburst = 1000\n",
        ),
    ]);
    let mut doomed = crate::process::Proc::start(&config).await;
    let a = node(&redis, "a", &p, &format!("{NS}{FAST}"));
    up(&a).await;
    // Many distinct channels, joined once each, on both nodes; one of
    // them shared.
    let mut on_doomed = Client::connect(&doomed.ws(), &token(&a, "zoe", json!({"n": 1})))
        .await
        .unwrap();
    on_doomed.next_json().await;
    subscribe_many(&mut on_doomed, (0..60).map(|i| format!("note:d{i}"))).await;
    let (mut on_a, ida) = {
        let mut c = Client::connect(&a.ws_url(), &token(&a, "ann", json!({"n": 2})))
            .await
            .unwrap();
        let id = c.next_json().await["connId"].as_str().unwrap().to_owned();
        (c, id)
    };
    subscribe_many(
        &mut on_a,
        (0..60)
            .map(|i| format!("note:a{i}"))
            .chain(["note:d0".to_owned()]),
    )
    .await;
    let mut conn = redis_conn(&redis).await;
    let pattern = format!("{p}pr:*");
    let keys = keys_and_ttls(&mut conn, &pattern).await;
    assert!(keys.len() >= 120, "{} presence keys", keys.len());
    let lasting: Vec<&(String, i64)> = keys.iter().filter(|(_, t)| *t <= 0 || *t > 1000).collect();
    assert!(
        lasting.is_empty(),
        "keys without a TTL within the lease: {lasting:?}"
    );

    doomed.kill9().await;
    // Within its lease the dead node's channels are gone from Redis, and
    // in the one it shared only node a's member is left.
    let deadline = Instant::now() + PATIENCE;
    loop {
        let keys = keys_and_ttls(&mut conn, &pattern).await;
        let dead: Vec<&String> = keys
            .iter()
            .map(|(k, _)| k)
            .filter(|k| k.contains("{note:d") && !k.contains("{note:d0}"))
            .collect();
        if dead.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "left behind: {dead:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = on_a
        .call(json!({"type":"presence","channel":"note:d0"}), 500)
        .await;
    assert_eq!(conns(&r["members"]), vec![ida], "{r}");
    let keys = keys_and_ttls(&mut conn, &pattern).await;
    assert!(keys.iter().all(|(_, t)| *t > 0), "{keys:?}");
}

/// `total_net_output_bytes` of Redis's INFO stats.
async fn output_bytes(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query_async(conn)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("total_net_output_bytes:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("INFO stats has total_net_output_bytes")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_of_a_few_members_or_the_counts_reads_a_few_members_from_redis() {
    const MEMBERS: usize = 80;
    let redis = RedisServer::start();
    let p = prefix();
    let limits = "[handshake]\nip_handshakes_per_sec = 1000\nip_handshake_burst = 1000\nip_max_open = 1000\n";
    let a = node(
        &redis,
        "a",
        &p,
        &format!("{NS}join_leave_max_members = 10\n{limits}{FAST}"),
    );
    up(&a).await;
    // Members with infos near the 1 KiB bound.
    let pad = "x".repeat(900);
    let mut clients = Vec::new();
    for i in 0..MEMBERS {
        let user = format!("user{i:03}");
        let mut c = Client::connect(&a.ws_url(), &token(&a, &user, json!({ "pad": pad })))
            .await
            .unwrap();
        c.next_json().await;
        let ack = c
            .call(json!({"type":"subscribe","channel":"note:big"}), 1)
            .await;
        assert_eq!(ack["type"], "ack", "{ack}");
        clients.push(c);
    }
    let all_infos = MEMBERS * pad.len();
    let reader = &mut clients[0];
    let whole = reader
        .call(
            json!({"type":"presence","channel":"note:big","limit":1000}),
            2,
        )
        .await;
    assert_eq!(whole["members"].as_array().unwrap().len(), MEMBERS);
    let mut conn = redis_conn(&redis).await;
    let before = output_bytes(&mut conn).await;
    for id in 10..20 {
        let r = reader
            .call(
                json!({"type":"presence","channel":"note:big","limit":1}),
                id,
            )
            .await;
        assert_eq!(r["members"].as_array().unwrap().len(), 1, "{r}");
        assert_eq!(r["members"][0]["user"], "user000", "the first in order");
        assert_eq!(
            (r["users"].clone(), r["connections"].clone()),
            (json!(MEMBERS), json!(MEMBERS))
        );
        let s = reader
            .call(
                json!({"type":"presence_stats","channel":"note:big"}),
                id + 100,
            )
            .await;
        assert_eq!(s["connections"], json!(MEMBERS), "{s}");
    }
    let moved = output_bytes(&mut conn).await - before;
    // Twenty reads of one member or none moved less than one listing of
    // every member's info (each read once moved them all).
    assert!(
        (moved as usize) < all_infos,
        "{moved} bytes out of Redis for 20 small reads; every info is {all_infos}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_presence_event_not_sealed_by_a_node_is_ignored() {
    let redis = RedisServer::start();
    let p = prefix();
    let a = node(&redis, "a", &p, NS);
    let b = node(&redis, "b", &p, NS);
    up(&a).await;
    up(&b).await;
    let mut ann = Client::connect(&a.ws_url(), &token(&a, "ann", json!({})))
        .await
        .unwrap();
    ann.next_json().await;
    ann.call(json!({"type":"subscribe","channel":"note:f"}), 1)
        .await;
    let mut bob = Client::connect(&b.ws_url(), &token(&b, "bob", json!({})))
        .await
        .unwrap();
    let idb = bob.next_json().await["connId"].as_str().unwrap().to_owned();
    bob.call(json!({"type":"subscribe","channel":"note:f"}), 1)
        .await;
    ann.until(|v| v["type"] == "presence_diff" && conns(&v["joins"]).contains(&idb))
        .await;
    // Anyone who can PUBLISH on this Redis: a join of Mallory, Bob's
    // leave, in the old plain form and under a made-up seal.
    let topic = format!("{p}pr:events");
    let join =
        json!({"n":"evil:1","c":"note:f","j":[["mallory","evil-1",null]],"l":[]}).to_string();
    let leave = json!({"n":"evil:1","c":"note:f","j":[],"l":[["bob",idb,null]]}).to_string();
    let sealed = format!(
        "tg1:{}:0000000000000001:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA:{join}",
        tidegate::clock::unix_ms()
    );
    let mut conn = redis_conn(&redis).await;
    for forged in [&join, &leave, &sealed] {
        let _: i64 = redis::cmd("PUBLISH")
            .arg(&topic)
            .arg(forged)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    // A real join after them, on the same topic: by the time Ann hears
    // it, node a has seen the forgeries.
    let mut cid = Client::connect(&b.ws_url(), &token(&b, "cid", json!({})))
        .await
        .unwrap();
    let idc = cid.next_json().await["connId"].as_str().unwrap().to_owned();
    cid.call(json!({"type":"subscribe","channel":"note:f"}), 1)
        .await;
    loop {
        let v = ann.until(|v| v["type"] == "presence_diff").await;
        assert!(!v.to_string().contains("mallory"), "a forged join: {v}");
        assert!(!conns(&v["leaves"]).contains(&idb), "a forged leave: {v}");
        if conns(&v["joins"]).contains(&idc) {
            break;
        }
    }
    let r = ann
        .call(json!({"type":"presence","channel":"note:f"}), 9)
        .await;
    assert_eq!(r["connections"], 3, "{r}");
    let metrics = a.metrics().await;
    let rejected = |reason: &str| {
        metric_value(
            &metrics,
            &format!("tidegate_cluster_control_rejected_total{{reason=\"{reason}\"}}"),
        )
    };
    assert!(
        rejected("unsigned") >= 2.0 && rejected("bad_signature") >= 1.0,
        "{metrics}"
    );
}
