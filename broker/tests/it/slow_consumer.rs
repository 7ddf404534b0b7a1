//! Outbound back-pressure: a subscriber that stops reading costs the
//! broker at most its high-water mark, does not slow the others, and is
//! told (or, past the grace period, closed with 4008).

use std::time::Instant;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::common::{
    Broker, Client, PATIENCE, masked_text, read_until_eof, small_window, upgrade_on,
};

const FAST: &str = "[plans.free]\nmessages_per_sec = 100000\nburst = 100000\naccount_messages_per_sec = 100000\n\
    account_burst = 100000\noutbound_high_water_bytes = 262144\n[socket]\nsend_buffer_bytes = 4096\n";

fn with_grace(ms: u64) -> String {
    FAST.replace("[socket]", &format!("outbound_grace_ms = {ms}\n[socket]"))
}

/// Publishes `n` messages of `size` bytes, `per_tick` every 10 ms.
async fn flood(publisher: &mut Client, n: u64, size: usize, per_tick: u64) {
    let data = "x".repeat(size);
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(10));
    for i in 0..n {
        if i % per_tick == 0 {
            publisher.ws.flush().await.unwrap();
            tick.tick().await;
        }
        publisher
            .ws
            .feed(Message::text(
                json!({"type":"publish","channel":"doc:s","data":data,"id":i}).to_string(),
            ))
            .await
            .unwrap();
    }
    publisher.ws.flush().await.unwrap();
    for _ in 0..n {
        let ack = publisher.next_json().await;
        assert_eq!(ack["type"], "ack", "{ack}");
    }
}

async fn wait_for_metric(broker: &Broker, series: &str) -> f64 {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let v = broker.metric(series).await;
        if v > 0.0 {
            return v;
        }
        assert!(Instant::now() < deadline, "{series} never rose");
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_subscriber_is_bounded_then_closed_while_others_get_everything() {
    let broker = Broker::start(&with_grace(300));

    let token = broker.token("acme");
    let mut stalled = upgrade_on(small_window(broker.addr).await, broker.addr, &token).await;
    stalled
        .write_all(&masked_text(
            br#"{"type":"subscribe","channel":"doc:s","id":1}"#,
        ))
        .await
        .unwrap();
    let mut reader = broker.client("acme").await;
    reader
        .call(json!({"type":"subscribe","channel":"doc:s"}), 1)
        .await;
    // Make sure the stalled socket's subscribe went through before the
    // flood (two subscribes admitted), waiting on the count, not on time.
    let deadline = Instant::now() + PATIENCE;
    while broker.metric("tidegate_messages_in_total").await < 2.0 {
        assert!(Instant::now() < deadline);
        tokio::task::yield_now().await;
    }
    // 1 MiB at 1,000 messages/s: four times the stalled socket's mark,
    // at a rate a reading client keeps up with.
    let n = 1000;
    let reading = tokio::spawn(async move {
        let mut last = 0;
        for _ in 0..n {
            let m = reader.until(|v| v["type"] == "message").await;
            let seq = m["seq"].as_u64().unwrap();
            assert!(seq > last, "the reader got every message in order");
            last = seq;
        }
    });
    let mut publisher = broker.client("acme").await;
    flood(&mut publisher, n, 1024, 10).await;
    reading.await.unwrap();

    // The stalled socket holds at most its mark plus one message.
    let worst = broker
        .node
        .sockets
        .iter()
        .map(|s| s.gauge.pending())
        .max()
        .unwrap();
    assert!(
        worst <= 262_144 + 1100,
        "a socket holds {worst} unsent bytes"
    );
    assert!(
        broker
            .metric("tidegate_rejections_total{layer=\"outbound\",reason=\"slow_consumer\"}")
            .await
            > 0.0
    );
    wait_for_metric(
        &broker,
        "tidegate_rejections_total{layer=\"outbound\",reason=\"slow_consumer_closed\"}",
    )
    .await;
    // The close frame cannot reach a client that does not read: after the
    // close timeout the broker drops the TCP connection.
    read_until_eof(&mut stalled).await;
}

/// A client of account `acme` over a connection with a small receive
/// window, past its welcome: the broker's writes back up as soon as it
/// stops reading.
async fn slow_reader(broker: &Broker) -> Client {
    let mut req = broker.ws_url().into_client_request().unwrap();
    req.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        format!("tidegate.v1, bearer.{}", broker.token("acme"))
            .parse()
            .unwrap(),
    );
    let stream = tokio_tungstenite::MaybeTlsStream::Plain(small_window(broker.addr).await);
    let (ws, _) = tokio_tungstenite::client_async(req, stream).await.unwrap();
    let mut slow = Client::new(ws, None);
    slow.next_json().await;
    slow
}

#[tokio::test]
async fn subscriber_that_catches_up_is_told_how_many_it_lost_and_kept() {
    let broker = Broker::start(&with_grace(60_000));
    let mut slow = slow_reader(&broker).await;
    slow.call(json!({"type":"subscribe","channel":"doc:s"}), 1)
        .await;

    let mut publisher = broker.client("acme").await;
    flood(&mut publisher, 1000, 1024, 1000).await;
    wait_for_metric(
        &broker,
        "tidegate_rejections_total{layer=\"outbound\",reason=\"slow_consumer\"}",
    )
    .await;

    // Now read: the queued messages, then the notice once drained.
    let notice: Value = slow.until(|v| v["type"] == "error").await;
    assert_eq!(notice["code"], "slow_consumer");
    assert!(notice["dropped"].as_u64().unwrap() > 0);
    let ack = slow
        .call(json!({"type":"publish","channel":"doc:s","data":"back"}), 2)
        .await;
    assert_eq!(ack["type"], "ack", "the socket survived");
    slow.ws.close(None).await.unwrap();
    let _ = slow.ws.next().await;
}

/// A client recovers on `slow_consumer` by subscribing again with `since`.
/// When that subscribe is read while the socket is still dropping, the
/// drops counted so far are reported ahead of its ack (the recovery the
/// ack starts covers every one of them), not after it: a notice after the
/// ack would make the client subscribe again for nothing and pay for the
/// same history twice (issue 42: a browser waited 15 s on that debt).
#[tokio::test]
async fn drops_before_a_recovering_subscribe_are_reported_ahead_of_its_ack() {
    let broker = Broker::start(&format!("{}[history]\nsize = 2000\n", with_grace(60_000)));
    let mut slow = slow_reader(&broker).await;
    let ack = slow
        .call(json!({"type":"subscribe","channel":"doc:s"}), 1)
        .await;
    let since = ack["seq"].as_u64().unwrap();

    // Over the mark, dropping; the socket has read no frame since, so it
    // still reads this one.
    let mut publisher = broker.client("acme").await;
    let n = 1000;
    flood(&mut publisher, n, 1024, n).await;
    wait_for_metric(
        &broker,
        "tidegate_rejections_total{layer=\"outbound\",reason=\"slow_consumer\"}",
    )
    .await;
    slow.send(json!({"type":"subscribe","channel":"doc:s","since":since,"id":2}))
        .await;

    // Everything queued, the notice, the ack, then the history from
    // `since`: every message is there after the ack.
    let mut reported_before = 0;
    loop {
        let v = slow.next_json().await;
        if v["type"] == "error" && v["code"] == "slow_consumer" {
            reported_before += v["dropped"].as_u64().unwrap();
        }
        if v["id"] == json!(2) {
            assert_eq!(v["type"], "ack", "{v}");
            assert_eq!(v["recovered"], true, "{v}");
            break;
        }
    }
    assert!(
        reported_before > 0,
        "the drops were reported ahead of the ack"
    );
    let mut next = since + 1;
    let mut reported_after = 0;
    while next <= since + n {
        let v = slow.next_json().await;
        if v["type"] == "error" {
            reported_after += v["dropped"].as_u64().unwrap_or(0);
        } else if v["type"] == "message" && v["seq"].as_u64() == Some(next) {
            next += 1;
        }
    }
    // A round trip: a notice at the episode's end (the socket drained
    // once it was all read) comes before this answer.
    slow.send(json!({"type":"publish","channel":"doc:other","data":1,"id":3}))
        .await;
    loop {
        let v = slow.next_json().await;
        if v["type"] == "error" {
            reported_after += v["dropped"].as_u64().unwrap_or(0);
        }
        if v["id"] == json!(3) {
            assert_eq!(v["type"], "ack", "{v}");
            break;
        }
    }
    assert_eq!(
        reported_after, 0,
        "no notice after the ack: nothing was dropped after it"
    );
}
