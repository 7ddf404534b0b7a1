//! §10: the operators' routes: keys (404 without one, 401, 403 for the
//! viewer, rate-limited failures), disconnect, ban and unban with expiry,
//! the overview (on every node of a Redis cluster: admin_cluster.rs).

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::common::{Broker, Client, PATIENCE, refusal_json};

pub const ADMIN_KEY: &str = "admin-key-0123456789abcdef";
pub const VIEWER_KEY: &str = "viewer-key-0123456789abcdef";

pub fn admin_config() -> String {
    format!("[admin]\nkey = \"{ADMIN_KEY}\"\nviewer_key = \"{VIEWER_KEY}\"\n")
}

async fn call(
    broker: &Broker,
    method: reqwest::Method,
    path: &str,
    key: &str,
    body: Option<Value>,
) -> reqwest::Response {
    let mut req = reqwest::Client::new()
        .request(method, broker.url(path))
        .bearer_auth(key);
    if let Some(b) = body {
        req = req.json(&b);
    }
    req.send().await.unwrap()
}

async fn ok(resp: reqwest::Response) -> Value {
    assert_eq!(resp.status(), 200);
    resp.json().await.unwrap()
}

pub async fn overview(broker: &Broker) -> Value {
    ok(call(
        broker,
        reqwest::Method::GET,
        "/v1/admin/overview",
        ADMIN_KEY,
        None,
    )
    .await)
    .await
}

pub async fn unban(broker: &Broker, body: Value) -> Value {
    ok(call(
        broker,
        reqwest::Method::DELETE,
        "/v1/admin/ban",
        ADMIN_KEY,
        Some(body),
    )
    .await)
    .await
}

pub async fn disconnect(broker: &Broker, body: Value) -> Value {
    ok(call(
        broker,
        reqwest::Method::POST,
        "/v1/admin/disconnect",
        ADMIN_KEY,
        Some(body),
    )
    .await)
    .await
}

pub async fn ban(broker: &Broker, body: Value) -> Value {
    ok(call(
        broker,
        reqwest::Method::POST,
        "/v1/admin/ban",
        ADMIN_KEY,
        Some(body),
    )
    .await)
    .await
}

/// The close frame's code and reason, skipping other frames.
pub async fn close_frame(c: &mut Client) -> (u16, String) {
    loop {
        let msg = tokio::time::timeout(PATIENCE, c.ws.next())
            .await
            .expect("no close in time");
        match msg {
            Some(Ok(Message::Close(Some(f)))) => return (f.code.into(), f.reason.to_string()),
            Some(Ok(Message::Close(None))) | None | Some(Err(_)) => panic!("closed without a code"),
            Some(Ok(_)) => continue,
        }
    }
}

#[tokio::test]
async fn without_an_admin_key_every_admin_route_is_404() {
    let broker = Broker::start("");
    for (method, path) in [
        (reqwest::Method::GET, "/admin"),
        (reqwest::Method::GET, "/admin/admin.js"),
        (reqwest::Method::GET, "/v1/admin/overview"),
        (reqwest::Method::POST, "/v1/admin/disconnect"),
        (reqwest::Method::POST, "/v1/admin/ban"),
        (reqwest::Method::DELETE, "/v1/admin/ban"),
    ] {
        let resp = call(
            &broker,
            method,
            path,
            ADMIN_KEY,
            Some(json!({"account":"a"})),
        )
        .await;
        assert_eq!(resp.status(), 404, "{path}");
        assert_eq!(refusal_json(resp).await["error"], "not_found");
    }
}

#[tokio::test]
async fn wrong_keys_are_401_viewers_read_only_and_failures_are_rate_limited() {
    let broker = Broker::start(&admin_config());
    let page = reqwest::get(broker.url("/admin")).await.unwrap();
    assert_eq!(page.status(), 200, "the page itself asks for the key");
    assert!(page.text().await.unwrap().contains("/admin/admin.js"));

    let viewer = ok(call(
        &broker,
        reqwest::Method::GET,
        "/v1/admin/overview",
        VIEWER_KEY,
        None,
    )
    .await)
    .await;
    assert_eq!(viewer["role"], "viewer");
    let forbidden = call(
        &broker,
        reqwest::Method::POST,
        "/v1/admin/ban",
        VIEWER_KEY,
        Some(json!({"account":"acme","ttlMs":1000})),
    )
    .await;
    assert_eq!(forbidden.status(), 403);
    assert_eq!(refusal_json(forbidden).await["error"], "forbidden");
    assert!(broker.node.admin.bans.list().is_empty());

    let mut statuses = Vec::new();
    for _ in 0..12 {
        let resp = call(
            &broker,
            reqwest::Method::GET,
            "/v1/admin/overview",
            "not-the-key-at-all",
            None,
        )
        .await;
        statuses.push(resp.status().as_u16());
        let body = refusal_json(resp).await;
        assert!(
            body["error"] == "unauthorized" || body["error"] == "rate_limited",
            "{body}"
        );
    }
    assert_eq!(
        &statuses[..10],
        &[401; 10],
        "a burst of failures is answered 401"
    );
    assert_eq!(
        statuses[11], 429,
        "then the address is slowed down: {statuses:?}"
    );
    // The right key still works from that address (a shared NAT's wrong
    // guesses must not lock the operator out), while wrong keys stay
    // slowed down.
    for (key, status) in [(ADMIN_KEY, 200), ("not-the-key-at-all", 429)] {
        let resp = call(
            &broker,
            reqwest::Method::GET,
            "/v1/admin/overview",
            key,
            None,
        )
        .await;
        assert_eq!(resp.status(), status, "{key}");
    }
    let metrics = broker.metrics().await;
    assert!(
        metrics.contains(
            "tidegate_admin_actions_total{action=\"overview\",outcome=\"unauthorized\"} 10"
        ),
        "{metrics}"
    );
}

#[tokio::test]
async fn disconnect_closes_an_accounts_sockets_or_one_connection_with_4003() {
    let broker = Broker::start(&admin_config());
    let mut a1 = broker.client("acme").await;
    let mut a2 = broker.client("acme").await;
    let mut other = broker.client("other").await;
    let mut single = Client::connect(&broker.ws_url(), &broker.token("solo"))
        .await
        .unwrap();
    let welcome = single.next_json().await;
    let conn_id = welcome["connId"].as_str().unwrap().to_owned();

    let answer = disconnect(&broker, json!({"account":"acme"})).await;
    assert_eq!(answer, json!({"closed": 2}));
    for c in [&mut a1, &mut a2] {
        assert_eq!(close_frame(c).await, (4003, "disconnected".into()));
    }
    let answer = disconnect(&broker, json!({"connId": conn_id})).await;
    assert_eq!(answer, json!({"closed": 1}));
    assert_eq!(
        close_frame(&mut single).await,
        (4003, "disconnected".into())
    );
    // Others are untouched, and a disconnected account may come back.
    let ack = other
        .call(json!({"type":"subscribe","channel":"doc:1"}), 1)
        .await;
    assert_eq!(ack["type"], "ack");
    broker.client("acme").await;

    for bad in [
        json!({}),
        json!({"account":"a","connId":"b"}),
        json!({"account":"a","ttlMs":5}),
        json!({"nope":1}),
    ] {
        let resp = call(
            &broker,
            reqwest::Method::POST,
            "/v1/admin/disconnect",
            ADMIN_KEY,
            Some(bad.clone()),
        )
        .await;
        assert_eq!(resp.status(), 400, "{bad}");
        assert_eq!(refusal_json(resp).await["error"], "bad_request");
    }
    assert!(
        broker
            .metric("tidegate_admin_actions_total{action=\"disconnect\",outcome=\"ok\"}")
            .await
            >= 2.0
    );
}

#[tokio::test]
async fn a_ban_closes_refuses_handshakes_and_publishes_until_lifted() {
    let broker = Broker::start(&admin_config());
    let mut c = broker.client("acme").await;
    let answer = ban(&broker, json!({"account":"acme","ttlMs":600_000})).await;
    assert_eq!(
        (answer["account"].as_str(), answer["closed"].as_u64()),
        (Some("acme"), Some(1))
    );
    assert_eq!(close_frame(&mut c).await, (4003, "banned".into()));

    let Err((status, body, retry)) = broker.try_connect(&broker.token("acme")).await else {
        panic!("a banned account was admitted");
    };
    assert_eq!((status, body["error"].as_str()), (403, Some("banned")));
    let retry = retry.unwrap();
    assert!(
        (590..=600).contains(&retry),
        "Retry-After is the ban's remaining time: {retry}"
    );
    // The API key bound to the account is refused too.
    let resp = broker.publish_http("doc:1", json!(1)).await;
    assert_eq!(resp.status(), 403);
    assert_eq!(refusal_json(resp).await["error"], "banned");
    assert!(
        broker
            .metric("tidegate_rejections_total{layer=\"handshake\",reason=\"banned\"}")
            .await
            >= 1.0
    );

    let o = overview(&broker).await;
    assert_eq!(o["bans"][0]["account"], "acme");
    assert!(o["bans"][0]["remainingMs"].as_u64().unwrap() > 590_000);

    let lifted = unban(&broker, json!({"account":"acme"})).await;
    assert_eq!(lifted["lifted"], true);
    broker.client("acme").await;
    assert_eq!(broker.publish_http("doc:1", json!(1)).await.status(), 200);
    let again = unban(&broker, json!({"account":"acme"})).await;
    assert_eq!(again["lifted"], false);

    for bad in [
        json!({"account":"acme"}),
        json!({"account":"acme","ttlMs":0}),
        json!({"ip":"not-an-ip","ttlMs":1000}),
        json!({"connId":"n1-1","ttlMs":1000}),
        json!({"account":"a","ip":"127.0.0.1","ttlMs":1000}),
    ] {
        let resp = call(
            &broker,
            reqwest::Method::POST,
            "/v1/admin/ban",
            ADMIN_KEY,
            Some(bad.clone()),
        )
        .await;
        assert_eq!(resp.status(), 400, "{bad}");
        let body = refusal_json(resp).await;
        assert_eq!(body["error"], "bad_request", "{body}");
    }
}

#[tokio::test]
async fn bans_expire_by_themselves() {
    let broker = Broker::start(&admin_config());
    ban(&broker, json!({"account":"acme","ttlMs":400})).await;
    let Err((status, _, retry)) = broker.try_connect(&broker.token("acme")).await else {
        panic!("admitted during the ban");
    };
    assert_eq!((status, retry), (403, Some(1)));
    // The ban's own clock: nothing to wait on but its expiry.
    tokio::time::sleep(Duration::from_millis(450)).await;
    broker.client("acme").await;
    let o = overview(&broker).await;
    assert_eq!(o["bans"], json!([]));
}

#[tokio::test]
async fn an_ip_ban_closes_and_refuses_every_account_from_that_address() {
    let broker = Broker::start(&admin_config());
    let mut a = broker.client("acme").await;
    let mut b = broker.client("other").await;
    let answer = ban(&broker, json!({"ip":"127.0.0.1","ttlMs":60_000})).await;
    assert_eq!(answer["closed"], 2);
    assert_eq!(close_frame(&mut a).await, (4003, "banned".into()));
    assert_eq!(close_frame(&mut b).await, (4003, "banned".into()));
    let Err((status, body, _)) = broker.try_connect(&broker.token("third")).await else {
        panic!("admitted from a banned address");
    };
    assert_eq!((status, body["error"].as_str()), (403, Some("banned")));
    assert!(body["message"].as_str().unwrap().contains("127.0.0.1"));
}

#[tokio::test]
async fn the_overview_shows_nodes_accounts_rejections_and_an_empty_webhook_list() {
    let broker = Broker::start(&admin_config());
    let _c1 = broker.client("acme").await;
    let _c2 = broker.client("acme").await;
    let _c3 = broker.client("other").await;
    // One rejection to chart.
    let _ = broker.try_connect("not-a-token").await;
    let o = overview(&broker).await;
    assert_eq!(o["role"], "admin");
    assert_eq!(o["totals"]["connections"], 3);
    assert_eq!(o["nodes"][0]["id"], "n1");
    assert_eq!(o["nodes"][0]["connections"], 3);
    let acme = o["accounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["account"] == "acme")
        .unwrap();
    assert_eq!(
        (
            acme["connections"].as_u64(),
            acme["maxConnections"].as_u64()
        ),
        (Some(2), Some(8))
    );
    assert!(
        o["rejections"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["layer"] == "handshake" && r["reason"] == "unauthorized"),
        "{}",
        o["rejections"]
    );
    assert_eq!(o["webhooks"], json!([]));
    assert_eq!(o["clusterWide"], true);
}

#[tokio::test]
async fn the_overview_lists_webhook_endpoints_with_their_queues() {
    use crate::receiver::{Receiver, Reply};
    use crate::webhooks::hook;
    let mut hanging = Receiver::start(|_| Reply::Hang);
    let mut healthy = Receiver::accepting();
    let cfg = [
        admin_config(),
        hook(
            "stuck",
            &hanging.url,
            "timeout_ms = 60000\nmax_in_flight = 1",
        ),
        hook("fine", &healthy.url, ""),
    ]
    .concat();
    let broker = Broker::start(&cfg);
    for n in 0..3 {
        let r = broker.publish_http("doc:hooks", json!({ "n": n })).await;
        assert_eq!(r.status(), 200);
    }
    // The stuck endpoint holds one event in flight and queues the rest.
    hanging.next().await;
    for _ in 0..3 {
        healthy.next().await;
    }
    let deadline = std::time::Instant::now() + PATIENCE;
    let hooks = loop {
        let o = overview(&broker).await;
        let hooks = o["webhooks"].clone();
        if hooks[0]["queued"] == 2 && hooks[1]["queued"] == 0 {
            break hooks;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the overview never showed the queues: {hooks}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(hooks[0]["id"], "stuck");
    assert_eq!(hooks[1]["id"], "fine");
    assert_eq!(
        hooks[0]["healthy"], true,
        "failing for minutes, not seconds"
    );
    assert_eq!(hooks.as_array().unwrap().len(), 2);
}
