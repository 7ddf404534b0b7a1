//! Pusher's HTTP API (§16) against a real broker: events reach `/app/{key}`
//! sockets, `socket_id` leaves one out, `info` counts, signatures (bad,
//! stale, unknown app) are 401, a too large `data` is 413, an empty budget
//! is 429 with `Retry-After` and `X-RateLimit-*`, batches are capped, and
//! the channel reads.

use serde_json::{Value, json};
use tidegate::pusher::auth::signed_query;
use tidegate::pusher::sign::hmac_hex;

use crate::common::{Broker, Client};

pub(crate) const APP: &str = "1234";
pub(crate) const KEY: &str = "app-key";
pub(crate) const SECRET: &str = "tidegate-sample-pusher-secret";

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A signed request of the sample app.
pub(crate) async fn call(
    b: &Broker,
    method: &str,
    path: &str,
    params: &[(&str, &str)],
    body: Option<&Value>,
) -> reqwest::Response {
    call_at(b, method, path, params, body, SECRET, now()).await
}

async fn call_at(
    b: &Broker,
    method: &str,
    path: &str,
    params: &[(&str, &str)],
    body: Option<&Value>,
    secret: &str,
    ts: u64,
) -> reqwest::Response {
    let text = body.map(Value::to_string).unwrap_or_default();
    let q = signed_query(
        KEY,
        secret.as_bytes(),
        (method, path),
        params,
        text.as_bytes(),
        ts,
    );
    let url = b.url(&format!("{path}?{q}"));
    let client = reqwest::Client::new();
    let req = match method {
        "POST" => client
            .post(url)
            .header("content-type", "application/json")
            .body(text),
        _ => client.get(url),
    };
    req.send().await.unwrap()
}

pub(crate) async fn connected(b: &Broker) -> (Client, String) {
    let url = format!("ws://{}/app/{KEY}?protocol=7", b.addr);
    let (ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    let mut c = Client::new(ws, None);
    let hello = c.next_json().await;
    let data: Value = serde_json::from_str(hello["data"].as_str().unwrap()).unwrap();
    (c, data["socket_id"].as_str().unwrap().to_owned())
}

pub(crate) async fn subscribe(c: &mut Client, id: &str, channel: &str) {
    let mut data = json!({"channel": channel});
    if channel.starts_with("private-") {
        let sig = hmac_hex(SECRET.as_bytes(), format!("{id}:{channel}").as_bytes());
        data["auth"] = json!(format!("{KEY}:{sig}"));
    }
    c.send(json!({"event":"pusher:subscribe","data":data}))
        .await;
    let ok = c.next_json().await;
    assert_eq!(
        ok["event"], "pusher_internal:subscription_succeeded",
        "{ok}"
    );
}

pub(crate) async fn pong(c: &mut Client) -> Value {
    c.send(json!({"event":"pusher:ping","data":{}})).await;
    c.next_json().await
}

#[tokio::test]
async fn an_event_reaches_subscribers_except_the_socket_id_left_out() {
    let b = Broker::start("");
    let (mut a, ida) = connected(&b).await;
    let (mut o, ido) = connected(&b).await;
    for (c, id) in [(&mut a, &ida), (&mut o, &ido)] {
        subscribe(c, id, "lobby").await;
        subscribe(c, id, "private-room").await;
    }
    let path = format!("/apps/{APP}/events");
    let ev = json!({"name":"greet","channels":["lobby","private-room"],"data":"{\"hi\":1}","socket_id":ida,"info":"subscription_count"});
    let resp = call(&b, "POST", &path, &[], Some(&ev)).await;
    assert_eq!(resp.status(), 200);
    assert!(resp.headers().get("x-ratelimit-remaining").is_some());
    let body: Value = resp.json().await.unwrap();
    assert_eq!(
        body,
        json!({"channels":{"lobby":{"subscription_count":2},"private-room":{"subscription_count":2}}})
    );
    let got = o.next_json().await;
    assert_eq!(
        got,
        json!({"event":"greet","channel":"lobby","data":"{\"hi\":1}"})
    );
    assert_eq!(o.next_json().await["channel"], "private-room");
    // The excluded socket's next frame is its pong.
    assert_eq!(pong(&mut a).await["event"], "pusher:pong");
    // One channel, `channel`, data as a string or JSON.
    let ev = json!({"name":"n","channel":"lobby","data":{"x":1}});
    assert_eq!(call(&b, "POST", &path, &[], Some(&ev)).await.status(), 200);
    let got = a.next_json().await;
    assert_eq!(got["data"], "{\"x\":1}");
}

#[tokio::test]
async fn bad_stale_and_foreign_signatures_are_401() {
    let b = Broker::start("");
    let path = format!("/apps/{APP}/events");
    let ev = json!({"name":"n","channel":"lobby","data":"x"});
    let wrong = call_at(
        &b,
        "POST",
        &path,
        &[],
        Some(&ev),
        "not-the-apps-secret-at-all",
        now(),
    )
    .await;
    assert_eq!(wrong.status(), 401);
    let body: Value = wrong.json().await.unwrap();
    assert_eq!(body["error"], "unauthorized");
    let stale = call_at(&b, "POST", &path, &[], Some(&ev), SECRET, now() - 601).await;
    assert_eq!(stale.status(), 401);
    let unknown = call(&b, "POST", "/apps/999/events", &[], Some(&ev)).await;
    assert_eq!(unknown.status(), 401);
    let unsigned = reqwest::Client::new()
        .post(b.url(&path))
        .body(ev.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(unsigned.status(), 401);
    // The body is covered: another body under the same query is refused.
    let text = ev.to_string();
    let q = signed_query(
        KEY,
        SECRET.as_bytes(),
        ("POST", &path),
        &[],
        text.as_bytes(),
        now(),
    );
    let swapped = reqwest::Client::new()
        .post(b.url(&format!("{path}?{q}")))
        .body(json!({"name":"n","channel":"lobby","data":"y"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(swapped.status(), 401);
}

#[tokio::test]
async fn too_large_data_is_413_and_too_many_channels_or_events_400() {
    let b = Broker::start("[accounts.acme]\nmax_payload_bytes = 100\n");
    let path = format!("/apps/{APP}/events");
    let big = json!({"name":"n","channel":"lobby","data":"x".repeat(101)});
    assert_eq!(call(&b, "POST", &path, &[], Some(&big)).await.status(), 413);
    let chans: Vec<String> = (0..101).map(|i| format!("c{i}")).collect();
    let many = json!({"name":"n","channels":chans,"data":"x"});
    assert_eq!(
        call(&b, "POST", &path, &[], Some(&many)).await.status(),
        400
    );
    let batch: Vec<Value> = (0..11)
        .map(|_| json!({"name":"n","channel":"c","data":"x"}))
        .collect();
    let path = format!("/apps/{APP}/batch_events");
    assert_eq!(
        call(&b, "POST", &path, &[], Some(&json!({"batch": batch})))
            .await
            .status(),
        400
    );
    let ok: Vec<Value> = (0..10)
        .map(|_| json!({"name":"n","channel":"c","data":"x"}))
        .collect();
    assert_eq!(
        call(&b, "POST", &path, &[], Some(&json!({"batch": ok})))
            .await
            .status(),
        200
    );
}

#[tokio::test]
async fn an_empty_budget_is_429_with_retry_after_and_the_balance() {
    let b = Broker::start(
        "[accounts.acme]\naccount_burst = 3\naccount_messages_per_sec = 0.01\naccount_sample_every = 1\n",
    );
    let path = format!("/apps/{APP}/events");
    let ev = json!({"name":"n","channel":"lobby","data":"x"});
    let mut statuses = Vec::new();
    let mut last = None;
    for _ in 0..4 {
        let r = call(&b, "POST", &path, &[], Some(&ev)).await;
        statuses.push(r.status().as_u16());
        last = Some(r);
    }
    assert_eq!(statuses, [200, 200, 200, 429]);
    let r = last.unwrap();
    assert!(r.headers().get("retry-after").is_some());
    assert_eq!(r.headers()["x-ratelimit-remaining"], "0");
    assert!(r.headers().get("x-ratelimit-limit").is_some());
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"], "rate_limited");
}

#[tokio::test]
async fn channels_and_channel_info_read_the_apps_channels_only() {
    let b = Broker::start("");
    let (mut a, ida) = connected(&b).await;
    subscribe(&mut a, &ida, "lobby").await;
    subscribe(&mut a, &ida, "news-1").await;
    let list: Value = call(
        &b,
        "GET",
        &format!("/apps/{APP}/channels"),
        &[("filter_by_prefix", "news-")],
        None,
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(list, json!({"channels":{"news-1":{}}}));
    let one: Value = call(
        &b,
        "GET",
        &format!("/apps/{APP}/channels/lobby"),
        &[("info", "subscription_count")],
        None,
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(one, json!({"occupied":true,"subscription_count":1}));
    let empty: Value = call(
        &b,
        "GET",
        &format!("/apps/{APP}/channels/nobody"),
        &[],
        None,
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(empty, json!({"occupied":false}));
}

#[tokio::test]
async fn a_socket_on_node_a_gets_an_event_triggered_through_node_b() {
    let redis = crate::redis_server::RedisServer::start();
    let prefix = crate::cluster::prefix();
    let (a, b) = crate::cluster::two_nodes(&redis, &prefix, "").await;
    let (mut on_a, ida) = connected(&a).await;
    let (mut on_b, idb) = connected(&b).await;
    assert_ne!(
        ida.split('.').next(),
        idb.split('.').next(),
        "the node is in the socket_id"
    );
    subscribe(&mut on_a, &ida, "private-both").await;
    subscribe(&mut on_b, &idb, "private-both").await;
    let ev = json!({"name":"hello","channel":"private-both","data":"from b"});
    let resp = call(&b, "POST", &format!("/apps/{APP}/events"), &[], Some(&ev)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        on_a.next_json().await,
        json!({"event":"hello","channel":"private-both","data":"from b"})
    );
    assert_eq!(on_b.next_json().await["event"], "hello");
    // A client event crosses too, and is not echoed to its sender.
    on_b.send(json!({"event":"client-x","channel":"private-both","data":"hi"}))
        .await;
    assert_eq!(on_a.next_json().await["event"], "client-x");
    assert_eq!(pong(&mut on_b).await["event"], "pusher:pong");
}

#[tokio::test]
async fn a_banned_apps_triggers_are_403_banned_until_the_ban_is_lifted() {
    use crate::admin::{admin_config, ban, unban};
    let b = Broker::start(&admin_config());
    let ev = json!({"name":"n","channel":"lobby","data":"x"});
    let batch = json!({"batch":[{"name":"n","channel":"lobby","data":"x"}]});
    let events = format!("/apps/{APP}/events");
    let batch_events = format!("/apps/{APP}/batch_events");
    assert_eq!(
        call(&b, "POST", &events, &[], Some(&ev)).await.status(),
        200
    );
    // The sample app is the account `acme`.
    ban(&b, json!({"account":"acme","ttlMs":60000})).await;
    for (path, body) in [(&events, &ev), (&batch_events, &batch)] {
        let r = call(&b, "POST", path, &[], Some(body)).await;
        assert_eq!(r.status(), 403, "{path}");
        let wait: u64 = r.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=60).contains(&wait), "Retry-After {wait}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"], "banned", "{body}");
    }
    // Reads are not publishes: still answered.
    let r = call(&b, "GET", &format!("/apps/{APP}/channels"), &[], None).await;
    assert_eq!(r.status(), 200);
    unban(&b, json!({"account":"acme"})).await;
    assert_eq!(
        call(&b, "POST", &events, &[], Some(&ev)).await.status(),
        200
    );
}
