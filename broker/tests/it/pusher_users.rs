//! Pusher's user authentication (§16) against a real broker: `pusher:signin`
//! signed as the `pusher` library's `authenticateUser` signs it (bad:
//! 4009, over the user's handshake bucket: 4301, both signed out),
//! `#server-to-user-{id}` only for that user's connections and reached by
//! `events` on one node and across two, `terminate_connections` closing the
//! user's connections 4100 on every node, and `user_max_connections` (4004,
//! counted across the cluster).

use serde_json::{Value, json};
use tidegate::pusher::sign::hmac_hex;

use crate::common::{Broker, Client};
use crate::pusher_api::{APP, KEY, SECRET, call, connected, pong, subscribe};
use crate::redis_server::RedisServer;

/// The sample app with `user_max_connections = max`.
fn app_with_cap(max: u32) -> String {
    format!(
        "[[pusher.apps]]\nid = \"{APP}\"\nkey = \"{KEY}\"\nsecret = \"{SECRET}\"\naccount = \"acme\"\nuser_max_connections = {max}\n"
    )
}

/// `pusher:signin` as pusher-js sends it, signed as `authenticateUser`
/// signs `user_data` for `socket_id` (with `secret`).
async fn send_signin(c: &mut Client, socket_id: &str, user: &str, secret: &str) {
    let user_data = json!({"id": user, "name": "N"}).to_string();
    let sig = hmac_hex(
        secret.as_bytes(),
        format!("{socket_id}::user::{user_data}").as_bytes(),
    );
    let data = json!({"auth": format!("{KEY}:{sig}"), "user_data": user_data});
    c.send(json!({"event":"pusher:signin","data":data})).await;
}

/// Signs in as `user` and returns the answer.
pub(crate) async fn signin(c: &mut Client, socket_id: &str, user: &str) -> Value {
    send_signin(c, socket_id, user, SECRET).await;
    c.next_json().await
}

/// A connection signed in as `user`, holding its `#server-to-user-` channel.
async fn user_socket(b: &Broker, user: &str) -> Client {
    let (mut c, id) = connected(b).await;
    let ok = signin(&mut c, &id, user).await;
    assert_eq!(ok["event"], "pusher:signin_success", "{ok}");
    subscribe(&mut c, &id, &format!("#server-to-user-{user}")).await;
    c
}

/// What `sendToUser(user, "note", data)` sends, through `b`.
async fn send_to_user(b: &Broker, user: &str, data: &str) {
    let ev = json!({"name":"note","channels":[format!("#server-to-user-{user}")],"data":data});
    let resp = call(b, "POST", &format!("/apps/{APP}/events"), &[], Some(&ev)).await;
    assert_eq!(resp.status(), 200);
}

fn error_code(frame: &Value) -> Value {
    assert_eq!(frame["event"], "pusher:error", "{frame}");
    frame["data"]["code"].clone()
}

#[tokio::test]
async fn a_signed_in_user_gets_its_events_and_a_bad_signature_stays_signed_out() {
    let b = Broker::start("");
    let (mut c, id) = connected(&b).await;
    send_signin(&mut c, &id, "ann", "not-the-apps-secret").await;
    assert_eq!(error_code(&c.next_json().await), 4009);
    let ch = "#server-to-user-ann";
    c.send(json!({"event":"pusher:subscribe","data":{"channel":ch,"auth":""}}))
        .await;
    let refused = c.next_json().await;
    assert_eq!(refused["event"], "pusher:subscription_error", "{refused}");
    let data: Value = serde_json::from_str(refused["data"].as_str().unwrap()).unwrap();
    assert_eq!(data["status"], 403);

    let ok = signin(&mut c, &id, "ann").await;
    assert_eq!(ok["event"], "pusher:signin_success", "{ok}");
    let data: Value = serde_json::from_str(ok["data"].as_str().unwrap()).unwrap();
    assert_eq!(
        data["user_data"],
        json!({"id":"ann","name":"N"}).to_string()
    );
    subscribe(&mut c, &id, ch).await;
    // Another user's channel stays out of reach.
    c.send(json!({"event":"pusher:subscribe","data":{"channel":"#server-to-user-bob"}}))
        .await;
    assert_eq!(c.next_json().await["event"], "pusher:subscription_error");

    let mut bob = user_socket(&b, "bob").await;
    send_to_user(&b, "ann", "for ann").await;
    assert_eq!(
        c.next_json().await,
        json!({"event":"note","channel":ch,"data":"for ann"})
    );
    assert_eq!(
        pong(&mut bob).await["event"],
        "pusher:pong",
        "bob got ann's"
    );
    // The user's channel is not one of the app's to list.
    let listed: Value = call(&b, "GET", &format!("/apps/{APP}/channels"), &[], None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(listed, json!({"channels":{}}));
}

#[tokio::test]
async fn sign_ins_past_the_users_handshake_bucket_are_4301_and_signed_out() {
    // The free plan's handshake bucket: a burst of 10.
    let b = Broker::start("");
    let (mut c, id) = connected(&b).await;
    assert_eq!(
        signin(&mut c, &id, "ann").await["event"],
        "pusher:signin_success"
    );
    for _ in 0..9 {
        // Charged, then told it is signed in already.
        assert_eq!(error_code(&signin(&mut c, &id, "ann").await), Value::Null);
    }
    assert_eq!(error_code(&signin(&mut c, &id, "ann").await), 4301);
    let (mut other, other_id) = connected(&b).await;
    assert_eq!(
        error_code(&signin(&mut other, &other_id, "ann").await),
        4301
    );
    other
        .send(json!({"event":"pusher:subscribe","data":{"channel":"#server-to-user-ann"}}))
        .await;
    assert_eq!(
        other.next_json().await["event"],
        "pusher:subscription_error",
        "refused sign-in left the connection signed out"
    );
    // Another user's bucket is its own.
    assert_eq!(
        signin(&mut other, &other_id, "bob").await["event"],
        "pusher:signin_success"
    );
}

#[tokio::test]
async fn the_user_past_user_max_connections_is_4004_on_its_newest_connection() {
    let b = Broker::start(&app_with_cap(2));
    let mut first = user_socket(&b, "ann").await;
    let _second = user_socket(&b, "ann").await;
    let (mut third, id) = connected(&b).await;
    assert_eq!(error_code(&signin(&mut third, &id, "ann").await), 4004);
    assert_eq!(third.closed().await, Some(4004));
    assert_eq!(pong(&mut first).await["event"], "pusher:pong");
    // A closed connection gives its place back.
    drop(first);
    b.wait_sockets(1).await;
    let (mut fourth, id) = connected(&b).await;
    assert_eq!(
        signin(&mut fourth, &id, "ann").await["event"],
        "pusher:signin_success"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_to_a_user_and_its_cap_span_two_nodes() {
    let redis = RedisServer::start();
    let prefix = crate::cluster::prefix();
    let (a, b) = crate::cluster::two_nodes(&redis, &prefix, &app_with_cap(2)).await;
    let mut on_a = user_socket(&a, "ann").await;
    let mut on_b = user_socket(&b, "ann").await;
    send_to_user(&b, "ann", "both tabs").await;
    let want = json!({"event":"note","channel":"#server-to-user-ann","data":"both tabs"});
    assert_eq!(on_a.next_json().await, want);
    assert_eq!(on_b.next_json().await, want);
    // Two open across the cluster: a third on either node is past the cap.
    let (mut third, id) = connected(&a).await;
    assert_eq!(error_code(&signin(&mut third, &id, "ann").await), 4004);
    assert_eq!(third.closed().await, Some(4004));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminate_connections_closes_the_users_connections_on_every_node_4100() {
    let redis = RedisServer::start();
    let prefix = crate::cluster::prefix();
    let (a, b) = crate::cluster::two_nodes(&redis, &prefix, "").await;
    let mut ann_a = user_socket(&a, "ann").await;
    let mut ann_b = user_socket(&b, "ann").await;
    let mut bob_b = user_socket(&b, "bob").await;
    let (mut anon_b, _) = connected(&b).await;
    let path = format!("/apps/{APP}/users/ann/terminate_connections");
    let resp = call(&a, "POST", &path, &[], Some(&json!({}))).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.json::<Value>().await.unwrap(), json!({}));
    assert_eq!(ann_a.closed().await, Some(4100));
    assert_eq!(ann_b.closed().await, Some(4100));
    assert_eq!(pong(&mut bob_b).await["event"], "pusher:pong");
    assert_eq!(pong(&mut anon_b).await["event"], "pusher:pong");
    // Unsigned, it is a 401 like the rest of the API.
    let url = a.url(&path);
    let unsigned = reqwest::Client::new().post(url).send().await.unwrap();
    assert_eq!(unsigned.status(), 401);
}
