//! Delivery classes and position (§11): the subscribe ack's `seq`, and a
//! conflating namespace whose paused reader gets the latest value per key
//! instead of drops, beside a queueing channel that still reports its own.

use std::collections::HashMap;
use std::time::Instant;

use futures_util::SinkExt;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::common::{Broker, Client, PATIENCE, small_window};

const CONFLATE: &str = "[plans.free]\nmessages_per_sec = 100000\nburst = 100000\n\
    account_messages_per_sec = 100000\naccount_burst = 100000\n\
    outbound_high_water_bytes = 262144\noutbound_grace_ms = 60000\n\
    [socket]\nsend_buffer_bytes = 4096\n\
    [namespaces.cur]\ndelivery = \"conflate\"\nconflation_key = \"/k\"\n";

const KEYS: u64 = 5;

fn token(broker: &Broker) -> String {
    broker.token_with("acme", &["doc:*", "cur:*"], &["doc:*", "cur:*"], None)
}

/// A client whose TCP receive window is tiny, so that not reading pushes
/// back on the broker at once.
async fn slow_client(broker: &Broker) -> Client {
    let mut req = broker.ws_url().into_client_request().unwrap();
    req.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        format!("tidegate.v1, bearer.{}", token(broker))
            .parse()
            .unwrap(),
    );
    let stream = tokio_tungstenite::MaybeTlsStream::Plain(small_window(broker.addr).await);
    let (ws, _) = tokio_tungstenite::client_async(req, stream).await.unwrap();
    let mut c = Client::new(ws, None);
    assert_eq!(c.next_json().await["type"], "welcome");
    c
}

async fn publisher(broker: &Broker) -> Client {
    let mut c = Client::connect(&broker.ws_url(), &token(broker))
        .await
        .unwrap();
    assert_eq!(c.next_json().await["type"], "welcome");
    c
}

/// Publishes `n` messages made by `data(i)` on `channel`, pipelined, and
/// waits for every ack (so the hub has fanned every one out).
async fn publish_many(p: &mut Client, channel: &str, n: u64, data: impl Fn(u64) -> Value) {
    for i in 0..n {
        p.ws.feed(Message::text(
            json!({"type":"publish","channel":channel,"data":data(i),"id":i}).to_string(),
        ))
        .await
        .unwrap();
        if i % 500 == 499 {
            p.ws.flush().await.unwrap();
        }
    }
    p.ws.flush().await.unwrap();
    for _ in 0..n {
        let ack = p.next_json().await;
        assert_eq!(ack["type"], "ack", "{ack}");
    }
}

fn cursor(i: u64) -> Value {
    json!({"k": i % KEYS, "i": i})
}

/// Waits until every socket's unsent bytes are at most `bound`.
async fn pending_at_most(broker: &Broker, bound: usize) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let worst = broker.node.sockets.iter().map(|s| s.gauge.pending()).max();
        if worst.unwrap_or(0) <= bound {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "a socket still holds {worst:?} unsent bytes"
        );
        tokio::task::yield_now().await;
    }
}

/// What a reader saw of a conflating channel: the last value per key, and
/// whether any message said it replaced others.
#[derive(Default)]
struct Cursors {
    last: HashMap<u64, u64>,
    seqs: Vec<u64>,
    flagged: usize,
}

impl Cursors {
    fn take(&mut self, m: &Value) {
        let seq = m["seq"].as_u64().unwrap();
        if let Some(prev) = self.seqs.last() {
            assert!(seq > *prev, "seq order: {prev} then {seq}");
        }
        self.seqs.push(seq);
        self.last.insert(
            m["data"]["k"].as_u64().unwrap(),
            m["data"]["i"].as_u64().unwrap(),
        );
        if m["conflated"] == true {
            self.flagged += 1;
        }
    }

    fn complete(&self, n: u64) -> bool {
        (0..KEYS).all(|k| self.last.get(&k) == Some(&(n - KEYS + k)))
    }
}

#[tokio::test]
async fn the_subscribe_ack_tells_the_position_even_before_the_first_message() {
    let broker = Broker::start("");
    let mut c = broker.client("acme").await;
    let ack = c
        .call(json!({"type":"subscribe","channel":"doc:pos"}), 1)
        .await;
    let pos = ack["seq"].as_u64().expect("the ack carries seq");
    assert!(pos > 0 && pos < (1 << 53), "{ack}");
    let first: Value = broker
        .publish_http("doc:pos", json!(1))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(first["seq"].as_u64(), Some(pos + 1), "live starts above it");
    broker.publish_http("doc:pos", json!(2)).await;

    // Another socket: the position is the last seq; with `since` the ack's
    // seq is the last message the recovery covers, which follows it.
    let mut other = broker.client("acme").await;
    let ack = other
        .call(json!({"type":"subscribe","channel":"doc:pos"}), 1)
        .await;
    assert_eq!(ack["seq"].as_u64(), Some(pos + 2));
    let ack = other
        .call(
            json!({"type":"subscribe","channel":"doc:pos","since":pos}),
            2,
        )
        .await;
    assert_eq!(
        (ack["recovered"].clone(), ack["seq"].as_u64()),
        (json!(true), Some(pos + 2))
    );
    for want in [pos + 1, pos + 2] {
        let m = other.next_json().await;
        assert_eq!(
            (m["type"].as_str(), m["seq"].as_u64()),
            (Some("message"), Some(want))
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_reader_of_a_conflating_channel_gets_the_last_value_of_each_key() {
    let broker = Broker::start(CONFLATE);
    let mut reader = slow_client(&broker).await;
    reader
        .call(json!({"type":"subscribe","channel":"cur:1"}), 1)
        .await;

    // The reader reads nothing while 10,000 cursor moves are published.
    let n = 10_000;
    let mut p = publisher(&broker).await;
    publish_many(&mut p, "cur:1", n, cursor).await;

    // Memory: what the paused reader costs is one frame per key (plus
    // a ping or two), not 10,000 messages.
    pending_at_most(&broker, KEYS as usize * 128 + 256).await;
    assert!(broker.metric("tidegate_messages_superseded_total").await > 0.0);

    // Reading again: in seq order, ending with the last value of each key,
    // and nothing reported dropped (the budget answer comes after all of
    // it).
    let mut seen = Cursors::default();
    reader.send(json!({"type":"budget","id":"end"})).await;
    loop {
        let v = reader.next_json().await;
        match v["type"].as_str() {
            Some("message") => seen.take(&v),
            Some("budget") if v["id"] == "end" => break,
            _ => assert_ne!(v["code"], "slow_consumer", "{v}"),
        }
    }
    assert!(seen.complete(n), "last values: {:?}", seen.last);
    assert!(seen.flagged > 0, "superseding messages say so");
    assert!((seen.seqs.len() as u64) < n);
    assert_eq!(
        broker
            .metric("tidegate_rejections_total{layer=\"outbound\",reason=\"slow_consumer\"}")
            .await,
        0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_channel_beside_a_conflating_one_on_the_same_socket_still_reports_drops() {
    let broker = Broker::start(CONFLATE);
    let mut reader = slow_client(&broker).await;
    for (i, ch) in ["cur:1", "doc:q"].into_iter().enumerate() {
        reader
            .call(json!({"type":"subscribe","channel":ch}), i as u64)
            .await;
    }
    let mut p = publisher(&broker).await;
    // 1 MiB on the queueing channel: four times the mark.
    let big = "x".repeat(1024);
    publish_many(&mut p, "doc:q", 1000, |_| json!(big)).await;
    let n = 2000;
    publish_many(&mut p, "cur:1", n, cursor).await;

    let mut seen = Cursors::default();
    let mut doc_last = 0;
    let mut dropped = None;
    while dropped.is_none() || !seen.complete(n) {
        let v = reader.next_json().await;
        match (v["type"].as_str(), v["channel"].as_str()) {
            (Some("message"), Some("cur:1")) => seen.take(&v),
            (Some("message"), Some("doc:q")) => {
                let seq = v["seq"].as_u64().unwrap();
                assert!(seq > doc_last);
                doc_last = seq;
            }
            (Some("error"), _) => {
                assert_eq!(v["code"], "slow_consumer", "{v}");
                dropped = v["dropped"].as_u64();
            }
            _ => {}
        }
    }
    let dropped = dropped.unwrap();
    assert!(
        dropped > 0 && dropped < 1000,
        "{dropped} of the queue's messages"
    );
    assert!(broker.metric("tidegate_messages_superseded_total").await > 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_without_bound_cost_at_most_the_mark_and_their_drops_are_reported() {
    let broker = Broker::start(&CONFLATE.replace("262144", "8192"));
    let mut reader = slow_client(&broker).await;
    reader
        .call(json!({"type":"subscribe","channel":"cur:1"}), 1)
        .await;
    // Every message its own key: nothing to replace.
    let mut p = publisher(&broker).await;
    publish_many(&mut p, "cur:1", 2000, |i| json!({"k": i, "i": i})).await;
    pending_at_most(&broker, 8192 + 256).await;

    let notice = reader
        .until(|v| v["type"] == "error" || v["type"] == "close")
        .await;
    assert_eq!(notice["code"], "slow_consumer", "{notice}");
    assert!(notice["dropped"].as_u64().unwrap() > 0);
}
