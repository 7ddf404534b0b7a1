//! Issue 26 on `graphql-transport-ws`: a `messages` subscription's
//! recovered history (`since`) is delivered like a `/v1/ws` socket's, in
//! slices under the outbound mark, paid for per KiB recovered; a client
//! that does not read holds the broker to its mark and is closed with 4008
//! once the grace passes, and one that reads gets everything, in order,
//! then live messages, with no gap and no duplicate.

use std::time::Instant;

use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use crate::bounds_memory::reading;
use crate::common::{API_KEY, Broker, PATIENCE, masked_text, small_window, upgrade_path};
use crate::graphql_ws::{SUB, connected, next_for, subscribe};

/// `per` messages of `size` bytes on each of `channels` channels
/// `doc:g0`…; the `seq` before each one's first.
async fn history(b: &Broker, channels: usize, per: usize, size: usize) -> Vec<u64> {
    let data = format!("\"{}\"", "x".repeat(size));
    let mut since = Vec::new();
    for c in 0..channels {
        let name = format!("doc:g{c}");
        since.push(b.node.publish(&name, &data, "test").await - 1);
        for _ in 1..per {
            b.node.publish(&name, &data, "test").await;
        }
    }
    since
}

/// A free plan whose account budget pays for a large recovery.
const RICH: &str = "[history]\nsize = 200\n[plans.free]\nmessages_per_sec = 100000\nburst = 100000\n\
    account_messages_per_sec = 100000\naccount_burst = 100000\noutbound_high_water_bytes = 65536\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graphql_subscription_recovering_history_it_never_reads_holds_only_the_mark_then_4008() {
    let b = Broker::start(&format!(
        "{RICH}outbound_grace_ms = 300\n[socket]\nsend_buffer_bytes = 4096\nclose_timeout_ms = 60000\n"
    ));
    // 4 channels × 100 messages × 32 KiB: 12.8 MiB of history, 200 times
    // the socket's mark.
    let since = history(&b, 4, 100, 32 << 10).await;
    let token = b.token("acme");
    let mut s = upgrade_path(
        small_window(b.addr).await,
        b.addr,
        "/v1/graphql",
        "graphql-transport-ws",
    )
    .await;
    let mut frames = vec![
        json!({"type":"connection_init","payload":{"authorization": format!("Bearer {token}")}}),
    ];
    for (c, since) in since.iter().enumerate() {
        frames.push(json!({"type":"subscribe","id":format!("s{c}"),
            "payload":{"query": SUB, "variables":{"c":format!("doc:g{c}"),"s":since}}}));
    }
    for f in frames {
        s.write_all(&masked_text(f.to_string().as_bytes()))
            .await
            .unwrap();
    }
    // While the grace runs out, what the broker holds for the socket stays
    // near its mark whenever it is looked at.
    let series = "tidegate_rejections_total{layer=\"outbound\",reason=\"slow_consumer_closed\"}";
    let deadline = Instant::now() + PATIENCE;
    let mut worst = 0;
    while b.metric(series).await <= 0.0 {
        assert!(Instant::now() < deadline, "{series} never rose");
        for sock in b.node.sockets.iter() {
            worst = worst.max(sock.gauge.pending());
        }
        tokio::task::yield_now().await;
    }
    assert!(worst > 0, "nothing was ever queued");
    assert!(
        worst <= 65536 + (33 << 10) + 4096,
        "a GraphQL socket held {worst} unsent bytes of recovered history"
    );
    let mut c = reading(s).await;
    assert_eq!(c.closed().await, Some(4008));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reading_graphql_client_recovers_every_subscription_in_order_then_live() {
    let b = Broker::start(&RICH.replace("65536", "131072"));
    // 3 channels × 100 × 8 KiB: 2.4 MiB, many times the 128 KiB mark.
    let since = history(&b, 3, 100, 8 << 10).await;
    let mut c = connected(&b, &b.token("acme")).await;
    for (i, s) in since.iter().enumerate() {
        subscribe(
            &mut c,
            &format!("s{i}"),
            SUB,
            json!({"c":format!("doc:g{i}"),"s":s}),
        )
        .await;
    }
    // Live messages published while the backlogs are being delivered.
    let node = b.node.clone();
    let live = tokio::spawn(async move {
        for round in 0..20 {
            for ch in 0..3 {
                node.publish(&format!("doc:g{ch}"), &round.to_string(), "test")
                    .await;
            }
        }
    });
    let mut last = since.clone();
    let end: Vec<u64> = since.iter().map(|s| s + 120).collect();
    while last.iter().zip(&end).any(|(l, e)| l < e) {
        let m: Value = c.next_json().await;
        assert_eq!(m["type"], "next", "{m}");
        let i: usize = m["id"].as_str().unwrap()[1..].parse().unwrap();
        let seq = m["payload"]["data"]["messages"]["seq"].as_u64().unwrap();
        if last[i] == since[i] {
            assert_eq!(m["payload"]["extensions"]["recovered"], true, "{m}");
        }
        assert_eq!(seq, last[i] + 1, "s{i}: a gap or a duplicate");
        last[i] = seq;
    }
    live.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graphql_recovery_is_paid_for_before_any_of_it_is_sent() {
    let b = Broker::start("[history]\nsize = 100\n");
    // 50 messages of 8 KiB: about 400 units at one per started KiB, twice
    // the API key's bucket.
    let since = history(&b, 1, 50, 8 << 10).await;
    let mut c = connected(&b, API_KEY).await;
    subscribe(&mut c, "big", SUB, json!({"c":"doc:g0","s":since[0]})).await;
    let refused = next_for(&mut c, "big").await;
    assert_eq!(refused["type"], "error", "{refused}");
    assert_eq!(
        refused["payload"][0]["extensions"]["code"], "RATE_LIMITED",
        "{refused}"
    );
    assert_eq!(b.node.hub.subscriber_count("doc:g0"), 0);
    // A recovery the key can pay for goes through, in order.
    let small = b.node.publish("doc:small", "1", "test").await;
    b.node.publish("doc:small", "2", "test").await;
    subscribe(&mut c, "small", SUB, json!({"c":"doc:small","s":small - 1})).await;
    for seq in [small, small + 1] {
        let m = next_for(&mut c, "small").await;
        assert_eq!(m["payload"]["data"]["messages"]["seq"], seq, "{m}");
    }
}
