//! Issue 26, the handshake's order and the client's identity: one address
//! cannot spend the node's shared accept budget, and the address the
//! per-IP limits and bans see is the client's own.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::net::{TcpSocket, TcpStream};
use tokio_tungstenite::MaybeTlsStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::common::{Broker, Client, refusal};

/// A TCP connection to `addr` from the loopback address `from`
/// (127.0.0.0/8 is all loopback on Linux: a second client address).
async fn connect_from(from: &str, addr: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    socket.connect(addr).await.unwrap()
}

/// A WebSocket handshake from `from`; the client or the refusal.
pub async fn connect_ws_from(
    b: &Broker,
    from: &str,
    token: &str,
) -> Result<Client, (u16, serde_json::Value, Option<u64>)> {
    let mut req = b.ws_url().into_client_request().unwrap();
    req.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        format!("tidegate.v1, bearer.{token}").parse().unwrap(),
    );
    let tcp = connect_from(from, b.addr).await;
    let result = tokio_tungstenite::client_async(req, MaybeTlsStream::Plain(tcp))
        .await
        .map(|(ws, _)| Client::new(ws, None));
    refusal(result)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_flooding_upgrades_cannot_spend_the_node_accept_budget() {
    // A node budget of 3 a second; an address may make 2 handshakes and
    // (practically) no more.
    let b = Arc::new(Broker::start(
        "[handshake]\nnode_accepts_per_sec = 3\nip_handshake_burst = 2\nip_handshakes_per_sec = 0.001\n",
    ));
    let stop = Arc::new(AtomicBool::new(false));
    // 127.0.0.1 floods upgrades until the other client is through.
    let flood = {
        let (b, stop) = (b.clone(), stop.clone());
        tokio::spawn(async move {
            let mut statuses = Vec::new();
            let mut kept = Vec::new();
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) || i < 50 {
                match b.try_connect(&b.token(&format!("flood{i}"))).await {
                    Ok(c) => kept.push(c),
                    Err((status, body, _)) => statuses.push((status, body["error"].clone())),
                }
                i += 1;
            }
            (kept.len(), statuses)
        })
    };
    // Let the flood run past the address's allowance first.
    while b
        .metric("tidegate_rejections_total{layer=\"handshake\",reason=\"ip_rate_limited\"}")
        .await
        < 10.0
    {
        tokio::task::yield_now().await;
    }
    let other = connect_ws_from(&b, "127.0.0.2", &b.token("other")).await;
    stop.store(true, Ordering::Relaxed);
    let (admitted, statuses) = flood.await.unwrap();
    let mut other = other
        .map_err(|(s, body, _)| (s, body))
        .expect("127.0.0.2 is admitted");
    assert_eq!(other.next_json().await["type"], "welcome");
    assert_eq!(admitted, 2, "the flooding address's burst");
    assert!(
        statuses
            .iter()
            .all(|(s, e)| *s == 429 && e == "ip_rate_limited"),
        "the flood is refused by its own limit only: {statuses:?}"
    );
    assert_eq!(
        b.metric("tidegate_rejections_total{layer=\"handshake\",reason=\"node_overloaded\"}")
            .await,
        0.0
    );
}

/// A WebSocket handshake through a proxy that appended its own
/// `X-Forwarded-For` line after the client's.
async fn via_proxy_lines(
    b: &Broker,
    token: &str,
    lines: &[&str],
) -> Result<Client, (u16, serde_json::Value, Option<u64>)> {
    let mut req = b.ws_url().into_client_request().unwrap();
    req.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        format!("tidegate.v1, bearer.{token}").parse().unwrap(),
    );
    for line in lines {
        req.headers_mut()
            .append("X-Forwarded-For", line.parse().unwrap());
    }
    refusal(
        tokio_tungstenite::connect_async(req)
            .await
            .map(|(ws, _)| Client::new(ws, None)),
    )
}

#[tokio::test]
async fn a_forged_first_forwarded_for_line_does_not_choose_the_address() {
    let b = Broker::start(
        "[node]\ntrusted_proxies = [\"127.0.0.1\"]\n\
         [handshake]\nip_handshake_burst = 2\nip_handshakes_per_sec = 0.001\n\
         [auth]\njwt_secret = \"a-secret-behind-the-proxy-0123\"\n\
         [[api_keys]]\nkey = \"a-key-behind-the-proxy-0123\"\naccount = \"acme\"\n",
    );
    let mut outcomes = Vec::new();
    for i in 0..4 {
        // The client forges a new first line each time; the proxy appends
        // the client's real address as the last line.
        let forged = format!("198.51.100.{i}");
        let r = via_proxy_lines(&b, &b.token(&format!("u{i}")), &[&forged, "203.0.113.9"]).await;
        outcomes.push(r.map(|_| 101).unwrap_or_else(|(s, body, _)| {
            assert_eq!(body["error"], "ip_rate_limited", "{body}");
            s
        }));
    }
    assert_eq!(outcomes, [101, 101, 429, 429], "one address, burst 2");
    // Another client behind the same proxy is its own address.
    let other = via_proxy_lines(&b, &b.token("v"), &["203.0.113.10"]).await;
    assert!(other.is_ok(), "{:?}", other.err());
}

#[tokio::test]
async fn a_ban_of_an_ipv4_address_refuses_it_on_a_dual_stack_listener() {
    let listener = std::net::TcpListener::bind("[::]:0").expect("a dual-stack listener");
    let port = listener.local_addr().unwrap().port();
    let mut b = Broker::on(listener, crate::common::config(""));
    // Clients reach it over IPv4: the broker sees ::ffff:127.0.0.1.
    b.addr = SocketAddr::from(([127, 0, 0, 1], port));
    let until = tidegate::clock::unix_ms() + 60_000;
    b.node.admin.bans.insert(
        &tidegate::bans::BanTarget::Ip("127.0.0.1".parse().unwrap()),
        until,
    );
    let (status, body, retry) = b
        .try_connect(&b.token("acme"))
        .await
        .map(|_| ())
        .expect_err("the banned address is refused");
    assert_eq!(
        (status, body["error"].as_str()),
        (403, Some("banned")),
        "{body}"
    );
    assert!(retry.is_some());
    let resp = b.publish_http("doc:1", serde_json::json!(1)).await;
    assert_eq!(resp.status(), 403, "HTTP publish from the banned address");
}
