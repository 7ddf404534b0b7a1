//! Issue 26: recovery (`since`) from the cluster's history in Redis is read
//! in pages under the socket's mark, never copied whole: a socket that
//! never reads holds about its mark and is closed with 4008, a reading one
//! gets every `seq` once and in order then live, a page trimmed out of the
//! history is reported (`slow_consumer` with how many) and delivery goes
//! on in order; gRPC `Subscribe` pages the same way. The same trim says
//! `recovered:false` on an SSE stream (§14) and ends a GraphQL
//! subscription with `SLOW_CONSUMER` at its last `seq` (§12).

use std::time::Instant;

use serde_json::json;
use tokio::io::AsyncWriteExt;

use crate::bounds_memory::{
    RECOVERY, held_to_the_mark_then_4008, history, never_reads, reading,
    recovers_every_channel_in_order_then_live, rss,
};
use crate::cluster::{bridge_up, node, prefix};
use crate::common::{Broker, PATIENCE, masked_text, small_window, upgrade_on};
use crate::redis_cluster::{Backend, on_both};
use crate::redis_server::RedisServer;

on_both!(
    a_client_that_recovers_redis_history_and_never_reads_holds_only_its_mark_then_gets_4008,
    a_reading_client_recovers_redis_history_in_order_without_gap_then_live_messages,
    a_page_trimmed_out_of_redis_history_is_reported_and_delivery_goes_on_in_order,
    an_sse_stream_whose_page_was_trimmed_says_recovered_false_and_goes_on_in_order,
    a_graphql_subscription_whose_page_was_trimmed_ends_with_slow_consumer_at_its_last_seq,
);

/// A node of a cluster on `redis` with `extra` config, bridged.
async fn bridged(redis: &impl Backend, extra: &str) -> Broker {
    let b = node(redis, "a", &prefix(), extra);
    bridge_up(&b, true).await;
    b
}

/// [`RECOVERY`] with a 20-message history, a reader never closed for
/// being slow, and a small send buffer: the trim tests' broker.
fn trimmable() -> String {
    RECOVERY.replace("size = 200", "size = 20")
        + "outbound_grace_ms = 60000\n[socket]\nsend_buffer_bytes = 4096\n"
}

/// Once the one reader's recovery has filled half its mark (and waits for
/// it), 14 small messages push the 14 oldest out of the 20-message
/// history of `doc:h0`.
async fn trim_while_it_waits(b: &Broker) {
    let deadline = Instant::now() + PATIENCE;
    while b.node.sockets.iter().all(|s| s.gauge.pending() < 32 << 10) {
        assert!(
            Instant::now() < deadline,
            "the recovery never filled the mark"
        );
        tokio::task::yield_now().await;
    }
    for i in 0..14 {
        b.node.publish("doc:h0", &i.to_string(), "test", None).await;
    }
}

/// What a reader got after a trim: what was queued before it, then what
/// the history still held (from `since + 15`), then live, in order and
/// each once. Returns how many came before the hole.
fn around_the_hole(seqs: &[u64], since: u64) -> u64 {
    let before = seqs.iter().take_while(|s| **s <= since + 14).count() as u64;
    assert!(
        before < 14,
        "the reader took the whole history before the trim"
    );
    let expected: Vec<u64> = (since + 1..=since + before)
        .chain(since + 15..=since + 34)
        .collect();
    assert_eq!(seqs, expected);
    before
}

/// A socket that never reads (small window) subscribing with `since` to
/// `doc:h0`… at `since`.
async fn never_reading(b: &Broker, since: &[u64]) -> tokio::net::TcpStream {
    let token = b.token("acme");
    let mut s = upgrade_on(small_window(b.addr).await, b.addr, &token).await;
    for (c, since) in since.iter().enumerate() {
        let frame =
            format!(r#"{{"type":"subscribe","channel":"doc:h{c}","since":{since},"id":{c}}}"#);
        s.write_all(&masked_text(frame.as_bytes())).await.unwrap();
    }
    s
}

async fn a_client_that_recovers_redis_history_and_never_reads_holds_only_its_mark_then_gets_4008(
    redis: &impl Backend,
) {
    let b = bridged(redis, &never_reads()).await;
    // 10 channels × 100 messages × 32 KiB in Redis: 32 MiB, 500 times the
    // socket's mark.
    let since = history(&b, 10, 100, 32 << 10).await;
    let s = never_reading(&b, &since).await;
    held_to_the_mark_then_4008(&b, s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sockets_recovering_redis_history_without_reading_do_not_grow_the_broker() {
    let redis = RedisServer::start();
    // A grace long enough that every socket holds whatever it holds while
    // the broker is looked at, for a second at least.
    let config = never_reads().replace("outbound_grace_ms = 300", "outbound_grace_ms = 1000");
    let b = bridged(&redis, &config).await;
    let since = history(&b, 10, 100, 32 << 10).await;
    let before = rss(std::process::id());
    // 6 sockets × 10 channels of 3.2 MiB: copied whole, 192 MiB.
    let n = 6;
    let mut sockets = Vec::new();
    for _ in 0..n {
        sockets.push(never_reading(&b, &since).await);
    }
    let series = "tidegate_rejections_total{layer=\"outbound\",reason=\"slow_consumer_closed\"}";
    let deadline = Instant::now() + PATIENCE;
    let mut worst = 0;
    while b.metric(series).await < f64::from(n) {
        assert!(Instant::now() < deadline, "not every socket got 4008");
        worst = worst.max(rss(std::process::id()).saturating_sub(before));
        tokio::task::yield_now().await;
    }
    println!("broker grew by at most {} KiB", worst >> 10);
    assert!(
        worst < 48 << 20,
        "the broker grew by {} KiB for {n} sockets recovering history they never read",
        worst >> 10
    );
    for s in sockets {
        let mut c = reading(s).await;
        assert_eq!(c.closed().await, Some(4008));
    }
    // Each socket is counted once (two grace timers of one episode once
    // counted a socket twice, and the loop above stopped early).
    assert_eq!(b.metric(series).await, f64::from(n));
}

async fn a_reading_client_recovers_redis_history_in_order_without_gap_then_live_messages(
    redis: &impl Backend,
) {
    // A 64 KiB mark: pages of at most 32 KiB, three messages at most.
    let b = bridged(redis, RECOVERY).await;
    recovers_every_channel_in_order_then_live(&b).await;
    assert!(
        b.metric("tidegate_redis_script_duration_seconds_count{script=\"page\"}")
            .await
            >= 5.0 * 25.0,
        "recovered in pages of at most half the mark"
    );
}

async fn a_page_trimmed_out_of_redis_history_is_reported_and_delivery_goes_on_in_order(
    redis: &impl Backend,
) {
    let b = bridged(redis, &trimmable()).await;
    // 20 messages of 16 KiB: the history holds exactly them.
    let since = history(&b, 1, 20, 16 << 10).await[0];
    let s = never_reading(&b, &[since]).await;
    trim_while_it_waits(&b).await;
    let mut c = reading(s).await;
    assert_eq!(c.next_json().await["type"], "welcome");
    let ack = c.next_json().await;
    assert_eq!(ack["recovered"], true, "{ack}");
    let mut seqs = Vec::new();
    let mut dropped = None;
    while seqs.last() != Some(&(since + 34)) {
        let v = c.next_json().await;
        match (v["type"].as_str(), v["code"].as_str()) {
            (Some("message"), _) => seqs.push(v["seq"].as_u64().unwrap()),
            (Some("budget"), _) => {}
            (Some("error"), Some("slow_consumer")) => {
                assert!(dropped.is_none(), "reported twice: {v}");
                dropped = v["dropped"].as_u64();
            }
            _ => panic!("unexpected {v}"),
        }
    }
    let before = around_the_hole(&seqs, since);
    if dropped.is_none() {
        let v = c.next_json().await;
        assert_eq!(v["code"], "slow_consumer", "{v}");
        dropped = v["dropped"].as_u64();
    }
    assert_eq!(dropped, Some(14 - before), "the lost messages are counted");
}

#[actix_rt::test]
async fn a_grpc_subscribe_recovers_redis_history_in_order_in_pages() {
    use crate::grpc::{authed, connect, subscribe_req};
    use crate::grpc_subscribe::{next, next_message};
    use tidegate::grpc::proto::subscribe_event::Event;
    let redis = RedisServer::start();
    // An 8 KiB mark: pages of 4 KiB, four messages of 1 KiB each; recovery
    // free, so the key's bucket does not stand in the way.
    let b = bridged(
        &redis,
        "[history]\nsize = 100\n[plans.free]\noutbound_high_water_bytes = 8192\n\
         [plans.free.costs]\nrecovery_per_kib = 0\n",
    )
    .await;
    let since = history(&b, 3, 60, 1 << 10).await;
    let names: Vec<String> = (0..3).map(|c| format!("doc:h{c}")).collect();
    let req: Vec<(&str, Option<u64>)> = names
        .iter()
        .zip(&since)
        .map(|(n, s)| (n.as_str(), Some(*s)))
        .collect();
    let mut c = connect(&b).await;
    let mut s = c
        .subscribe(authed(subscribe_req(&req), crate::common::API_KEY))
        .await
        .unwrap()
        .into_inner();
    for (name, since) in names.iter().zip(&since) {
        match next(&mut s).await.unwrap() {
            Some(Event::Ack(a)) => {
                assert_eq!(&a.channel, name);
                assert_eq!(a.recovered, Some(true));
                assert_eq!(a.seq, since + 60);
            }
            other => panic!("{other:?}"),
        }
        for i in 1..=60 {
            let m = next_message(&mut s).await;
            assert_eq!((&m.channel, m.seq), (name, since + i));
        }
    }
    let live = b.node.publish("doc:h1", "1", "test", None).await.seq;
    let m = next_message(&mut s).await;
    assert_eq!((m.channel.as_str(), m.seq), ("doc:h1", live));
    assert!(
        b.metric("tidegate_redis_script_duration_seconds_count{script=\"page\"}")
            .await
            >= 45.0,
        "read in pages of at most half the stream's mark"
    );
}

/// §14 over the same trim: an SSE stream resuming from `Last-Event-ID`
/// whose next page left the history is told `recovered:false` for the
/// channel, and gets what was queued before, then what the history still
/// holds, then live messages, in order and each once.
async fn an_sse_stream_whose_page_was_trimmed_says_recovered_false_and_goes_on_in_order(
    redis: &impl Backend,
) {
    use crate::sse_client::open_on;
    let b = bridged(redis, &trimmable()).await;
    let path = format!("/v1/sse?token={}&channel=doc:h0", b.token("acme"));
    // A position at a first message, from a stream that reads.
    let mut first = open_on(small_window(b.addr).await, b.addr, &path, &[])
        .await
        .expect("opened");
    assert!(first.event().await.is("welcome"));
    // Live once the join through the bridge is done: its id arrives.
    while first.next().await.unwrap().id.is_none() {}
    let since = b.node.publish("doc:h0", "0", "test", None).await.seq;
    assert_eq!(first.message().await["seq"], since);
    let position = first.last_id.clone().unwrap();
    drop(first);
    b.wait_sockets(0).await;
    // 20 messages of 16 KiB after it: the history holds exactly them.
    let data = format!("\"{}\"", "x".repeat(16 << 10));
    for _ in 0..20 {
        b.node.publish("doc:h0", &data, "test", None).await;
    }
    let mut s = open_on(
        small_window(b.addr).await,
        b.addr,
        &path,
        &[("Last-Event-ID", &position)],
    )
    .await
    .expect("opened");
    trim_while_it_waits(&b).await;
    let mut seqs = Vec::new();
    let mut said = Vec::new();
    while seqs.last() != Some(&(since + 34)) {
        let e = s.event().await;
        if e.is("message") {
            seqs.push(e.json()["seq"].as_u64().unwrap());
        } else if e.is("recovered") {
            assert_eq!(e.json()["channel"], "doc:h0", "{e:?}");
            said.push(e.json()["recovered"].as_bool().unwrap());
        } else {
            assert!(e.is("welcome"), "unexpected {e:?}");
        }
    }
    // Resumed (true), then the lost page said once (false).
    assert_eq!(said, [true, false], "the recovered events");
    let before = around_the_hole(&seqs, since);
    assert_eq!(
        b.metric("tidegate_rejections_total{layer=\"outbound\",reason=\"recovery_lost\"}")
            .await,
        (14 - before) as f64,
        "the lost messages are counted"
    );
}

/// The same trim under a `graphql-transport-ws` subscription: what was
/// sent before the hole is in order, then the subscription ends with
/// `SLOW_CONSUMER` and the last `seq` it sent; subscribing again from
/// there says `recovered: false` (no backlog, §2) and goes on live.
async fn a_graphql_subscription_whose_page_was_trimmed_ends_with_slow_consumer_at_its_last_seq(
    redis: &impl Backend,
) {
    use crate::common::API_KEY;
    use crate::graphql_ws::{SUB, init, never_reading, nexts_then_end, subscribe};
    let b = bridged(redis, &trimmable()).await;
    // 20 messages of 16 KiB: the history holds exactly them.
    let since = history(&b, 1, 20, 16 << 10).await[0];
    let sub = json!({"type":"subscribe","id":"s",
        "payload":{"query": SUB, "variables":{"c":"doc:h0","s":since}}});
    let s = never_reading(&b, &[init(API_KEY), sub]).await;
    trim_while_it_waits(&b).await;
    let mut c = reading(s).await;
    let (got, end) = nexts_then_end(&mut c).await;
    assert_eq!(
        (&end["type"], &end["id"]),
        (&json!("error"), &json!("s")),
        "{end}"
    );
    let x = &end["payload"][0]["extensions"];
    assert_eq!(x["code"], "SLOW_CONSUMER", "{end}");
    let before = got.len() as u64;
    assert!(
        before < 14,
        "the socket took the whole history before the trim"
    );
    assert_eq!(
        got,
        (since + 1..=since + before).collect::<Vec<_>>(),
        "in order before the hole"
    );
    assert_eq!(x["lastSeq"], since + before, "{end}");
    assert!(x["dropped"].as_u64().unwrap() >= 14 - before, "{end}");
    // From `lastSeq`: the history no longer holds what follows it. What
    // is published before the join reads the channel's position counts as
    // backlog (not sent), so messages go on being published until one
    // arrives.
    subscribe(
        &mut c,
        "again",
        SUB,
        json!({"c":"doc:h0","s": since + before}),
    )
    .await;
    let node = b.node.clone();
    let publisher = tokio::spawn(async move {
        let mut tick = tokio::time::interval(std::time::Duration::from_millis(10));
        loop {
            tick.tick().await;
            node.publish("doc:h0", "\"live\"", "test", None).await;
        }
    });
    let m = c.until(|v| v["id"] == "again").await;
    publisher.abort();
    assert_eq!(m["payload"]["extensions"]["recovered"], false, "{m}");
    let seq = m["payload"]["data"]["messages"]["seq"].as_u64().unwrap();
    assert!(seq > since + 34, "no backlog, then live: {m}");
}
