//! Issue 38, slow request bodies: every request body has a deadline
//! (`http.body_timeout_ms`) and counts toward `handshake.ip_max_unfinished`
//! until it is whole, on every route; a credential the head carries is
//! checked before the body is read, and the admin routes do not exist
//! without `[admin]`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::admin::{ADMIN_KEY, admin_config};
use crate::common::{API_KEY, Broker, PATIENCE};

const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// What a slow client declares and never sends in full.
const DECLARED: usize = 262_000;

/// Waits (polling, with a deadline) until the broker counts `n`
/// unfinished connections from `ip`.
pub async fn unfinished(b: &Broker, ip: IpAddr, n: u32) {
    let deadline = Instant::now() + PATIENCE;
    while b.node.gate.unfinished(ip) != n {
        assert!(
            Instant::now() < deadline,
            "{} unfinished from {ip}, expected {n}",
            b.node.gate.unfinished(ip)
        );
        tokio::task::yield_now().await;
    }
}

/// A TCP connection from the loopback address `from`.
async fn connect_from(from: &str, addr: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    socket.connect(addr).await.unwrap()
}

/// A request head declaring a body of `length` bytes, with `headers`.
fn head(method: &str, path: &str, headers: &str, length: usize) -> String {
    format!(
        "{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n\
         {headers}Content-Length: {length}\r\n\r\n"
    )
}

/// Sends a head declaring [`DECLARED`] bytes and the first bytes of the
/// body, and no more.
async fn part_body(s: &mut TcpStream, method: &str, path: &str, headers: &str) {
    let start = format!("{}{{\"channel\":", head(method, path, headers, DECLARED));
    s.write_all(start.as_bytes()).await.unwrap();
}

/// Reads until the server ends the connection (panics past PATIENCE);
/// what it answered.
async fn until_closed(s: &mut TcpStream) -> String {
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(PATIENCE, s.read(&mut buf))
            .await
            .expect("the server still holds the connection")
        {
            Ok(0) | Err(_) => return String::from_utf8_lossy(&answer).into_owned(),
            Ok(n) => answer.extend_from_slice(&buf[..n]),
        }
    }
}

/// Reads a response head (the connection stays as it is): its status
/// line, or panics when none comes within PATIENCE. Its body, of the
/// length the head gives, is read too.
async fn status_line(s: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(PATIENCE, s.read(&mut byte))
            .await
            .expect("no answer while the body is unsent")
            .unwrap();
        assert!(n > 0, "closed without an answer");
        got.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&got).to_lowercase();
    let length: usize = text
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map_or(0, |v| v.trim().parse().unwrap());
    let mut body = vec![0u8; length];
    tokio::time::timeout(PATIENCE, s.read_exact(&mut body))
        .await
        .expect("the answer's body")
        .unwrap();
    text.lines().next().unwrap_or_default().to_uppercase()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_body_is_cut_at_its_deadline_on_every_route_and_its_connection_freed() {
    let b = Broker::start(&format!(
        "[http]\nbody_timeout_ms = 1000\n[handshake]\nrequest_timeout_ms = 20000\n{}",
        admin_config()
    ));
    let jwt = b.token("acme");
    let api = format!("Authorization: Bearer {API_KEY}\r\n");
    let bearer = format!("Authorization: Bearer {jwt}\r\n");
    let admin = format!("Authorization: Bearer {ADMIN_KEY}\r\n");
    // Each with its credential, which lets it read the body.
    let routes = [
        ("POST", "/v1/publish", api.clone()),
        ("POST", "/v1/publish/batch", api.clone()),
        ("POST", "/v1/client/publish", bearer),
        ("POST", "/v1/graphql", api),
        ("POST", "/v1/admin/ban", admin),
        // A route that never reads a body.
        ("GET", "/healthz", String::new()),
    ];
    let started = Instant::now();
    let mut slow = Vec::new();
    for (method, path, headers) in &routes {
        let mut s = TcpStream::connect(b.addr).await.unwrap();
        part_body(&mut s, method, path, headers).await;
        slow.push((path, s));
    }
    // Every one is ended by the broker, answered or not; none is a
    // publish.
    for (path, s) in &mut slow {
        let answer = until_closed(s).await;
        assert!(
            !answer.starts_with("HTTP/1.1 200") || *path == &"/healthz",
            "{path}: {answer}"
        );
    }
    assert!(
        started.elapsed() < PATIENCE,
        "the deadline, not the test's patience, ended them"
    );
    // Their places come back, and the cut-offs are counted (the route
    // that answered without reading may have closed at its response).
    unfinished(&b, LOOPBACK, 0).await;
    let cut = b
        .metric("tidegate_rejections_total{layer=\"http\",reason=\"body_timeout\"}")
        .await;
    assert!(
        cut >= (routes.len() - 1) as f64,
        "{cut} bodies cut at their deadline"
    );
    let metrics = b.metrics().await;
    let published = metrics
        .lines()
        .filter(|l| l.starts_with("tidegate_publishes_total{"))
        .map(|l| crate::common::metric_value(l, l.rsplit_once(' ').unwrap().0))
        .sum::<f64>();
    assert_eq!(published, 0.0, "nothing was published");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn part_bodies_count_toward_the_addresss_unfinished_cap_until_whole() {
    let b = Broker::start("[handshake]\nip_max_unfinished = 3\n[http]\nbody_timeout_ms = 20000\n");
    let api = format!("Authorization: Bearer {API_KEY}\r\n");
    let body = br#"{"channel":"doc:1","data":{"n":1}}"#;
    // Three publishes from one address, each head whole and its body
    // not: they hold the address's allowance...
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut s = TcpStream::connect(b.addr).await.unwrap();
        let h = head("POST", "/v1/publish", &api, body.len());
        s.write_all(h.as_bytes()).await.unwrap();
        s.write_all(&body[..5]).await.unwrap();
        held.push(s);
    }
    unfinished(&b, LOOPBACK, 3).await;
    // ...so a fourth connection from the address is shut before it sends
    // anything,
    let mut fourth = TcpStream::connect(b.addr).await.unwrap();
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(PATIENCE, fourth.read(&mut buf))
        .await
        .expect("the fourth connection is shut");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    // (Read in the process: the address cannot ask /metrics now.)
    assert_eq!(
        crate::common::metric_value(
            &b.node.metrics.encode(),
            "tidegate_rejections_total{layer=\"handshake\",reason=\"ip_too_many_unfinished\"}"
        ),
        1.0
    );
    // while another address publishes as usual.
    let mut other = connect_from("127.0.0.2", b.addr).await;
    let h = head("POST", "/v1/publish", &api, body.len());
    other.write_all(h.as_bytes()).await.unwrap();
    other.write_all(body).await.unwrap();
    assert!(
        status_line(&mut other).await.starts_with("HTTP/1.1 200"),
        "the other address"
    );
    // A body sent whole is published, and its place given back.
    held[0].write_all(&body[5..]).await.unwrap();
    assert!(status_line(&mut held[0]).await.starts_with("HTTP/1.1 200"));
    unfinished(&b, LOOPBACK, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_admin_key_admin_routes_are_404_before_the_body() {
    let b = &Broker::start("[http]\nbody_timeout_ms = 20000\n");
    let cases = [
        ("POST", "/v1/admin/ban"),
        ("DELETE", "/v1/admin/ban"),
        ("POST", "/v1/admin/disconnect"),
    ];
    let asked = cases.map(|(method, path)| async move {
        let mut s = TcpStream::connect(b.addr).await.unwrap();
        let h = head(method, path, "Authorization: Bearer whatever\r\n", DECLARED);
        s.write_all(h.as_bytes()).await.unwrap();
        // The answer comes while the body is unsent...
        let status = status_line(&mut s).await;
        assert!(
            status.starts_with("HTTP/1.1 404"),
            "{method} {path}: {status}"
        );
        // ...and the connection, whose body will never be whole, ends
        // (well before the body's deadline).
        until_closed(&mut s).await;
    });
    futures_util::future::join_all(asked).await;
    unfinished(b, LOOPBACK, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_credential_is_refused_before_the_body_is_read() {
    let b = &Broker::start(&format!(
        "[http]\nbody_timeout_ms = 20000\n{}",
        admin_config()
    ));
    let wrong = "Authorization: Bearer not-a-credential-0123456789\r\n";
    let cases = [
        ("POST", "/v1/admin/ban", wrong),
        ("DELETE", "/v1/admin/ban", ""),
        ("POST", "/v1/admin/disconnect", wrong),
        ("POST", "/v1/publish", wrong),
        ("POST", "/v1/publish/batch", ""),
        ("POST", "/v1/client/publish", wrong),
        ("POST", "/v1/graphql", ""),
        ("POST", "/v1/graphql", wrong),
    ];
    let asked = cases.map(|(method, path, headers)| async move {
        let mut s = TcpStream::connect(b.addr).await.unwrap();
        part_body(&mut s, method, path, headers).await;
        let status = status_line(&mut s).await;
        assert!(
            status.starts_with("HTTP/1.1 401"),
            "{method} {path}: {status}"
        );
        // Its body will never be whole: the connection ends.
        until_closed(&mut s).await;
    });
    futures_util::future::join_all(asked).await;
    unfinished(b, LOOPBACK, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_body_a_route_ignores_gives_its_place_back_at_once() {
    // The body's deadline is far: what frees the place is the body
    // being whole, not the deadline.
    let b = Broker::start("[handshake]\nip_max_unfinished = 1\n[http]\nbody_timeout_ms = 60000\n");
    let mut s = TcpStream::connect(b.addr).await.unwrap();
    s.write_all(head("GET", "/healthz", "", 5).as_bytes())
        .await
        .unwrap();
    s.write_all(b"hello").await.unwrap();
    assert!(status_line(&mut s).await.starts_with("HTTP/1.1 200"));
    unfinished(&b, LOOPBACK, 0).await;
    // The address's one place is free: another connection is served.
    let mut other = TcpStream::connect(b.addr).await.unwrap();
    crate::bounds_keepalive::healthz(&mut other).await;
}

/// Reads from `s` onto `got` until `done(got)`; panics if the connection
/// ends or stays silent past PATIENCE.
async fn read_until(s: &mut TcpStream, got: &mut String, done: impl Fn(&str) -> bool) {
    let mut buf = [0u8; 4096];
    while !done(got) {
        let n = tokio::time::timeout(PATIENCE, s.read(&mut buf))
            .await
            .expect("the stream goes on")
            .unwrap();
        assert!(n > 0, "the stream ended: {got}");
        got.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_whose_request_body_arrived_whole_outlives_the_body_deadline() {
    // Heartbeats every 200 ms: by the third, the deadline has passed.
    let b = Broker::start(
        "[http]\nbody_timeout_ms = 300\n[socket]\nheartbeat_interval_ms = 200\nclient_timeout_ms = 1000\n",
    );
    let mut s = TcpStream::connect(b.addr).await.unwrap();
    let auth = format!("Authorization: Bearer {}\r\n", b.token("acme"));
    // A body makes the listener hand the stream to the HTTP service.
    s.write_all(head("GET", "/v1/sse?channel=doc:1", &auth, 2).as_bytes())
        .await
        .unwrap();
    s.write_all(b"{}").await.unwrap();
    let mut got = String::new();
    read_until(&mut s, &mut got, |g| g.contains("event: welcome")).await;
    unfinished(&b, LOOPBACK, 0).await;
    read_until(&mut s, &mut got, |g| g.matches(": ping").count() >= 3).await;
    // Past the body's deadline, the stream still delivers.
    let published = b
        .publish_http("doc:1", serde_json::json!({"after": "deadline"}))
        .await;
    assert_eq!(published.status(), 200);
    read_until(&mut s, &mut got, |g| g.contains("\"after\":\"deadline\"")).await;
}
