//! Cluster-mode webhooks (§9): two nodes on a real Redis share each
//! endpoint's queue; one node sends at a time; killing it loses nothing;
//! occupancy is decided once for the whole cluster. Each body runs on one
//! Redis and on a three-master Redis Cluster.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::common::{Broker, Client, PATIENCE};
use crate::receiver::{Receiver, Reply};
use crate::redis_cluster::{Backend, on_both, on_owner};
use crate::webhooks::hook;

on_both!(
    a_killed_owner_loses_no_event_and_none_is_in_flight_twice,
    occupancy_is_decided_once_for_the_whole_cluster,
    a_receivers_pause_outlives_the_node_that_was_told,
    a_channel_held_past_the_state_ttl_keeps_its_occupancy,
);

fn node(redis: &impl Backend, id: &str, prefix: &str, hooks: &str) -> Broker {
    Broker::start(&format!(
        "[node]\nid = \"{id}\"\n[cluster]\nmode = \"{}\"\nredis_url = \"{}\"\nkey_prefix = \"{prefix}\"\nlease_ms = 1000\n{hooks}",
        redis.mode(),
        redis.url()
    ))
}

fn prefix() -> String {
    format!("wh{}x{}:", std::process::id(), crate::common::unique())
}

fn owns(b: &Broker, endpoint: &str) -> bool {
    b.node
        .webhooks
        .endpoints()
        .iter()
        .any(|e| e.id() == endpoint && e.is_owner())
}

async fn publish(b: &Broker, n: u64) {
    b.published("doc:c", json!({ "n": n })).await;
}

async fn a_killed_owner_loses_no_event_and_none_is_in_flight_twice(redis: &impl Backend) {
    let p = prefix();
    let mut rx = Receiver::start(|_| Reply::Slow(Duration::from_millis(20)));
    let hooks = hook(
        "shared",
        &rx.url,
        "timeout_ms = 1000\nmax_in_flight = 2\nrate_per_sec = 1000\nburst = 100",
    );
    let a = node(redis, "a", &p, &hooks);
    let b = node(redis, "b", &p, &hooks);
    let n = 60u64;
    for i in 0..n / 2 {
        publish(if i % 2 == 0 { &a } else { &b }, i).await;
    }
    // n → every webhook-id it arrived with (retries and takeovers included).
    let mut got = std::collections::HashMap::<u64, HashSet<String>>::new();
    let record = |got: &mut std::collections::HashMap<u64, HashSet<String>>,
                  g: crate::receiver::Got| {
        let n = g.body["data"]["data"]["n"].as_u64().unwrap();
        got.entry(n).or_default().insert(g.id);
    };
    while got.len() < 10 {
        record(&mut got, rx.next().await);
    }
    // Kill whichever node sends (its lock stays in Redis until it expires).
    let deadline = Instant::now() + PATIENCE;
    while !owns(&a, "shared") && !owns(&b, "shared") {
        assert!(Instant::now() < deadline, "nobody owns the endpoint");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (killed, survivor) = if owns(&a, "shared") { (a, b) } else { (b, a) };
    drop(killed);
    for i in n / 2..n {
        publish(&survivor, i).await;
    }
    while got.len() < n as usize {
        record(&mut got, rx.next().await);
    }
    assert_eq!(
        got.keys().copied().collect::<HashSet<_>>(),
        (0..n).collect()
    );
    assert!(
        got.values().all(|ids| ids.len() == 1),
        "an event arrived under two webhook-ids: {got:?}"
    );
    assert_eq!(rx.overlaps(), 0, "an event was in flight twice at once");
    assert!(owns(&survivor, "shared"));
}

async fn subscribe(c: &mut Client, id: u64) {
    let ack = c
        .call(json!({"type":"subscribe","channel":"doc:room"}), id)
        .await;
    assert_eq!(ack["type"], "ack", "{ack}");
}

async fn unsubscribe(c: &mut Client, id: u64) {
    let ack = c
        .call(json!({"type":"unsubscribe","channel":"doc:room"}), id)
        .await;
    assert_eq!(ack["type"], "ack", "{ack}");
}

async fn occupancy_is_decided_once_for_the_whole_cluster(redis: &impl Backend) {
    let p = prefix();
    let mut rx = Receiver::accepting();
    let hooks = hook(
        "occ",
        &rx.url,
        "events = [\"channel.occupied\", \"channel.vacated\", \"message.published\"]\nvacated_delay_ms = 300\nmax_in_flight = 1",
    );
    let a = node(redis, "a", &p, &hooks);
    let b = node(redis, "b", &p, &hooks);
    let mut on_a = a.client("acme").await;
    let mut on_b = b.client("acme").await;
    subscribe(&mut on_a, 1).await;
    subscribe(&mut on_b, 1).await;
    let first = rx.next().await;
    assert_eq!(first.body["type"], "channel.occupied");
    assert_eq!(first.body["data"]["channel"], "doc:room");
    // One node leaving is not vacated; both leaving is, once.
    unsubscribe(&mut on_a, 2).await;
    unsubscribe(&mut on_b, 2).await;
    let vacated = rx.next().await;
    assert_eq!(
        vacated.body["type"], "channel.vacated",
        "{:?}",
        vacated.body
    );
    // Events go out in stream order: anything else about the channel
    // (a second occupied or vacated) would arrive before this marker.
    a.publish_http("doc:marker", json!("m")).await;
    let marker = rx.next().await;
    assert_eq!(
        marker.body["type"], "message.published",
        "{:?}",
        marker.body
    );
    assert_eq!(marker.body["data"]["channel"], "doc:marker");
}

async fn a_receivers_pause_outlives_the_node_that_was_told(redis: &impl Backend) {
    let p = prefix();
    let mut rx = Receiver::start(|_| Reply::Status(429, vec![("retry-after", "4".into())]));
    // The owner lock (lease 1 s + timeout 1 s) expires well before the
    // receiver's 4 s: a new owner that ignored the pause would retry early.
    let hooks = hook("paused", &rx.url, "timeout_ms = 1000");
    let a = node(redis, "a", &p, &hooks);
    let b = node(redis, "b", &p, &hooks);
    publish(&a, 1).await;
    let first = rx.next().await;
    rx.answer(|_| Reply::ok());
    // Wait until the pause is recorded in Redis, then kill the owner.
    let key = format!("{p}wh:{{paused}}:pause");
    let deadline = Instant::now() + PATIENCE;
    loop {
        let ttl: i64 = on_owner(redis, redis::cmd("PTTL").arg(&key)).await;
        if ttl > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the pause never reached Redis");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (killed, survivor) = if owns(&a, "paused") { (a, b) } else { (b, a) };
    drop(killed);
    let retry = rx.next().await;
    assert_eq!(retry.id, first.id, "webhook-id changed across nodes");
    assert!(
        retry.at.duration_since(first.at) >= Duration::from_secs(4),
        "the new owner retried {:?} after a Retry-After of 4 s",
        retry.at.duration_since(first.at)
    );
    assert!(owns(&survivor, "paused"));
}

/// The occupancy state in Redis expires a day after its last change, so a
/// node renews the state of what it holds (every 6 h): a channel occupied
/// for longer keeps it, and is neither told occupied again by the next
/// join nor left without its vacated. The test ages the key by hand and
/// runs the renewal the timer runs.
async fn a_channel_held_past_the_state_ttl_keeps_its_occupancy(redis: &impl Backend) {
    let p = prefix();
    let mut rx = Receiver::accepting();
    let hooks = hook(
        "occ",
        &rx.url,
        "events = [\"channel.occupied\", \"channel.vacated\"]\nvacated_delay_ms = 50",
    );
    let a = node(redis, "a", &p, &hooks);
    let mut on_a = a.client("acme").await;
    subscribe(&mut on_a, 1).await;
    assert_eq!(rx.next().await.body["type"], "channel.occupied");
    let key = format!("{p}occ:{{doc:room}}");
    let ttl =
        |key: String| async move { on_owner::<i64>(redis, redis::cmd("PTTL").arg(&key)).await };
    let full = ttl(key.clone()).await;
    assert!(full > 3_600_000, "the state's TTL: {full} ms");
    // Nearly a day later (aged by hand), the holder renews it.
    let aged: i64 = on_owner(redis, redis::cmd("PEXPIRE").arg(&key).arg(60_000)).await;
    assert_eq!(aged, 1);
    assert_eq!(a.node.webhooks.renew_occupancy().await, 1);
    let renewed = ttl(key.clone()).await;
    assert!(renewed > 3_600_000, "renewed to {renewed} ms");
    // Once the channel is left (and vacated), it is not renewed any more.
    unsubscribe(&mut on_a, 2).await;
    assert_eq!(rx.next().await.body["type"], "channel.vacated");
    let aged: i64 = on_owner(redis, redis::cmd("PEXPIRE").arg(&key).arg(60_000)).await;
    assert_eq!(aged, 1, "the state outlives the vacate until its TTL");
    assert_eq!(a.node.webhooks.renew_occupancy().await, 0);
    let left = ttl(key).await;
    assert!(
        left <= 60_000,
        "a left channel's state was renewed: {left} ms"
    );
}
