//! §1 handshake defences, cheapest first: node accept budget, per-IP rate
//! and cap (X-Forwarded-For from trusted proxies), per-identity bucket,
//! node socket cap after the upgrade.

use std::collections::HashMap;
use std::time::Duration;

use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::common::{Broker, Client, refusal};

/// Connects with `X-Forwarded-For`; the refusal's status, if any.
async fn via_proxy(broker: &Broker, token: &str, xff: &str) -> Result<Client, u16> {
    let mut req = broker.ws_url().into_client_request().unwrap();
    req.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        format!("tidegate.v1, bearer.{token}").parse().unwrap(),
    );
    req.headers_mut()
        .insert("X-Forwarded-For", xff.parse().unwrap());
    let result = tokio_tungstenite::connect_async(req)
        .await
        .map(|(ws, _)| Client::new(ws, None));
    refusal(result).map_err(|(s, _, _)| s)
}

#[tokio::test]
async fn a_handshake_flood_from_one_ip_is_mostly_refused_after_the_burst() {
    // 200 attempts in 2 s from one address (seed 002's curl loop), each
    // with its own account so only the per-IP limit is in play.
    let broker = Broker::start("");
    let mut by_status: HashMap<u16, u32> = HashMap::new();
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    let start = std::time::Instant::now();
    for i in 0..200 {
        tick.tick().await;
        let status = match broker.try_connect(&broker.token(&format!("user{i}"))).await {
            Ok(_) => 101,
            Err((status, body, retry)) => {
                assert_eq!(body["error"], "ip_rate_limited");
                assert!(retry.is_some());
                status
            }
        };
        *by_status.entry(status).or_default() += 1;
    }
    let admitted = by_status.get(&101).copied().unwrap_or(0);
    let most = 20.0 + 5.0 * start.elapsed().as_secs_f64() + 1.0;
    assert!(
        admitted >= 20 && f64::from(admitted) <= most,
        "burst 20 + 5/s: {by_status:?}"
    );
    assert_eq!(by_status.get(&429).copied().unwrap_or(0), 200 - admitted);
}

#[tokio::test]
async fn open_sockets_per_ip_are_capped_and_forwarded_for_is_trusted_only_from_proxies() {
    let broker = Broker::start("[handshake]\nip_max_open = 2\n");
    let t = |n: u32| broker.token(&format!("u{n}"));
    let _a = broker.try_connect(&t(1)).await.unwrap();
    let _b = broker.try_connect(&t(2)).await.unwrap();
    let (status, body, _) = broker.try_connect(&t(3)).await.err().unwrap();
    assert_eq!(
        (status, body["error"].as_str()),
        (429, Some("ip_too_many_connections"))
    );
    // Not a trusted proxy: the header changes nothing.
    assert_eq!(
        via_proxy(&broker, &t(4), "203.0.113.9").await.err(),
        Some(429)
    );

    // A single address and a CIDR range (load balancers come from a subnet).
    for proxies in ["\"127.0.0.1\"", "\"127.0.0.0/8\", \"10.0.0.0/8\""] {
        // Behind a proxy the public sample secret and key are refused.
        let broker = Broker::start(&format!(
            "[node]\ntrusted_proxies = [{proxies}]\n[handshake]\nip_max_open = 1\n\
             [auth]\njwt_secret = \"a-secret-behind-the-proxy-0123\"\n\
             [[api_keys]]\nkey = \"a-key-behind-the-proxy-0123\"\naccount = \"acme\"\n"
        ));
        let t = |n: u32| broker.token(&format!("u{n}"));
        let _c = via_proxy(&broker, &t(1), "203.0.113.1").await.unwrap();
        let _d = via_proxy(&broker, &t(2), "203.0.113.2, 127.0.0.1")
            .await
            .unwrap();
        assert_eq!(
            via_proxy(&broker, &t(3), "203.0.113.1").await.err(),
            Some(429),
            "trusted_proxies = [{proxies}]"
        );
    }
}

#[tokio::test]
async fn a_looping_identity_gets_its_burst_then_about_one_per_refill_interval() {
    let broker = Broker::start(
        "[handshake]\nip_handshakes_per_sec = 1000000\nip_handshake_burst = 1000000\nnode_accepts_per_sec = 1000000\n\
         [plans.free]\nhandshake_burst = 10\nhandshake_refill_per_sec = 5\nmax_connections = 100\n",
    );
    let token = broker.token("looper");
    let mut admitted = 0;
    let mut refused = 0;
    let start = std::time::Instant::now();
    // A reconnect loop with no backoff for one second.
    while start.elapsed() < Duration::from_secs(1) {
        match broker.try_connect(&token).await {
            Ok(c) => {
                admitted += 1;
                drop(c);
            }
            Err((status, body, retry)) => {
                assert_eq!(
                    (status, body["error"].as_str()),
                    (429, Some("handshake_rate_limited"))
                );
                assert_eq!(retry, Some(1));
                refused += 1;
            }
        }
    }
    let most = 10.0 + 5.0 * start.elapsed().as_secs_f64() + 1.0;
    assert!(
        admitted >= 10 && f64::from(admitted) <= most,
        "burst 10 + 5/s, got {admitted}"
    );
    assert!(
        refused > admitted,
        "the loop is mostly refused ({refused} vs {admitted})"
    );
}

#[tokio::test]
async fn the_node_accept_budget_answers_503() {
    let broker = Broker::start("[handshake]\nnode_accepts_per_sec = 3\n");
    let mut overloaded = 0;
    for i in 0..10 {
        if let Err((status, body, retry)) =
            broker.try_connect(&broker.token(&format!("u{i}"))).await
        {
            assert_eq!(
                (status, body["error"].as_str()),
                (503, Some("node_overloaded"))
            );
            assert!(retry.is_some());
            overloaded += 1;
        }
    }
    assert!(overloaded >= 6, "3 per second: {overloaded} of 10 refused");
}

#[tokio::test]
async fn past_the_node_socket_cap_a_socket_is_shed_with_1013_after_the_upgrade() {
    let broker = Broker::start("[handshake]\nnode_max_sockets = 1\n");
    let _first = broker.client("a").await;
    let mut second = Client::connect(&broker.ws_url(), &broker.token("b"))
        .await
        .unwrap();
    assert_eq!(second.closed().await, Some(1013));
}
