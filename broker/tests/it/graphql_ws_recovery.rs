//! Issue 26 on `graphql-transport-ws`: a `messages` subscription's
//! recovered history (`since`) is delivered like a `/v1/ws` socket's, in
//! slices under the outbound mark, paid for per KiB recovered; a client
//! that does not read holds the broker to its mark and is closed with 4008
//! once the grace passes, and one that reads gets everything, in order,
//! then live messages, with no gap and no duplicate.

use serde_json::{Value, json};

use crate::bounds_memory::{
    RECOVERY, held_to_the_mark_then_4008, history, live_rounds, never_reads,
};
use crate::common::{API_KEY, Broker};
use crate::graphql_ws::{SUB, connected, init, never_reading, next_for, subscribe};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graphql_subscription_recovering_history_it_never_reads_holds_only_the_mark_then_4008() {
    let b = Broker::start(&never_reads());
    // 4 channels × 100 messages × 32 KiB: 12.8 MiB of history, 200 times
    // the socket's mark.
    let since = history(&b, 4, 100, 32 << 10).await;
    let mut frames = vec![init(&b.token("acme"))];
    for (c, since) in since.iter().enumerate() {
        frames.push(json!({"type":"subscribe","id":format!("s{c}"),
            "payload":{"query": SUB, "variables":{"c":format!("doc:h{c}"),"s":since}}}));
    }
    let s = never_reading(&b, &frames).await;
    // While the grace runs out, what the broker holds for the socket stays
    // near its mark whenever it is looked at.
    held_to_the_mark_then_4008(&b, s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reading_graphql_client_recovers_every_subscription_in_order_then_live() {
    let b = Broker::start(&RECOVERY.replace("65536", "131072"));
    // 3 channels × 100 × 8 KiB: 2.4 MiB, many times the 128 KiB mark.
    let since = history(&b, 3, 100, 8 << 10).await;
    let mut c = connected(&b, &b.token("acme")).await;
    for (i, s) in since.iter().enumerate() {
        subscribe(
            &mut c,
            &format!("s{i}"),
            SUB,
            json!({"c":format!("doc:h{i}"),"s":s}),
        )
        .await;
    }
    // Live messages published while the backlogs are being delivered.
    let live = live_rounds(&b, 3, 20);
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

/// Recovery's one meaning (issue 42, `charge::recovery`): the history is
/// paid for before any of it is sent, owed by the caller's payer even
/// below zero and never refused (it was refused with `RATE_LIMITED`, so a
/// history larger than the bucket could never be recovered here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graphql_recovery_is_owed_before_any_of_it_is_sent() {
    let b = Broker::start("[history]\nsize = 100\n");
    // 50 messages of 8 KiB: about 400 units at one per started KiB, twice
    // the API key's bucket.
    let since = history(&b, 1, 50, 8 << 10).await;
    let mut c = connected(&b, API_KEY).await;
    subscribe(&mut c, "big", SUB, json!({"c":"doc:h0","s":since[0]})).await;
    let first = next_for(&mut c, "big").await;
    assert_eq!(first["type"], "next", "{first}");
    // Paid before the first message: the key is in debt already, and its
    // next operation waits for the refill.
    assert_eq!(b.publish_http("doc:other", json!(1)).await.status(), 429);
    let mut last = first["payload"]["data"]["messages"]["seq"]
        .as_u64()
        .unwrap();
    assert_eq!(last, since[0] + 1);
    while last < since[0] + 50 {
        let m = next_for(&mut c, "big").await;
        let seq = m["payload"]["data"]["messages"]["seq"].as_u64().unwrap();
        assert_eq!(seq, last + 1, "a gap or a duplicate: {m}");
        last = seq;
    }
}
