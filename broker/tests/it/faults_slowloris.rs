//! Slowloris (issue 15): clients that open the TCP connection and send the
//! upgrade a byte at a time. The head must be whole within
//! `handshake.request_timeout_ms` of the accept, and one IP may hold only
//! `handshake.ip_max_unfinished` such connections at once.

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::{Broker, PATIENCE};

const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// Waits (polling, with a deadline) until the broker counts `n` unfinished
/// connections from loopback.
pub async fn unfinished(b: &Broker, n: u32) {
    let deadline = Instant::now() + PATIENCE;
    while b.node.gate.unfinished(LOOPBACK) != n {
        assert!(
            Instant::now() < deadline,
            "{} unfinished connections, expected {n}",
            b.node.gate.unfinished(LOOPBACK)
        );
        tokio::task::yield_now().await;
    }
}

/// Sends `head` one byte per `pace` until the server ends the connection;
/// returns what it answered (empty when it only closed) and how many bytes
/// went out.
pub async fn trickle(mut s: TcpStream, head: Vec<u8>, pace: Duration) -> (String, usize) {
    let mut sent = 0;
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    let mut tick = tokio::time::interval(pace);
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        tokio::select! {
            _ = tick.tick(), if sent < head.len() => {
                if s.write_all(&head[sent..=sent]).await.is_err() {
                    break;
                }
                sent += 1;
            }
            r = s.read(&mut buf) => match r {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            },
            () = tokio::time::sleep_until(deadline) => panic!("the slow upgrade was never cut off"),
        }
    }
    (String::from_utf8_lossy(&answer).into_owned(), sent)
}

fn upgrade_head(b: &Broker) -> Vec<u8> {
    format!(
        "GET /v1/ws HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
         Sec-WebSocket-Protocol: tidegate.v1, bearer.{}\r\n\r\n",
        b.addr,
        b.token("acme")
    )
    .into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_sent_a_byte_at_a_time_is_cut_off_and_counted_per_ip() {
    let b = Broker::start("[handshake]\nrequest_timeout_ms = 1000\nip_max_unfinished = 3\n");
    let head = upgrade_head(&b);

    // Three slow clients hold the IP's allowance...
    let mut slow = Vec::new();
    for _ in 0..3 {
        slow.push(TcpStream::connect(b.addr).await.unwrap());
    }
    unfinished(&b, 3).await;
    // ...so a fourth connection from the same IP is shut at once, before
    // it sends anything.
    let mut fourth = TcpStream::connect(b.addr).await.unwrap();
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(PATIENCE, fourth.read(&mut buf))
        .await
        .expect("the fourth connection is shut");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");

    // Each slow client, trickling its upgrade (the whole head would take
    // far longer than the deadline), is answered 408 or dropped, never
    // upgraded.
    let cut: Vec<_> = slow
        .into_iter()
        .map(|s| tokio::spawn(trickle(s, head.clone(), Duration::from_millis(50))))
        .collect();
    for t in cut {
        let (answer, sent) = t.await.unwrap();
        assert!(sent < head.len(), "the whole head went out ({sent} bytes)");
        assert!(
            answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
            "{answer}"
        );
    }

    // The allowance is given back, the cut-offs are counted, and a
    // well-behaved client from the same IP connects.
    unfinished(&b, 0).await;
    assert_eq!(
        b.metric("tidegate_rejections_total{layer=\"handshake\",reason=\"request_timeout\"}")
            .await,
        3.0
    );
    assert_eq!(
        b.metric(
            "tidegate_rejections_total{layer=\"handshake\",reason=\"ip_too_many_unfinished\"}"
        )
        .await,
        1.0
    );
    let mut c = b.client("acme").await;
    let ack = c
        .call(serde_json::json!({"type":"subscribe","channel":"doc:1"}), 1)
        .await;
    assert_eq!(ack["type"], "ack", "{ack}");
}
