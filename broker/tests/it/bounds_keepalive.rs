//! Issue 26, keep-alive slowloris: every request head on a connection has
//! the head deadline and counts toward `handshake.ip_max_unfinished`, not
//! only the first (actix bounds only the first).

use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::{Broker, PATIENCE};

const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// Waits (polling, with a deadline) until the broker counts `n` unfinished
/// heads from loopback.
async fn unfinished(b: &Broker, n: u32) {
    let deadline = Instant::now() + PATIENCE;
    while b.node.gate.unfinished(LOOPBACK) != n {
        assert!(
            Instant::now() < deadline,
            "{} unfinished, expected {n}",
            b.node.gate.unfinished(LOOPBACK)
        );
        tokio::task::yield_now().await;
    }
}

/// `GET /healthz` on `s`, keep-alive; reads its whole answer.
pub async fn healthz(s: &mut TcpStream) {
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    // The answer is small: its head, and a body of the length it gives.
    loop {
        let n = tokio::time::timeout(PATIENCE, s.read(&mut buf))
            .await
            .expect("an answer")
            .unwrap();
        assert!(n > 0, "closed before answering");
        answer.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&answer).to_lowercase();
        if let Some(end) = text.find("\r\n\r\n") {
            let len: usize = text
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            if answer.len() >= end + 4 + len {
                assert!(text.starts_with("http/1.1 200"), "{text}");
                return;
            }
        }
    }
}

/// Sends `head` a byte at a time, a byte per `pace`, until the server ends
/// the connection; how many bytes went out and what came back.
async fn trickle(s: &mut TcpStream, head: &[u8]) -> (usize, String) {
    let mut sent = 0;
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(50));
    let give_up = tokio::time::Instant::now() + PATIENCE * 2;
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
            () = tokio::time::sleep_until(give_up) => panic!("the trickled head was never cut off"),
        }
    }
    (sent, String::from_utf8_lossy(&answer).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_request_head_trickled_on_a_keep_alive_connection_is_cut_off() {
    let b = Broker::start("[handshake]\nrequest_timeout_ms = 1000\nip_max_unfinished = 1\n");
    let mut s = TcpStream::connect(b.addr).await.unwrap();
    healthz(&mut s).await;
    unfinished(&b, 0).await;
    // The second head: 200 bytes at 50 ms each would take 10 s.
    let head = format!(
        "GET /healthz HTTP/1.1\r\nHost: t\r\nX-Pad: {}\r\n\r\n",
        "a".repeat(160)
    );
    let cut = {
        let head = head.clone();
        tokio::spawn(async move {
            let out = trickle(&mut s, head.as_bytes()).await;
            (out, s)
        })
    };
    // While it trickles, it is the address's one unfinished head: a new
    // connection from the address is shut before it sends anything.
    unfinished(&b, 1).await;
    let mut other = TcpStream::connect(b.addr).await.unwrap();
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(PATIENCE, other.read(&mut buf))
        .await
        .expect("the other connection is shut");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");

    let ((sent, answer), _s) = cut.await.unwrap();
    assert!(sent < head.len(), "the whole second head went out");
    assert!(answer.is_empty(), "no second answer: {answer}");
    unfinished(&b, 0).await;
    assert_eq!(
        b.metric("tidegate_rejections_total{layer=\"handshake\",reason=\"request_timeout\"}")
            .await,
        1.0
    );
    // A prompt client still gets its answers, on one connection.
    let mut ok = TcpStream::connect(b.addr).await.unwrap();
    healthz(&mut ok).await;
    healthz(&mut ok).await;
}
