//! Pusher's cache channels (§16): a new subscriber of `cache-`,
//! `private-cache-` or `presence-cache-` gets the channel's last event
//! right after `subscription_succeeded`, or `pusher:cache_miss` when the
//! channel has none; on one node and across a cluster.

use serde_json::{Value, json};

use crate::common::{Broker, Client};
use crate::pusher_api::{APP, call, connected, pong, subscribe};

/// Subscribes and returns the frame after `subscription_succeeded` (the
/// ping's answer comes after whatever the subscription sent first).
async fn subscribe_then(c: &mut Client, id: &str, channel: &str) -> Value {
    subscribe(c, id, channel).await;
    pong(c).await
}

async fn trigger(b: &Broker, channel: &str, name: &str, data: &str) {
    let ev = json!({"name": name, "channel": channel, "data": data});
    let resp = call(b, "POST", &format!("/apps/{APP}/events"), &[], Some(&ev)).await;
    assert_eq!(resp.status(), 200);
}

#[tokio::test]
async fn a_new_subscriber_gets_the_last_event_or_a_cache_miss() {
    let b = Broker::start("");
    let (mut first, id1) = connected(&b).await;
    // Nothing triggered yet: a miss, on the channel, before the pong.
    assert_eq!(
        subscribe_then(&mut first, &id1, "cache-score").await,
        json!({"event":"pusher:cache_miss","channel":"cache-score","data":"{}"})
    );
    assert_eq!(first.next_json().await["event"], "pusher:pong");
    trigger(&b, "cache-score", "score", "1-0").await;
    trigger(&b, "cache-score", "score", "2-0").await;
    assert_eq!(first.next_json().await["data"], "1-0");
    assert_eq!(first.next_json().await["data"], "2-0");
    // The next subscriber gets the last one only, then its pong.
    let (mut late, id2) = connected(&b).await;
    assert_eq!(
        subscribe_then(&mut late, &id2, "cache-score").await,
        json!({"event":"score","channel":"cache-score","data":"2-0"})
    );
    assert_eq!(late.next_json().await["event"], "pusher:pong");
    // Live events follow as on any channel.
    trigger(&b, "cache-score", "score", "3-0").await;
    assert_eq!(late.next_json().await["data"], "3-0");
    // A channel that is not a cache channel replays nothing.
    trigger(&b, "lobby", "x", "y").await;
    assert_eq!(
        subscribe_then(&mut late, &id2, "lobby").await["event"],
        "pusher:pong"
    );
}

#[tokio::test]
async fn private_cache_channels_replay_after_their_signature() {
    let b = Broker::start(
        r#"
        [[pusher.apps]]
        id = "1234"
        key = "app-key"
        secret = "tidegate-sample-pusher-secret"
        account = "acme"
        [[pusher.apps]]
        id = "9"
        key = "other-key"
        secret = "a-secret-of-16-bytes"
        account = "acme"
        "#,
    );
    trigger(&b, "private-cache-doc", "state", "{\"v\":7}").await;
    trigger(&b, "cache-doc", "state", "1").await;
    let (mut c, id) = connected(&b).await;
    assert_eq!(
        subscribe_then(&mut c, &id, "private-cache-doc").await,
        json!({"event":"state","channel":"private-cache-doc","data":"{\"v\":7}"})
    );
    // Another app's channel of the same name is another cache: a miss.
    let url = format!("ws://{}/app/other-key?protocol=7", b.addr);
    let (ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    let mut o = Client::new(ws, None);
    let hello = o.next_json().await;
    let data: Value = serde_json::from_str(hello["data"].as_str().unwrap()).unwrap();
    let oid = data["socket_id"].as_str().unwrap().to_owned();
    assert_eq!(
        subscribe_then(&mut o, &oid, "cache-doc").await["event"],
        "pusher:cache_miss"
    );
    assert_eq!(pong(&mut c).await["event"], "pusher:pong");
}

#[tokio::test]
async fn a_cache_channel_replays_an_event_triggered_through_another_node() {
    let redis = crate::redis_server::RedisServer::start();
    let prefix = crate::cluster::prefix();
    let (a, b) = crate::cluster::two_nodes(&redis, &prefix, "").await;
    trigger(&b, "cache-ticker", "price", "42").await;
    let (mut on_a, ida) = connected(&a).await;
    assert_eq!(
        subscribe_then(&mut on_a, &ida, "cache-ticker").await,
        json!({"event":"price","channel":"cache-ticker","data":"42"})
    );
    let (mut miss, idm) = connected(&a).await;
    assert_eq!(
        subscribe_then(&mut miss, &idm, "cache-empty").await["event"],
        "pusher:cache_miss"
    );
}
