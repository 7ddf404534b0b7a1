//! §16's last bullet against a real broker: two Pusher apps with sockets,
//! subscriptions, presence members, client events, API triggers and
//! refusals, then the admin overview's `pusherApps` (for the admin and the
//! viewer key) and the `/metrics` series: `tidegate_connections
//! {transport="pusher"}`, the refusals under `tidegate_rejections_total`,
//! and each app's `tidegate_pusher_app_*`. An operator's disconnect of an
//! app's account closes that app's sockets (4100) and its figures follow.
//! In a cluster (two nodes on a test-started Redis) the overview from
//! either node sums the app's figures over both.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tidegate::pusher::auth::signed_query;
use tidegate::pusher::sign::hmac_hex;

use crate::admin::{ADMIN_KEY, VIEWER_KEY, admin_config, close_frame, disconnect};
use crate::common::{Broker, Client, PATIENCE};
use crate::receiver::Receiver;

const A_ID: &str = "1234";
const A_KEY: &str = "app-key";
const A_SECRET: &str = "tidegate-sample-pusher-secret";
const B_ID: &str = "77";
const B_KEY: &str = "beta-key";
const B_SECRET: &str = "beta-secret-0123456789";

fn config(hook_url: &str) -> String {
    format!(
        r#"{admin}
[[pusher.apps]]
id = "{A_ID}"
key = "{A_KEY}"
secret = "{A_SECRET}"
account = "acme"
client_events = true

[[pusher.apps]]
id = "{B_ID}"
key = "{B_KEY}"
secret = "{B_SECRET}"
account = "beta"
plan = "free"
client_events = true
webhooks = [{{ url = "{hook_url}", events = ["channel_occupied"] }}]
"#,
        admin = admin_config()
    )
}

/// A socket of the app with `key`, and its `socket_id`.
async fn open(b: &Broker, key: &str) -> (Client, String) {
    let url = format!(
        "ws://{}/app/{key}?protocol=7&client=js&version=8.4.0",
        b.addr
    );
    let (ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    let mut c = Client::new(ws, None);
    let hello = c.next_json().await;
    assert_eq!(hello["event"], "pusher:connection_established", "{hello}");
    let data: Value = serde_json::from_str(hello["data"].as_str().unwrap()).unwrap();
    (c, data["socket_id"].as_str().unwrap().to_owned())
}

/// Subscribes (signed for private and presence channels, as `user` on a
/// presence one); the answer.
async fn subscribe(
    c: &mut Client,
    (id, key, secret): (&str, &str, &str),
    channel: &str,
    user: Option<&str>,
    good_auth: bool,
) -> Value {
    let mut data = json!({"channel": channel});
    let mut signed = format!("{id}:{channel}");
    if let Some(u) = user {
        let cd = json!({"user_id": u, "user_info": {}}).to_string();
        signed = format!("{signed}:{cd}");
        data["channel_data"] = json!(cd);
    }
    if channel.starts_with("private-") || channel.starts_with("presence-") {
        let sig = if good_auth {
            hmac_hex(secret.as_bytes(), signed.as_bytes())
        } else {
            "0".repeat(64)
        };
        data["auth"] = json!(format!("{key}:{sig}"));
    }
    c.send(json!({"event":"pusher:subscribe","data":data}))
        .await;
    c.next_json().await
}

async fn subscribed(c: &mut Client, who: (&str, &str, &str), channel: &str, user: Option<&str>) {
    let ok = subscribe(c, who, channel, user, true).await;
    assert_eq!(
        ok["event"], "pusher_internal:subscription_succeeded",
        "{ok}"
    );
}

/// A ping answered: every frame sent before it was handled.
async fn settled(c: &mut Client) {
    c.send(json!({"event":"pusher:ping","data":{}})).await;
    assert_eq!(c.next_json().await["event"], "pusher:pong");
}

/// A signed POST to the app's HTTP API.
async fn trigger(b: &Broker, (id, key, secret): (&str, &str, &str), what: &str, body: Value) {
    let path = format!("/apps/{id}/{what}");
    let text = body.to_string();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let q = signed_query(
        key,
        secret.as_bytes(),
        ("POST", &path),
        &[],
        text.as_bytes(),
        now,
    );
    let resp = reqwest::Client::new()
        .post(b.url(&format!("{path}?{q}")))
        .header("content-type", "application/json")
        .body(text)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "{what}");
}

async fn overview_with(b: &Broker, key: &str) -> Value {
    let resp = reqwest::Client::new()
        .get(b.url("/v1/admin/overview"))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    resp.json().await.unwrap()
}

/// Who subscribes on app A: its socket, the app's key and secret.
fn a(socket_id: &str) -> (&str, &'static str, &'static str) {
    (socket_id, A_KEY, A_SECRET)
}

fn app<'a>(o: &'a Value, id: &str) -> &'a Value {
    o["pusherApps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == id)
        .unwrap_or_else(|| panic!("no app {id} in {}", o["pusherApps"]))
}

fn refusals(a: &Value, layer: &str, reason: &str) -> u64 {
    a["refusals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["layer"] == layer && r["reason"] == reason)
        .map_or(0, |r| r["count"].as_u64().unwrap())
}

#[tokio::test]
async fn the_overview_and_the_metrics_show_every_figure_by_app() {
    let hook = Receiver::accepting();
    let b = Broker::start(&config(&hook.url));
    let (mut a1, id1) = open(&b, A_KEY).await;
    let (mut a2, id2) = open(&b, A_KEY).await;
    let (mut b1, idb) = open(&b, B_KEY).await;
    subscribed(&mut a1, a(&id1), "private-room", None).await;
    subscribed(&mut a2, a(&id2), "private-room", None).await;
    subscribed(&mut a1, a(&id1), "lobby", None).await;
    subscribed(&mut a1, a(&id1), "presence-chat", Some("u1")).await;
    subscribed(&mut a2, a(&id2), "presence-chat", Some("u2")).await;
    // u2 joined after u1: u1 hears of it (the windows are the app's).
    assert_eq!(
        a1.next_json().await["event"],
        "pusher_internal:member_added"
    );
    // The same name in the other app is another channel.
    subscribed(&mut b1, (&idb, B_KEY, B_SECRET), "private-room", None).await;

    // Client events: one on app A (heard by the other socket), one on B.
    a1.send(json!({"event":"client-typing","channel":"private-room","data":{"on":true}}))
        .await;
    assert_eq!(a2.next_json().await["event"], "client-typing");
    b1.send(json!({"event":"client-typing","channel":"private-room","data":"x"}))
        .await;
    settled(&mut b1).await;
    // API events: one on A, a batch of two on B.
    trigger(
        &b,
        (A_ID, A_KEY, A_SECRET),
        "events",
        json!({"name":"news","channel":"lobby","data":"1"}),
    )
    .await;
    assert_eq!(a1.next_json().await["event"], "news");
    trigger(
        &b,
        (B_ID, B_KEY, B_SECRET),
        "batch_events",
        json!({"batch":[{"name":"n","channel":"private-room","data":"1"},
                        {"name":"n","channel":"private-room","data":"2"}]}),
    )
    .await;
    for _ in 0..2 {
        assert_eq!(b1.next_json().await["event"], "n");
    }
    // Refusals: a bad signature on A, an unknown event on B.
    let refused = subscribe(&mut a1, a(&id1), "private-secret", None, false).await;
    assert_eq!(refused["event"], "pusher:subscription_error", "{refused}");
    b1.send(json!({"event":"pusher:nonsense","data":{}})).await;
    assert_eq!(b1.next_json().await["event"], "pusher:error");

    let o = overview_with(&b, ADMIN_KEY).await;
    assert!(!o.to_string().contains(A_SECRET) && !o.to_string().contains(B_SECRET));
    let ids: Vec<&str> = o["pusherApps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [A_ID, B_ID], "config order");
    let oa = app(&o, A_ID);
    assert_eq!(
        (&oa["key"], &oa["account"]),
        (&json!(A_KEY), &json!("acme"))
    );
    let figures = |a: &Value| {
        [
            "connections",
            "channels",
            "presenceUsers",
            "clientEvents",
            "apiEvents",
        ]
        .map(|f| a[f].as_u64().unwrap())
    };
    assert_eq!(figures(oa), [2, 3, 2, 1, 1], "{oa}");
    assert_eq!(refusals(oa, "connection", "unauthorized"), 1, "{oa}");
    assert_eq!(refusals(oa, "connection", "bad_request"), 0, "{oa}");
    assert_eq!(oa["limits"]["account"], "acme");
    assert_eq!(oa["limits"]["connections"], 2);
    assert_eq!(oa["limits"]["maxConnections"], 8);
    assert!(oa["limits"]["pressure"].as_f64().unwrap() >= 0.25, "{oa}");
    assert_eq!(oa["webhooks"], json!([]));
    let ob = app(&o, B_ID);
    assert_eq!(figures(ob), [1, 1, 0, 1, 2], "{ob}");
    assert_eq!(refusals(ob, "connection", "bad_request"), 1, "{ob}");
    assert_eq!(refusals(ob, "connection", "unauthorized"), 0, "{ob}");
    assert_eq!(ob["limits"]["account"], "beta");
    assert_eq!(ob["webhooks"][0]["id"], "pusher.77.0");
    assert_eq!(ob["webhooks"][0]["healthy"], true);
    // The app's endpoint is in §9's list too, where it was marked.
    assert!(
        o["webhooks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w["id"] == "pusher.77.0")
    );

    // The viewer key sees the same apps.
    let v = overview_with(&b, VIEWER_KEY).await;
    assert_eq!(v["role"], "viewer");
    assert_eq!(figures(app(&v, A_ID)), [2, 3, 2, 1, 1]);

    let m = b.metrics().await;
    let at = |series: &str| crate::common::metric_value(&m, series);
    assert_eq!(at(r#"tidegate_connections{transport="pusher"}"#), 3.0);
    assert!(at(r#"tidegate_rejections_total{layer="connection",reason="unauthorized"}"#) >= 1.0);
    assert!(at(r#"tidegate_rejections_total{layer="connection",reason="bad_request"}"#) >= 1.0);
    for (series, want) in [
        (r#"tidegate_pusher_app_connections{app="1234"}"#, 2.0),
        (r#"tidegate_pusher_app_connections{app="77"}"#, 1.0),
        (r#"tidegate_pusher_app_channels{app="1234"}"#, 3.0),
        (r#"tidegate_pusher_app_presence_users{app="1234"}"#, 2.0),
        (
            r#"tidegate_pusher_app_events_total{app="1234",source="client"}"#,
            1.0,
        ),
        (
            r#"tidegate_pusher_app_events_total{app="1234",source="api"}"#,
            1.0,
        ),
        (
            r#"tidegate_pusher_app_events_total{app="77",source="api"}"#,
            2.0,
        ),
        (
            r#"tidegate_pusher_app_rejections_total{app="1234",layer="connection",reason="unauthorized"}"#,
            1.0,
        ),
        (
            r#"tidegate_pusher_app_rejections_total{app="77",layer="connection",reason="bad_request"}"#,
            1.0,
        ),
    ] {
        assert_eq!(at(series), want, "{series}");
    }

    // A key no app has: refused as a bad token is, for no app.
    let url = format!("ws://{}/app/no-such-key?protocol=7", b.addr);
    let (ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    let mut stranger = Client::new(ws, None);
    assert_eq!(stranger.closed().await, Some(4001));
    let handshake = r#"tidegate_rejections_total{layer="handshake",reason="unauthorized"}"#;
    assert_eq!(b.metric(handshake).await, 1.0);
    let o = overview_with(&b, ADMIN_KEY).await;
    assert_eq!(refusals(app(&o, A_ID), "handshake", "unauthorized"), 0);

    // A leaving socket takes its channels and presence user with it.
    drop(a2);
    // Disconnecting an app's account closes the app's sockets (4100:
    // pusher-js reconnects after a backoff).
    let closed = disconnect(&b, json!({"account": "beta"})).await;
    assert_eq!(closed["closed"], 1);
    assert_eq!(close_frame(&mut b1).await.0, 4100);
    let deadline = Instant::now() + PATIENCE;
    loop {
        let o = overview_with(&b, ADMIN_KEY).await;
        let (fa, fb) = (figures(app(&o, A_ID)), figures(app(&o, B_ID)));
        // private-room, lobby and presence-chat still have a1.
        if fa[..3] == [1, 3, 1] && fb[..2] == [0, 0] {
            assert_eq!(fa[3..], [1, 1], "counts stay");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the figures never followed the closes: {fa:?} {fb:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(a1);
}

/// Two nodes on one Redis: the overview from either node sums the app's
/// figures over both, as it sums their connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_cluster_the_apps_figures_are_summed_over_the_nodes() {
    let redis = crate::redis_server::RedisServer::start();
    let p = crate::cluster::prefix();
    let hook = Receiver::accepting();
    let extra = config(&hook.url);
    let (a, b) = crate::cluster::two_nodes(&redis, &p, &extra).await;
    let (mut on_a, ida) = open(&a, A_KEY).await;
    let (mut on_b, idb) = open(&b, A_KEY).await;
    subscribed(&mut on_a, self::a(&ida), "private-room", None).await;
    subscribed(&mut on_b, self::a(&idb), "private-room", None).await;
    // A client event on node a reaches node b's socket.
    on_a.send(json!({"event":"client-typing","channel":"private-room","data":"x"}))
        .await;
    assert_eq!(on_b.next_json().await["event"], "client-typing");
    for from in [&a, &b] {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let o = overview_with(from, ADMIN_KEY).await;
            let app = app(&o, A_ID);
            let seen = (
                o["nodes"].as_array().unwrap().len(),
                app["connections"].as_u64(),
                app["channels"].as_u64(),
                app["clientEvents"].as_u64(),
                app["limits"]["connections"].as_u64(),
            );
            // One socket and one occupied channel on each node.
            if seen == (2, Some(2), Some(2), Some(1), Some(2)) {
                assert_eq!(o["clusterWide"], true);
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the overview never summed both nodes: {seen:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
