//! Issue 38, the TLS handshake phase: a connection counts against its
//! address from the TCP accept (`handshake.ip_max_unfinished`), before its
//! handshake, and the handshake and first head share the head's deadline
//! from the accept. Silent connections from one address cannot hold the
//! handshakes in progress (actix-tls stopped a worker's accepts at 256).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::bounds_bodies::unfinished;
use crate::certs::{TempDir, TestCa};
use crate::common::{Broker, PATIENCE};

const SILENT_FROM: &str = "127.0.0.2";

async fn connect_from(from: &str, addr: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    socket.connect(addr).await.unwrap()
}

/// `GET /healthz` over TLS from 127.0.0.1: the status line.
async fn healthz_over_tls(addr: SocketAddr, ca: &TestCa) -> String {
    let (mut tls, _) = crate::tls::tls_to(addr, ca.client()).await;
    tls.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let _ = tls.read_to_end(&mut answer).await;
    let text = String::from_utf8_lossy(&answer);
    text.lines().next().unwrap_or_default().to_owned()
}

/// When (since `from`) the server ended `s`.
async fn ended(mut s: TcpStream, from: Instant) -> Duration {
    let mut buf = [0u8; 64];
    loop {
        match tokio::time::timeout(PATIENCE, s.read(&mut buf))
            .await
            .expect("a silent connection is still open")
        {
            Ok(0) | Err(_) => return from.elapsed(),
            Ok(_) => continue,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_from_one_address_do_not_starve_tls_clients() {
    let dir = TempDir::new("tls-silent");
    let ca = TestCa::new();
    let (cert, key) = ca.write_leaf(&dir.0, "node");
    let deadline = Duration::from_millis(4000);
    // One worker: under actix-tls it took at most 256 handshakes at once.
    let b = Broker::start(&format!(
        "[node]\nworkers = 1\ntls_cert_file = {cert:?}\ntls_key_file = {key:?}\n\
         [handshake]\nrequest_timeout_ms = {}\nip_max_unfinished = 50\n",
        deadline.as_millis()
    ));
    let opened = Instant::now();
    let mut silent = Vec::new();
    for _ in 0..300 {
        silent.push(connect_from(SILENT_FROM, b.addr).await);
    }
    // A real client from another address is answered before the silent
    // connections' deadline has freed anything.
    let status = tokio::time::timeout(deadline, healthz_over_tls(b.addr, &ca))
        .await
        .expect("the TLS client waited behind the silent connections");
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    assert!(opened.elapsed() < deadline);
    // The silent address holds its cap of connections, no more.
    let ip: IpAddr = SILENT_FROM.parse().unwrap();
    assert_eq!(b.node.gate.unfinished(ip), 50);
    // Every silent connection ends: those past the cap at the accept, the
    // others at the deadline.
    let ends: Vec<Duration> =
        futures_util::future::join_all(silent.into_iter().map(|s| ended(s, opened))).await;
    let at_once = ends.iter().filter(|t| **t < deadline / 2).count();
    let at_deadline = ends
        .iter()
        .filter(|t| **t + Duration::from_millis(600) >= deadline)
        .count();
    assert_eq!((at_once, at_deadline), (250, 50), "{ends:?}");
    // (The server closes a descriptor before it gives back its place.)
    unfinished(&b, ip, 0).await;
    unfinished(&b, IpAddr::V4(Ipv4Addr::LOCALHOST), 0).await;
    let text = b.node.metrics.encode();
    let metric = |series: &str| crate::common::metric_value(&text, series);
    assert!(
        metric("tidegate_rejections_total{layer=\"handshake\",reason=\"request_timeout\"}") >= 50.0
    );
    assert_eq!(
        metric("tidegate_rejections_total{layer=\"handshake\",reason=\"ip_too_many_unfinished\"}"),
        250.0
    );
}
