//! The Pusher Channels protocol on `/app/{key}` (§16) against a real
//! broker, from a plain WebSocket client speaking it by hand: the
//! connection's opening and closes, ping/pong and the activity clock,
//! channel auth, client events, the connection's budget (4301, kept open),
//! the account's cap (429 before the upgrade) and budget (4100), and app
//! isolation.

use serde_json::{Value, json};
use tidegate::pusher::sign::hmac_hex;

use crate::common::{Broker, Client, Got, refusal};

pub(crate) const KEY: &str = "app-key";
const SECRET: &str = "tidegate-sample-pusher-secret";

/// A socket on `/app/{key}?{query}`.
async fn open(b: &Broker, key: &str, query: &str) -> Result<Client, (u16, Value, Option<u64>)> {
    let url = format!("ws://{}/app/{key}?{query}", b.addr);
    refusal(
        tokio_tungstenite::connect_async(url)
            .await
            .map(|(ws, _)| Client::new(ws, None)),
    )
}

/// A connected socket of the sample app and its `socket_id`.
pub(crate) async fn connected(b: &Broker, key: &str) -> (Client, String) {
    let mut c = open(b, key, "protocol=7&client=js&version=8.4.0")
        .await
        .unwrap();
    let hello = c.next_json().await;
    assert_eq!(hello["event"], "pusher:connection_established");
    let data: Value = serde_json::from_str(hello["data"].as_str().unwrap()).unwrap();
    (c, data["socket_id"].as_str().unwrap().to_owned())
}

pub(crate) fn auth(key: &str, secret: &str, socket_id: &str, channel: &str) -> String {
    format!(
        "{key}:{}",
        hmac_hex(
            secret.as_bytes(),
            format!("{socket_id}:{channel}").as_bytes()
        )
    )
}

pub(crate) async fn subscribe(c: &mut Client, channel: &str, auth: Option<&str>) -> Value {
    let mut data = json!({"channel": channel});
    if let Some(a) = auth {
        data["auth"] = json!(a);
    }
    c.send(json!({"event":"pusher:subscribe","data":data}))
        .await;
    c.next_json().await
}

/// A ping answered: everything queued before it has been read.
pub(crate) async fn sync(c: &mut Client) -> Value {
    c.send(json!({"event":"pusher:ping","data":{}})).await;
    c.next_json().await
}

#[tokio::test]
async fn connection_established_carries_a_socket_id_and_the_activity_timeout_as_a_string() {
    let b = Broker::start("");
    let mut c = open(&b, KEY, "protocol=7").await.unwrap();
    let hello = c.next_json().await;
    assert_eq!(hello["event"], "pusher:connection_established");
    let data: Value =
        serde_json::from_str(hello["data"].as_str().expect("data is a string")).unwrap();
    let id = data["socket_id"].as_str().unwrap();
    let (a, n) = id.split_once('.').unwrap();
    assert!(
        !a.is_empty() && a.bytes().all(|c| c.is_ascii_digit()),
        "{id}"
    );
    assert!(
        !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()),
        "{id}"
    );
    assert_eq!(data["activity_timeout"], 120);
    assert_eq!(
        sync(&mut c).await,
        json!({"event":"pusher:pong","data":"{}"})
    );
    assert_eq!(
        b.metric("tidegate_connections{transport=\"pusher\"}").await,
        1.0
    );
}

#[tokio::test]
async fn unknown_keys_and_protocols_close_with_pushers_codes() {
    let b = Broker::start("");
    for (key, query, code) in [
        ("nope", "protocol=7", 4001),
        (KEY, "client=js", 4008),
        (KEY, "protocol=8", 4007),
        (KEY, "protocol=4", 4007),
    ] {
        let mut c = open(&b, key, query).await.unwrap();
        let err = c.next_json().await;
        assert_eq!(err["event"], "pusher:error", "{key} {query}");
        assert_eq!(err["data"]["code"], code, "{key} {query}");
        assert_eq!(c.closed().await, Some(code), "{key} {query}");
    }
    for p in 5..=7 {
        let mut c = open(&b, KEY, &format!("protocol={p}")).await.unwrap();
        assert_eq!(
            c.next_json().await["event"],
            "pusher:connection_established"
        );
    }
}

#[tokio::test]
async fn private_channels_need_the_apps_signature_for_this_socket() {
    let b = Broker::start("");
    let (mut c, id) = connected(&b, KEY).await;
    let bad = subscribe(
        &mut c,
        "private-a",
        Some(&auth(KEY, SECRET, "1.1", "private-a")),
    )
    .await;
    assert_eq!(bad["event"], "pusher:subscription_error");
    assert_eq!(bad["channel"], "private-a");
    let data: Value = serde_json::from_str(bad["data"].as_str().unwrap()).unwrap();
    assert_eq!(data["status"], 401);
    assert_eq!(data["type"], "AuthError");
    let none = subscribe(&mut c, "private-a", None).await;
    assert_eq!(none["event"], "pusher:subscription_error");
    let ok = subscribe(
        &mut c,
        "private-a",
        Some(&auth(KEY, SECRET, &id, "private-a")),
    )
    .await;
    assert_eq!(
        ok,
        json!({"event":"pusher_internal:subscription_succeeded","channel":"private-a","data":"{}"})
    );
    let public = subscribe(&mut c, "lobby", None).await;
    assert_eq!(public["event"], "pusher_internal:subscription_succeeded");
    let bad_name = subscribe(&mut c, "a|b", None).await;
    assert_eq!(bad_name["event"], "pusher:subscription_error");
}

#[tokio::test]
async fn client_events_reach_the_others_and_not_the_sender() {
    let b = Broker::start("");
    let (mut a, ida) = connected(&b, KEY).await;
    let (mut o, ido) = connected(&b, KEY).await;
    let ch = "private-room";
    subscribe(&mut a, ch, Some(&auth(KEY, SECRET, &ida, ch))).await;
    subscribe(&mut o, ch, Some(&auth(KEY, SECRET, &ido, ch))).await;
    a.send(json!({"event":"client-typing","channel":ch,"data":{"who":"a"}}))
        .await;
    let got = o.next_json().await;
    assert_eq!(got["event"], "client-typing");
    assert_eq!(got["channel"], ch);
    let data: Value = serde_json::from_str(got["data"].as_str().unwrap()).unwrap();
    assert_eq!(data, json!({"who":"a"}));
    // The sender's next frame is its pong, not its own event.
    assert_eq!(sync(&mut a).await["event"], "pusher:pong");
    // Not on a public channel.
    subscribe(&mut a, "lobby", None).await;
    a.send(json!({"event":"client-x","channel":"lobby","data":"{}"}))
        .await;
    assert_eq!(a.next_json().await["event"], "pusher:error");
}

#[tokio::test]
async fn client_events_over_the_connections_budget_are_dropped_with_4301_and_the_socket_stays() {
    let b = Broker::start(
        "[accounts.acme]\nburst = 4\nmessages_per_sec = 0.01\n[accounts.acme.costs]\nmax_single = 4\n",
    );
    let (mut a, ida) = connected(&b, KEY).await;
    let ch = "private-flood";
    // One unit of the four.
    subscribe(&mut a, ch, Some(&auth(KEY, SECRET, &ida, ch))).await;
    for _ in 0..10 {
        a.send(json!({"event":"client-x","channel":ch,"data":"{}"}))
            .await;
    }
    let err = a.next_json().await;
    assert_eq!(err["event"], "pusher:error");
    assert_eq!(err["data"]["code"], 4301);
    // At most one a second: the next frame is the pong.
    assert_eq!(sync(&mut a).await["event"], "pusher:pong");
}

#[tokio::test]
async fn client_events_off_are_answered_4301() {
    let b = Broker::start(
        r#"
        [[pusher.apps]]
        id = "9"
        key = "quiet"
        secret = "a-secret-of-16-bytes"
        account = "acme"
        client_events = false
        "#,
    );
    let (mut a, id) = connected(&b, "quiet").await;
    let ch = "private-x";
    subscribe(
        &mut a,
        ch,
        Some(&auth("quiet", "a-secret-of-16-bytes", &id, ch)),
    )
    .await;
    a.send(json!({"event":"client-x","channel":ch,"data":"{}"}))
        .await;
    let err = a.next_json().await;
    assert_eq!(err["data"]["code"], 4301);
    assert_eq!(
        err["data"]["message"],
        "client events are disabled for this app"
    );
}

#[tokio::test]
async fn two_apps_never_share_a_channel() {
    let b = Broker::start(
        r#"
        [[pusher.apps]]
        id = "1"
        key = "one"
        secret = "a-secret-of-16-bytes"
        account = "acme"
        client_events = true
        [[pusher.apps]]
        id = "2"
        key = "two"
        secret = "a-secret-of-16-bytes"
        account = "acme"
        client_events = true
        "#,
    );
    let s = "a-secret-of-16-bytes";
    let ch = "private-same";
    let (mut one_a, id1a) = connected(&b, "one").await;
    let (mut one_b, id1b) = connected(&b, "one").await;
    let (mut two, id2) = connected(&b, "two").await;
    subscribe(&mut one_a, ch, Some(&auth("one", s, &id1a, ch))).await;
    subscribe(&mut one_b, ch, Some(&auth("one", s, &id1b, ch))).await;
    subscribe(&mut two, ch, Some(&auth("two", s, &id2, ch))).await;
    one_a
        .send(json!({"event":"client-hi","channel":ch,"data":"1"}))
        .await;
    assert_eq!(one_b.next_json().await["event"], "client-hi");
    assert_eq!(sync(&mut two).await["event"], "pusher:pong");
    // A key of one app signs nothing of the other's.
    let (mut t2, id) = connected(&b, "two").await;
    let wrong = subscribe(
        &mut t2,
        "private-z",
        Some(&auth("one", s, &id, "private-z")),
    )
    .await;
    assert_eq!(wrong["event"], "pusher:subscription_error");
}

#[tokio::test]
async fn the_accounts_connection_cap_is_a_429_before_the_upgrade() {
    let b = Broker::start("[accounts.acme]\nmax_connections = 1\n");
    let (_first, _) = connected(&b, KEY).await;
    let Err((status, body, retry)) = open(&b, KEY, "protocol=7").await else {
        panic!("a second connection past the cap was upgraded");
    };
    assert_eq!(status, 429);
    assert_eq!(body["error"], "too_many_connections");
    assert!(retry.is_some());
}

#[tokio::test]
async fn the_accounts_budget_closes_with_4100_not_4200() {
    let b = Broker::start("");
    let (mut c, _) = connected(&b, KEY).await;
    b.node.accounts.breach("acme");
    assert_eq!(c.closed().await, Some(4100));
}

#[tokio::test]
async fn a_silent_client_is_pinged_then_closed_4201() {
    let b = Broker::start(
        r#"
        [[pusher.apps]]
        id = "1"
        key = "k"
        secret = "a-secret-of-16-bytes"
        account = "acme"
        activity_timeout_s = 1
        pong_timeout_s = 1
        "#,
    );
    let (mut c, _) = connected(&b, "k").await;
    let ping = c.next_json().await;
    assert_eq!(ping["event"], "pusher:ping");
    match c.next().await {
        Got::Close(code) => assert_eq!(code, Some(4201)),
        other => panic!("expected close 4201, got {other:?}"),
    }
}

#[tokio::test]
async fn a_pong_keeps_a_quiet_client() {
    let b = Broker::start(
        r#"
        [[pusher.apps]]
        id = "1"
        key = "k"
        secret = "a-secret-of-16-bytes"
        account = "acme"
        activity_timeout_s = 1
        pong_timeout_s = 1
        "#,
    );
    let (mut c, _) = connected(&b, "k").await;
    for _ in 0..2 {
        assert_eq!(c.next_json().await["event"], "pusher:ping");
        c.send(json!({"event":"pusher:pong","data":{}})).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_past_its_grace_is_closed_4100() {
    use tokio::io::AsyncWriteExt;
    let b = Broker::start(
        "[plans.free]\noutbound_high_water_bytes = 65536\noutbound_grace_ms = 50\n\
         [socket]\nsend_buffer_bytes = 4096\n",
    );
    let window = crate::common::small_window(b.addr).await;
    let mut s =
        crate::common::upgrade_path(window, b.addr, "/app/app-key?protocol=7", "none").await;
    let sub = json!({"event":"pusher:subscribe","data":{"channel":"lobby"}}).to_string();
    s.write_all(&crate::common::masked_text(sub.as_bytes()))
        .await
        .unwrap();
    // Subscribed once the hub counts it.
    let internal = tidegate::pusher::names::internal("1234", "lobby");
    while b.node.broker.subscribers(&internal) == 0 {
        tokio::task::yield_now().await;
    }
    // Never read, and kept under pressure until the grace runs out: the
    // kernel's buffers fill, the queue stays at its 64 KiB mark.
    let frame = tidegate::pusher::frames::channel_event("e", "lobby", &"x".repeat(1024), None);
    let data = tidegate::pusher::sink::publish_data("", &frame);
    let closed = "tidegate_rejections_total{layer=\"outbound\",reason=\"slow_consumer_closed\"}";
    let deadline = std::time::Instant::now() + crate::common::PATIENCE;
    while b.metric(closed).await == 0.0 {
        assert!(std::time::Instant::now() < deadline, "{closed} never rose");
        for _ in 0..200 {
            b.node.publish(&internal, &data, "test", None).await;
        }
    }
    let mut c = crate::bounds_memory::reading(s).await;
    assert_eq!(
        c.closed().await,
        Some(4100),
        "a slow reader is 4100, never 4200"
    );
}

#[tokio::test]
async fn client_events_past_the_accounts_budget_close_the_apps_connections_4100() {
    let b = Broker::start(
        "[accounts.acme]\naccount_burst = 5\naccount_messages_per_sec = 0.01\naccount_sample_every = 1\n",
    );
    let (mut a, ida) = connected(&b, KEY).await;
    let (mut o, _) = connected(&b, KEY).await;
    let ch = "private-flood";
    subscribe(&mut a, ch, Some(&auth(KEY, SECRET, &ida, ch))).await;
    for _ in 0..10 {
        a.send(json!({"event":"client-x","channel":ch,"data":"{}"}))
            .await;
    }
    assert_eq!(a.closed().await, Some(4100));
    assert_eq!(
        o.closed().await,
        Some(4100),
        "every connection of the account"
    );
}
