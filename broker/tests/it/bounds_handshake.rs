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
