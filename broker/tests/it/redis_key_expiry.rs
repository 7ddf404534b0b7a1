//! Issue 38: every key the cluster writes to Redis expires. Two nodes
//! with an admin key and a webhook endpoint do what clients and operators
//! do in cluster mode (publish over WebSocket and HTTP, history reads over
//! GraphQL, joins with `since`, a rate limit, a ban, occupancy, presence
//! members) and then
//! every key of the test's own Redis (every master of a Redis Cluster) is
//! read back: each has a TTL (`PTTL` > 0), and the census saw every kind
//! of key those actions write (so an action that stopped writing one would
//! not pass it unread).

use std::time::{Duration, Instant};

use serde_json::json;

use crate::admin::{admin_config, ban};
use crate::cluster::{prefix, two_nodes};
use crate::cluster_sharded::master;
use crate::common::{Client, PATIENCE};
use crate::graphql::query;
use crate::receiver::Receiver;
use crate::redis_cluster::{Backend, on_both};
use crate::webhooks::hook;

on_both!(every_key_the_cluster_writes_expires);

/// Every key on every master of `redis`, with its `PTTL` (-1: none, -2:
/// gone between the scan and the read).
pub async fn census(redis: &impl Backend) -> Vec<(String, i64)> {
    let mut out = Vec::new();
    for port in redis.ports() {
        let mut conn = master(port).await;
        let mut cursor = 0u64;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut conn)
                .await
                .unwrap();
            for key in keys {
                let ttl: i64 = redis::cmd("PTTL")
                    .arg(&key)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                out.push((key, ttl));
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
    out
}

/// The kinds of key the actions below write (after the prefix; `{` of a
/// Redis Cluster hash tag ignored), each of which the census must see.
const KINDS: [&str; 14] = [
    "seq:",
    "hist:",
    "hidx:",
    "hbytes:",
    "key:",
    "acct:",
    "hs:",
    "conns:",
    "nodes",
    "admin:{ops}:bans",
    "wh:{census}:q",
    "wh:nodes",
    "occ:",
    "pr:",
];

async fn every_key_the_cluster_writes_expires(redis: &impl Backend) {
    let p = prefix();
    let mut rx = Receiver::accepting();
    let hooks = hook(
        "census",
        &rx.url,
        "events = [\"channel.occupied\", \"channel.vacated\", \"message.published\", \"limit.exceeded\"]\nvacated_delay_ms = 50\nrate_per_sec = 1000\nburst = 1000",
    );
    // A socket's burst of 100, so one socket's admitted publishes reach
    // the account's sampled charge (every 25 units) before its rate limit;
    // two sockets an account.
    let plan = "[plans.free]\nburst = 100\nmax_connections = 2\n";
    // Presence on `doc:` (§13): members and their leases in Redis.
    let presence = "[namespaces.doc]\npresence = true\n";
    let (a, b) = two_nodes(
        redis,
        &p,
        &format!("{}{hooks}{plan}{presence}", admin_config()),
    )
    .await;

    // A socket on a: subscribe (connection count, handshake bucket,
    // occupancy), 120 publishes at once: 100 admitted (account budget,
    // seq, history, the history index), the rest refused.
    let mut on_a = a.client("acme").await;
    let ack = on_a
        .call(json!({"type":"subscribe","channel":"doc:census"}), 1)
        .await;
    assert_eq!(ack["type"], "ack", "{ack}");
    for i in 0..120u64 {
        on_a.send(json!({"type":"publish","channel":"doc:census","data":i}))
            .await;
    }
    on_a.until(|v| v["code"] == "rate_limited").await;
    // An API key's publish on b (the key's bucket).
    let r = b.publish_http("doc:census", json!("http")).await;
    assert_eq!(r.status(), 200);
    let seq = r.json::<serde_json::Value>().await.unwrap()["seq"]
        .as_u64()
        .unwrap();
    // Joins with `since` on b: one recovering, one at the position.
    let mut on_b = b.client("acme").await;
    for (id, since) in [(1, seq - 2), (2, seq)] {
        let ack = on_b
            .call(
                json!({"type":"subscribe","channel":"doc:census","since":since}),
                id,
            )
            .await;
        assert_eq!(ack["recovered"], true, "{ack}");
    }
    // GraphQL reads (the key's bucket again).
    let answer = query(
        &a,
        "{ channel(name: \"doc:census\") { seq history(last: 1) { seq } } }",
        json!({}),
    )
    .await;
    // The socket's admitted publishes may still be going out after its
    // rate_limited frame, so the counter may be past the HTTP publish's.
    let channel = &answer.body["data"]["channel"];
    let now = channel["seq"].as_u64().unwrap_or_default();
    assert!(now >= seq, "{}", answer.text);
    assert!(
        channel["history"][0]["seq"].as_u64() <= Some(now)
            && channel["history"][0]["seq"].as_u64() >= Some(seq),
        "{}",
        answer.text
    );
    // A member of another channel who stays (presence keys live while a
    // node holds members).
    let mut member = b.client("roomie").await;
    let ack = member
        .call(json!({"type":"subscribe","channel":"doc:present"}), 1)
        .await;
    assert_eq!(ack["type"], "ack", "{ack}");
    // An operator's ban.
    ban(&a, json!({"account":"villain","ttlMs":60_000})).await;
    // A third socket of the account is over its cap (limit.exceeded).
    let refused = b.try_connect(&b.token("acme")).await;
    assert_eq!(refused.err().map(|r| r.0), Some(429));
    // Occupancy ends: both sockets leave, the endpoint is told vacated.
    unsubscribe(&mut on_a).await;
    unsubscribe(&mut on_b).await;
    let mut seen = Vec::new();
    while !seen.contains(&"channel.vacated".to_owned()) {
        seen.push(rx.next().await.body["type"].as_str().unwrap().to_owned());
    }
    for kind in ["channel.occupied", "message.published", "limit.exceeded"] {
        assert!(seen.iter().any(|s| s == kind), "no {kind} in {seen:?}");
    }

    // Every kind written, each key with a TTL.
    let deadline = Instant::now() + PATIENCE;
    let keys = loop {
        let keys = census(redis).await;
        let missing: Vec<&str> = KINDS
            .iter()
            .copied()
            .filter(|kind| !keys.iter().any(|(k, _)| is_kind(k, &p, kind)))
            .collect();
        if missing.is_empty() {
            break keys;
        }
        assert!(
            Instant::now() < deadline,
            "never written: {missing:?} (keys: {keys:?})"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let forever: Vec<&(String, i64)> = keys.iter().filter(|(_, ttl)| *ttl == -1).collect();
    assert!(forever.is_empty(), "keys without a TTL: {forever:?}");
    assert!(keys.iter().all(|(k, _)| k.starts_with(&p)), "{keys:?}");
}

/// Whether `key` (under prefix `p`) is of `kind`, hash-tag braces aside.
fn is_kind(key: &str, p: &str, kind: &str) -> bool {
    let Some(rest) = key.strip_prefix(p) else {
        return false;
    };
    if kind.contains('{') {
        return rest.starts_with(kind);
    }
    rest.replace(['{', '}'], "").starts_with(kind)
}

/// Leaves `doc:census`. The socket that ran into its rate limit may find
/// its bucket still empty: the frame is then dropped and reported in a
/// `rate_limited` error's `ids` (§3), and, as a client would, it is sent
/// again after `retryAfterMs`.
async fn unsubscribe(c: &mut Client) {
    let id = json!(9);
    loop {
        c.send(json!({"type":"unsubscribe","channel":"doc:census","id":9}))
            .await;
        let answer = c
            .until(|v| v["id"] == id || v["ids"].as_array().is_some_and(|ids| ids.contains(&id)))
            .await;
        if answer["code"] == "rate_limited" {
            let wait = answer["retryAfterMs"].as_u64().unwrap_or(50).max(1);
            tokio::time::sleep(Duration::from_millis(wait)).await;
            continue;
        }
        assert_eq!(answer["type"], "ack", "{answer}");
        return;
    }
}
