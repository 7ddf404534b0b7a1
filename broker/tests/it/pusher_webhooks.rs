//! A Pusher app's webhooks (§16) against a real receiver: Pusher's body
//! (`{"time_ms","events":[..]}`) and signature (`X-Pusher-Key`,
//! `X-Pusher-Signature`), delivered by §9's machinery: channel_occupied,
//! channel_vacated after the delay (a return cancels it), member_added /
//! member_removed by user, client_event and cache_miss; another app's
//! channels never reach them.

use serde_json::{Value, json};
use tidegate::pusher::sign::hmac_hex;

use crate::common::{Broker, Client};
use crate::pusher_api::{KEY, SECRET, connected, pong};
use crate::receiver::{Got, Receiver};

fn config(url: &str) -> String {
    format!(
        r#"
        [[pusher.apps]]
        id = "1234"
        key = "{KEY}"
        secret = "{SECRET}"
        account = "acme"
        client_events = true
        webhooks = [{{ url = "{url}", vacated_delay_ms = 300, backoff_base_ms = 50, events = ["channel_occupied", "channel_vacated", "member_added", "member_removed", "client_event", "cache_miss"] }}]
        [[pusher.apps]]
        id = "9"
        key = "other-key"
        secret = "a-secret-of-16-bytes"
        account = "acme"
        "#
    )
}

/// The one event of a delivery, its signature checked.
fn event(got: &Got) -> Value {
    assert_eq!(got.pusher_key, KEY);
    assert_eq!(got.pusher_signature, hmac_hex(SECRET.as_bytes(), &got.raw));
    assert!(got.body["time_ms"].as_u64().unwrap() > 1_600_000_000_000);
    let events = got.body["events"].as_array().unwrap();
    assert_eq!(events.len(), 1, "{}", got.body);
    events[0].clone()
}

/// The next `n` events, in (name, channel) order: those of one step reach
/// the receiver in no set order.
async fn next(rx: &mut Receiver, n: usize) -> Vec<Value> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(event(&rx.next().await));
    }
    out.sort_by_key(|e| (e["name"].to_string(), e["channel"].to_string()));
    out
}

async fn subscribe(c: &mut Client, id: &str, channel: &str, channel_data: Option<&str>) {
    let mut data = json!({"channel": channel});
    if !channel.starts_with("cache-") && channel != "lobby" {
        let signed = match channel_data {
            Some(d) => format!("{id}:{channel}:{d}"),
            None => format!("{id}:{channel}"),
        };
        let sig = hmac_hex(SECRET.as_bytes(), signed.as_bytes());
        data["auth"] = json!(format!("{KEY}:{sig}"));
    }
    if let Some(d) = channel_data {
        data["channel_data"] = json!(d);
    }
    c.send(json!({"event":"pusher:subscribe","data":data}))
        .await;
    let ok = c.next_json().await;
    assert_eq!(
        ok["event"], "pusher_internal:subscription_succeeded",
        "{ok}"
    );
}

async fn unsubscribe(c: &mut Client, channel: &str) {
    c.send(json!({"event":"pusher:unsubscribe","data":{"channel":channel}}))
        .await;
    assert_eq!(pong(c).await["event"], "pusher:pong");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_apps_webhooks_come_in_pushers_format_and_signature() {
    let mut rx = Receiver::accepting();
    let b = Broker::start(&config(&rx.url));
    // Another app's channel: nothing for this app's receiver.
    let url = format!("ws://{}/app/other-key?protocol=7", b.addr);
    let (ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    let mut other = Client::new(ws, None);
    other.next_json().await;
    other
        .send(json!({"event":"pusher:subscribe","data":{"channel":"lobby"}}))
        .await;
    assert_eq!(
        other.next_json().await["event"],
        "pusher_internal:subscription_succeeded"
    );

    let (mut a, ida) = connected(&b).await;
    subscribe(&mut a, &ida, "private-room", None).await;
    assert_eq!(
        next(&mut rx, 1).await,
        [json!({"name":"channel_occupied","channel":"private-room"})]
    );
    a.send(json!({"event":"client-typing","channel":"private-room","data":{"who":"a"}}))
        .await;
    assert_eq!(
        next(&mut rx, 1).await,
        [
            json!({"name":"client_event","channel":"private-room","event":"client-typing",
            "data":"{\"who\":\"a\"}","socket_id":ida})
        ]
    );
    // A cache channel with nothing held: occupied, and the miss.
    subscribe(&mut a, &ida, "cache-x", None).await;
    assert_eq!(a.next_json().await["event"], "pusher:cache_miss");
    assert_eq!(
        next(&mut rx, 2).await,
        [
            json!({"name":"cache_miss","channel":"cache-x","socket_id":ida}),
            json!({"name":"channel_occupied","channel":"cache-x"}),
        ]
    );
    // Left and back inside the delay: nothing; left for good: vacated.
    unsubscribe(&mut a, "private-room").await;
    subscribe(&mut a, &ida, "private-room", None).await;
    unsubscribe(&mut a, "private-room").await;
    assert_eq!(
        next(&mut rx, 1).await,
        [json!({"name":"channel_vacated","channel":"private-room"})]
    );
    // Presence: members by user_id, the removal after the delay too.
    let ann = r#"{"user_id":"ann","user_info":{}}"#;
    subscribe(&mut a, &ida, "presence-room", Some(ann)).await;
    assert_eq!(
        next(&mut rx, 2).await,
        [
            json!({"name":"channel_occupied","channel":"presence-room"}),
            json!({"name":"member_added","channel":"presence-room","user_id":"ann"}),
        ]
    );
    unsubscribe(&mut a, "presence-room").await;
    assert_eq!(
        next(&mut rx, 2).await,
        [
            json!({"name":"channel_vacated","channel":"presence-room"}),
            json!({"name":"member_removed","channel":"presence-room","user_id":"ann"}),
        ]
    );
    // The other app's channel and the cancelled vacate sent nothing.
    assert!(rx.drain().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn only_the_events_the_app_lists_are_sent() {
    let mut rx = Receiver::accepting();
    let b = Broker::start(&config(&rx.url).replace(
        r#"events = ["channel_occupied", "channel_vacated", "member_added", "member_removed", "client_event", "cache_miss"]"#,
        r#"events = ["cache_miss"]"#,
    ));
    let (mut a, ida) = connected(&b).await;
    subscribe(&mut a, &ida, "private-room", None).await;
    a.send(json!({"event":"client-typing","channel":"private-room","data":"x"}))
        .await;
    subscribe(&mut a, &ida, "cache-y", None).await;
    assert_eq!(
        next(&mut rx, 1).await,
        [json!({"name":"cache_miss","channel":"cache-y","socket_id":ida})]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_channel_on_two_nodes_is_occupied_once_for_the_cluster() {
    let mut rx = Receiver::accepting();
    let redis = crate::redis_server::RedisServer::start();
    let prefix = crate::cluster::prefix();
    let (na, nb) = crate::cluster::two_nodes(&redis, &prefix, &config(&rx.url)).await;
    let (mut a, ida) = connected(&na).await;
    let (mut c, idc) = connected(&nb).await;
    subscribe(&mut a, &ida, "private-both", None).await;
    assert_eq!(
        next(&mut rx, 1).await,
        [json!({"name":"channel_occupied","channel":"private-both"})]
    );
    subscribe(&mut c, &idc, "private-both", None).await;
    unsubscribe(&mut a, "private-both").await;
    unsubscribe(&mut c, "private-both").await;
    assert_eq!(
        next(&mut rx, 1).await,
        [json!({"name":"channel_vacated","channel":"private-both"})]
    );
    assert!(rx.drain().is_empty());
}
