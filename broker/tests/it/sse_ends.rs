//! How SSE streams end and what bounds them (§14): the caps they share
//! with sockets, operators' bans and disconnects (4003), the drain (1012),
//! the token's expiry (4001), and a reader that stops reading: bounded by
//! the socket's mark, caught up from history within the grace, ended with
//! 4008 past it.

use std::time::Instant;

use futures_util::SinkExt;
use serde_json::json;
use tidegate::auth::{Claims, unix_now};
use tokio_tungstenite::tungstenite::Message;

use crate::admin::{admin_config, ban, disconnect};
use crate::common::{Broker, Client, PATIENCE, read_until_eof, small_window};
use crate::sse_client::{open, open_on};
use crate::sse_stream::stream;

fn path(broker: &Broker, account: &str, channels: &str) -> String {
    format!("/v1/sse?token={}&{channels}", broker.token(account))
}

#[actix_rt::test]
async fn streams_count_toward_the_account_and_ip_caps_with_sockets() {
    let broker = Broker::start("[plans.free]\nmax_connections = 2\n");
    let _ws = broker.client("acme").await;
    let _s = stream(&broker, "acme", "channel=doc:1", &[]).await;
    let (status, body, _) = open(broker.addr, &path(&broker, "acme", "channel=doc:1"), &[])
        .await
        .err()
        .expect("the third connection is refused");
    assert_eq!(
        (status, body["error"].as_str()),
        (429, Some("too_many_connections")),
        "{body}"
    );
    let refused = broker
        .try_connect(&broker.token("acme"))
        .await
        .err()
        .unwrap();
    assert_eq!(refused.1["error"], "too_many_connections");

    let broker = Broker::start("[handshake]\nip_max_open = 2\n");
    let _ws = broker.client("a").await;
    let _s = stream(&broker, "b", "channel=doc:1", &[]).await;
    let (status, body, head) = open(broker.addr, &path(&broker, "c", "channel=doc:1"), &[])
        .await
        .err()
        .expect("the address's third connection is refused");
    assert_eq!(
        (status, body["error"].as_str()),
        (429, Some("ip_too_many_connections"))
    );
    assert!(head.to_ascii_lowercase().contains("retry-after"), "{head}");
}

#[actix_rt::test]
async fn operators_and_the_drain_end_streams_with_their_codes() {
    let mut broker = Broker::start(&admin_config());
    let mut s = stream(&broker, "acme", "channel=doc:1", &[]).await;
    disconnect(&broker, json!({"account":"acme"})).await;
    let close = s.close().await;
    assert_eq!(close["code"], 4003, "{close}");

    let mut s = stream(&broker, "acme", "channel=doc:1", &[]).await;
    ban(&broker, json!({"account":"acme","ttlMs":60_000})).await;
    let close = s.close().await;
    assert_eq!(
        (close["code"].as_u64(), close["reason"].as_str()),
        (Some(4003), Some("banned"))
    );
    let (status, body, _) = open(broker.addr, &path(&broker, "acme", "channel=doc:1"), &[])
        .await
        .err()
        .expect("banned at the start");
    assert_eq!((status, body["error"].as_str()), (403, Some("banned")));

    let mut s = stream(&broker, "other", "channel=doc:1", &[]).await;
    broker.begin_shutdown();
    let close = s.close().await;
    assert_eq!(close["code"], 1012, "{close}");
}

#[actix_rt::test]
async fn an_expired_token_ends_the_stream_with_4001() {
    let broker = Broker::start("");
    let token = broker.mint(Claims {
        sub: "acme".into(),
        exp: unix_now() + 1,
        plan: None,
        role: None,
        sub_channels: vec!["doc:*".into()],
        pub_channels: vec![],
        info: None,
    });
    let mut s = open(
        broker.addr,
        &format!("/v1/sse?token={token}&channel=doc:1"),
        &[],
    )
    .await
    .expect("opened");
    let welcome = s.event().await;
    assert!(welcome.json()["tokenExpiresAt"].as_u64().unwrap() > 0);
    let close = s.close().await;
    assert_eq!(close["code"], 4001, "{close}");
}

const FAST: &str = "[plans.free]\nmessages_per_sec = 100000\nburst = 100000\naccount_messages_per_sec = 100000\n\
    account_burst = 100000\noutbound_high_water_bytes = 65536\n[socket]\nsend_buffer_bytes = 4096\n\
    [history]\nsize = 5000\n";

fn with_grace(ms: u64) -> String {
    FAST.replace("[socket]", &format!("outbound_grace_ms = {ms}\n[socket]"))
}

/// Publishes `n` messages of `size` bytes on `doc:s` over a socket,
/// `per_tick` every 10 ms; returns their seqs.
async fn flood(publisher: &mut Client, n: u64, size: usize, per_tick: u64) -> Vec<u64> {
    let data = "x".repeat(size);
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(10));
    for i in 0..n {
        if i % per_tick == 0 {
            publisher.ws.flush().await.unwrap();
            tick.tick().await;
        }
        let frame = json!({"type":"publish","channel":"doc:s","data":data,"id":i});
        publisher
            .ws
            .feed(Message::text(frame.to_string()))
            .await
            .unwrap();
    }
    publisher.ws.flush().await.unwrap();
    let mut seqs = Vec::new();
    for _ in 0..n {
        let ack = publisher.next_json().await;
        seqs.push(ack["seq"].as_u64().expect("a publish ack"));
    }
    seqs
}

fn worst_pending(broker: &Broker) -> usize {
    broker
        .node
        .sockets
        .iter()
        .map(|s| s.gauge.pending())
        .max()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_pauses_catches_up_from_history_without_a_gap() {
    let broker = Broker::start(&with_grace(60_000));
    let tcp = small_window(broker.addr).await;
    let mut slow = open_on(
        tcp,
        broker.addr,
        &path(&broker, "acme", "channel=doc:s"),
        &[],
    )
    .await
    .expect("opened");
    assert!(slow.event().await.is("welcome"));
    broker.wait_sockets(1).await;
    let mut publisher = broker.client("acme").await;
    // 1 MiB while the reader reads nothing: 16 times its mark.
    let seqs = flood(&mut publisher, 1000, 1024, 50).await;
    assert!(
        worst_pending(&broker) <= 65_536 + 1100,
        "{}",
        worst_pending(&broker)
    );
    assert!(
        broker
            .metric("tidegate_rejections_total{layer=\"outbound\",reason=\"slow_consumer\"}")
            .await
            > 0.0,
        "the hub dropped at the mark"
    );
    // Reading again: every message, in order, once.
    let mut got = Vec::new();
    while got.len() < seqs.len() {
        let e = slow.event().await;
        if e.is("message") {
            got.push(e.json()["seq"].as_u64().unwrap());
        } else {
            assert!(e.is("recovered"), "{e:?}");
            assert_eq!(e.json()["recovered"], true, "{e:?}");
        }
    }
    assert_eq!(got, seqs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_reads_nothing_is_bounded_then_ended_with_4008() {
    let broker = Broker::start(&with_grace(300));
    let tcp = small_window(broker.addr).await;
    let mut stalled = open_on(
        tcp,
        broker.addr,
        &path(&broker, "acme", "channel=doc:s"),
        &[],
    )
    .await
    .expect("opened");
    assert!(stalled.event().await.is("welcome"));
    broker.wait_sockets(1).await;
    let mut publisher = broker.client("acme").await;
    flood(&mut publisher, 1000, 1024, 50).await;
    assert!(
        worst_pending(&broker) <= 65_536 + 1100,
        "{}",
        worst_pending(&broker)
    );
    let deadline = Instant::now() + PATIENCE;
    let closed = "tidegate_rejections_total{layer=\"outbound\",reason=\"slow_consumer_closed\"}";
    while broker.metric(closed).await < 1.0 {
        assert!(Instant::now() < deadline, "never closed for 4008");
        tokio::task::yield_now().await;
    }
    // The reader took nothing, so the close event cannot reach it: past
    // the close timeout the connection is ended, and its places go back.
    broker.wait_sockets(1).await; // the publisher
    let read = read_until_eof(&mut stalled.s).await;
    assert!(
        read < 1 << 20,
        "read {read} bytes: far less than was published"
    );
}
