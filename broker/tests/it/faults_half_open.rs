//! Half-open TCP (issue 15): a peer gone without a FIN — it neither reads
//! nor answers pings, and its connection stays established. The heartbeat
//! reaps it and gives back everything it held: the node's socket count,
//! its IP's open-socket slot and its account's connection slot.
//!
//! A peer that stops reading with the kernel's buffers full does not keep
//! its connection either once its socket has ended: the bytes still to
//! write get the close timeout, whoever closed.

use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::common::{Broker, PATIENCE, masked, masked_text, small_window, upgrade_on};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_peer_is_reaped_and_its_counts_given_back() {
    // One socket per IP and per account, so a slot not given back shows as
    // a refusal below.
    let b = Broker::start(
        "[socket]\nheartbeat_interval_ms = 50\nclient_timeout_ms = 200\nclose_timeout_ms = 100\n\
         [handshake]\nip_max_open = 1\n[plans.free]\nmax_connections = 1\n",
    );
    // A small receive window that is never read: the server's pings and its
    // close frame stay unread; nothing comes back, not even a FIN.
    let gone = upgrade_on(small_window(b.addr).await, b.addr, &b.token("acme")).await;
    b.wait_sockets(1).await;
    // While it is held, the IP and the account are at their caps.
    let refused = b
        .try_connect(&b.token("acme"))
        .await
        .err()
        .expect("at the cap");
    assert_eq!(refused.0, 429, "{refused:?}");

    // The heartbeat reaps it, though the peer never closes its end.
    b.wait_sockets(0).await;
    assert_eq!(
        b.metric("tidegate_rejections_total{layer=\"connection\",reason=\"heartbeat_timeout\"}")
            .await,
        1.0
    );
    // Its slots are free again: the same IP and account connect.
    let mut back = b.client("acme").await;
    let ack = back
        .call(json!({"type":"subscribe","channel":"doc:1"}), 1)
        .await;
    assert_eq!(ack["type"], "ack", "{ack}");
    drop(gone);
}

/// Whether the broker listening on `broker` still holds its end of the
/// connection from `peer` (an open descriptor: an entry of
/// `/proc/net/tcp` with an inode; a closed one is gone or orphaned, inode
/// 0, while the kernel sends what it still can).
fn held_by_broker(broker: std::net::SocketAddr, peer: &TcpStream) -> bool {
    let ours = peer.local_addr().unwrap().port();
    let tcp = std::fs::read_to_string("/proc/net/tcp").unwrap();
    tcp.lines().skip(1).any(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let port = |addr: &str| u16::from_str_radix(addr.rsplit(':').next().unwrap(), 16).unwrap();
        port(f[1]) == broker.port() && port(f[2]) == ours && f[9] != "0"
    })
}

/// Waits, with a deadline, until the broker has let go of `peer`'s
/// connection although `peer` reads nothing.
async fn let_go(b: &Broker, peer: &TcpStream) {
    assert!(
        held_by_broker(b.addr, peer),
        "the connection was never seen"
    );
    b.wait_sockets(0).await;
    let deadline = Instant::now() + PATIENCE;
    while held_by_broker(b.addr, peer) {
        assert!(
            Instant::now() < deadline,
            "the broker still holds a connection whose socket ended"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A socket with a 16 KiB mark over a 4 KiB send buffer, subscribed to
/// `doc:1` from a never-read small window: returns the raw stream.
async fn never_reading_subscriber(b: &Broker) -> TcpStream {
    let mut s = upgrade_on(small_window(b.addr).await, b.addr, &b.token("acme")).await;
    s.write_all(&masked_text(
        br#"{"type":"subscribe","channel":"doc:1","id":1}"#,
    ))
    .await
    .unwrap();
    s
}

const UNREAD: &str = "[socket]\nsend_buffer_bytes = 4096\nclose_timeout_ms = 200\n\
    [plans.free]\noutbound_high_water_bytes = 16384\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_never_reads_its_close_frame_loses_the_connection_at_the_close_timeout() {
    let b = Broker::start(&format!("{UNREAD}outbound_grace_ms = 100\n"));
    let s = never_reading_subscriber(&b).await;
    // Published until the socket, over its mark for the grace, is closed
    // with 4008: its close frame waits behind bytes the kernel cannot take.
    let closed = "tidegate_rejections_total{layer=\"outbound\",reason=\"slow_consumer_closed\"}";
    let big = "x".repeat(8 << 10);
    let deadline = Instant::now() + PATIENCE;
    while b.metric(closed).await < 1.0 {
        assert!(Instant::now() < deadline, "the socket was never closed");
        b.node.publish("doc:1", &big, "test", None).await;
    }
    let_go(&b, &s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_closes_and_never_reads_loses_the_connection_after_the_close_timeout() {
    let b = Broker::start(&format!("{UNREAD}outbound_grace_ms = 60000\n"));
    let mut s = never_reading_subscriber(&b).await;
    // Published until the socket is over its mark: the kernel takes no more.
    let big = "x".repeat(8 << 10);
    let deadline = Instant::now() + PATIENCE;
    while b.node.sockets.iter().all(|s| s.gauge.pending() < 16 << 10) {
        assert!(Instant::now() < deadline, "the socket never filled");
        b.node.publish("doc:1", &big, "test", None).await;
    }
    // The peer closes, and reads neither the rest nor the answer.
    s.write_all(&masked(0x8, &1000u16.to_be_bytes()))
        .await
        .unwrap();
    let_go(&b, &s).await;
}
