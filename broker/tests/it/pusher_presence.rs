//! Pusher presence channels (§16 on §13's machinery) against real
//! brokers, from plain WebSocket clients speaking the protocol by hand:
//! members are users (two tabs are one member, leaving with the last),
//! `subscription_succeeded` carries `{ids, hash, count}`, member events
//! reach the others coalesced per `presence_diff_ms` window, the cap
//! counts users (403 `presence_full`), client events carry `user_id`, the
//! HTTP API lists users and counts them, and across a cluster (two nodes
//! on a test-started Redis) a killed node's members leave within the
//! lease.
//!
//! "Nothing was sent" is never waited for with a sleep: a later event
//! that must come after it (a marker user's join) is read next instead.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tidegate::pusher::auth::signed_query;
use tidegate::pusher::sign::hmac_hex;

use crate::common::{Broker, Client};
use crate::redis_server::RedisServer;

const APP: &str = "1234";
const KEY: &str = "app-key";
const SECRET: &str = "tidegate-sample-pusher-secret";

/// A connected socket of the sample app at `addr` and its `socket_id`.
async fn connected(addr: SocketAddr) -> (Client, String) {
    let url = format!("ws://{addr}/app/{KEY}?protocol=7&client=js&version=8.4.0");
    let (ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    let mut c = Client::new(ws, None);
    let hello = c.next_json().await;
    assert_eq!(hello["event"], "pusher:connection_established");
    let data: Value = serde_json::from_str(hello["data"].as_str().unwrap()).unwrap();
    (c, data["socket_id"].as_str().unwrap().to_owned())
}

/// `channel_data` of `user`, with a name as its info.
fn channel_data(user: &str) -> String {
    json!({"user_id": user, "user_info": {"name": user.to_uppercase()}}).to_string()
}

/// Subscribes `c` (socket `id`) to `channel` as `user`, signed; the
/// answer.
async fn join(c: &mut Client, id: &str, channel: &str, user: &str) -> Value {
    let data = channel_data(user);
    let sig = hmac_hex(
        SECRET.as_bytes(),
        format!("{id}:{channel}:{data}").as_bytes(),
    );
    c.send(json!({"event":"pusher:subscribe","data":{
        "channel": channel, "auth": format!("{KEY}:{sig}"), "channel_data": data}}))
        .await;
    c.next_json().await
}

/// A new socket at `addr` in `channel` as `user`: the socket and the
/// members its `subscription_succeeded` listed.
async fn member(addr: SocketAddr, channel: &str, user: &str) -> (Client, Value) {
    let (mut c, id) = connected(addr).await;
    let ok = join(&mut c, &id, channel, user).await;
    assert_eq!(
        ok["event"], "pusher_internal:subscription_succeeded",
        "{ok}"
    );
    assert_eq!(ok["channel"], channel);
    let data: Value = serde_json::from_str(ok["data"].as_str().unwrap()).unwrap();
    (c, data["presence"].clone())
}

/// The next frame of `c`: a member event on `channel`, as
/// `("added"|"removed", user_id, data)`.
async fn member_event(c: &mut Client, channel: &str) -> (String, String, Value) {
    let v = c.next_json().await;
    assert_eq!(v["channel"], channel, "{v}");
    let data: Value = serde_json::from_str(v["data"].as_str().unwrap()).unwrap();
    let what = match v["event"].as_str().unwrap() {
        "pusher_internal:member_added" => "added",
        "pusher_internal:member_removed" => "removed",
        other => panic!("expected a member event, got {other}: {v}"),
    };
    let user = data["user_id"].as_str().unwrap().to_owned();
    (what.to_owned(), user, data)
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A signed GET of the sample app's HTTP API at `addr`: status and body.
async fn get(addr: SocketAddr, path: &str, params: &[(&str, &str)]) -> (u16, Value) {
    let q = signed_query(KEY, SECRET.as_bytes(), ("GET", path), params, b"", now());
    let resp = reqwest::get(format!("http://{addr}{path}?{q}"))
        .await
        .unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap())
}

/// The users the HTTP API lists in `channel`.
async fn users(addr: SocketAddr, channel: &str) -> Vec<String> {
    let (status, body) = get(addr, &format!("/apps/{APP}/channels/{channel}/users"), &[]).await;
    assert_eq!(status, 200, "{body}");
    body["users"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn two_tabs_of_one_user_are_one_member_who_leaves_with_the_last() {
    let b = Broker::start("");
    let ch = "presence-room";
    let (mut ann1, listed) = member(b.addr, ch, "ann").await;
    assert_eq!(
        listed,
        json!({"ids":["ann"],"hash":{"ann":{"name":"ANN"}},"count":1})
    );
    let (mut bob, listed) = member(b.addr, ch, "bob").await;
    assert_eq!(listed["count"], 2);
    assert_eq!(listed["ids"], json!(["ann", "bob"]));
    assert_eq!(listed["hash"]["bob"], json!({"name":"BOB"}));
    let (what, user, data) = member_event(&mut ann1, ch).await;
    assert_eq!((what.as_str(), user.as_str()), ("added", "bob"));
    assert_eq!(data["user_info"], json!({"name":"BOB"}));

    // Ann's second tab: listed once, and no news to Bob (the next thing
    // Bob hears is cid, who came after it).
    let (ann2, listed) = member(b.addr, ch, "ann").await;
    assert_eq!(listed["count"], 2, "{listed}");
    assert_eq!(listed["ids"], json!(["ann", "bob"]));
    let (_cid, _) = member(b.addr, ch, "cid").await;
    let (what, user, _) = member_event(&mut bob, ch).await;
    assert_eq!((what.as_str(), user.as_str()), ("added", "cid"));
    assert_eq!(users(b.addr, ch).await, ["ann", "bob", "cid"]);
    let (_, info) = get(
        b.addr,
        &format!("/apps/{APP}/channels/{ch}"),
        &[("info", "user_count,subscription_count")],
    )
    .await;
    assert_eq!(info["user_count"], 3, "{info}");
    assert_eq!(info["subscription_count"], 4, "{info}");

    // One tab closes: Ann stays (Bob next hears dan, who came after).
    drop(ann1);
    let (_dan, _) = member(b.addr, ch, "dan").await;
    let (what, user, _) = member_event(&mut bob, ch).await;
    assert_eq!((what.as_str(), user.as_str()), ("added", "dan"));
    // The last closes: Ann leaves.
    drop(ann2);
    let (what, user, data) = member_event(&mut bob, ch).await;
    assert_eq!((what.as_str(), user.as_str()), ("removed", "ann"));
    assert_eq!(data, json!({"user_id":"ann"}));
    assert_eq!(users(b.addr, ch).await, ["bob", "cid", "dan"]);
}

#[tokio::test]
async fn a_join_and_a_leave_of_one_user_inside_a_window_cancel_and_a_user_is_news_once() {
    let b = Broker::start(
        r#"
        [[pusher.apps]]
        id = "1234"
        key = "app-key"
        secret = "tidegate-sample-pusher-secret"
        account = "acme"
        presence_diff_ms = 1000
        "#,
    );
    let ch = "presence-window";
    let (mut ann, _) = member(b.addr, ch, "ann").await;
    // Bob comes and goes inside one window: nobody hears of him.
    let (mut bob, id) = connected(b.addr).await;
    join(&mut bob, &id, ch, "bob").await;
    bob.send(json!({"event":"pusher:unsubscribe","data":{"channel":ch}}))
        .await;
    // Cid opens two tabs and closes one: one member_added.
    let (_cid1, _) = member(b.addr, ch, "cid").await;
    let (cid2, _) = member(b.addr, ch, "cid").await;
    drop(cid2);
    let (_dan, _) = member(b.addr, ch, "dan").await;
    let mut heard = Vec::new();
    while heard
        .last()
        .is_none_or(|(_, u): &(String, String)| u != "dan")
    {
        let (what, user, _) = member_event(&mut ann, ch).await;
        heard.push((what, user));
    }
    assert_eq!(
        heard,
        [
            ("added".to_owned(), "cid".to_owned()),
            ("added".to_owned(), "dan".to_owned())
        ]
    );
}

/// Reads `c`'s member events until `last` is added: what it heard.
async fn heard_until(c: &mut Client, channel: &str, last: &str) -> Vec<(String, String)> {
    let mut heard = Vec::new();
    loop {
        let (what, user, _) = member_event(c, channel).await;
        let done = what == "added" && user == last;
        heard.push((what, user));
        if done {
            return heard;
        }
    }
}

fn news(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(w, u)| ((*w).to_owned(), (*u).to_owned()))
        .collect()
}

#[tokio::test]
async fn a_member_listed_while_its_join_was_unsent_is_told_its_leave() {
    let b = Broker::start(
        r#"
        [[pusher.apps]]
        id = "1234"
        key = "app-key"
        secret = "tidegate-sample-pusher-secret"
        account = "acme"
        presence_diff_ms = 1000
        "#,
    );
    let ch = "presence-unsent";
    let (mut cid, _) = member(b.addr, ch, "cid").await;
    // A window of its own, closed: cid hears of eve.
    let (_eve, _) = member(b.addr, ch, "eve").await;
    assert_eq!(
        heard_until(&mut cid, ch, "eve").await,
        news(&[("added", "eve")])
    );
    // Inside one new window: ann comes, bob comes and is shown ann, ann
    // goes. The others never hear of ann (her join and leave cancel), but
    // bob listed her, so he must hear she left.
    let (ann, _) = member(b.addr, ch, "ann").await;
    let (mut bob, listed) = member(b.addr, ch, "bob").await;
    assert_eq!(
        listed["ids"],
        json!(["ann", "bob", "cid", "eve"]),
        "{listed}"
    );
    drop(ann);
    let deadline = Instant::now() + crate::common::PATIENCE;
    while users(b.addr, ch).await.contains(&"ann".to_owned()) {
        assert!(Instant::now() < deadline, "ann never left");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (_dan, _) = member(b.addr, ch, "dan").await;
    assert_eq!(
        heard_until(&mut bob, ch, "dan").await,
        news(&[("removed", "ann"), ("added", "dan")])
    );
    assert_eq!(
        heard_until(&mut cid, ch, "dan").await,
        news(&[("added", "bob"), ("added", "dan")])
    );
}

#[tokio::test]
async fn the_cap_counts_users_and_a_full_channel_is_403_presence_full() {
    let b = Broker::start(
        r#"
        [[pusher.apps]]
        id = "1234"
        key = "app-key"
        secret = "tidegate-sample-pusher-secret"
        account = "acme"
        max_presence_members = 2
        "#,
    );
    let ch = "presence-small";
    let (_ann, _) = member(b.addr, ch, "ann").await;
    let (_bob, _) = member(b.addr, ch, "bob").await;
    // A second tab of a member is no new member.
    let (_ann2, listed) = member(b.addr, ch, "ann").await;
    assert_eq!(listed["count"], 2);
    let (mut cid, id) = connected(b.addr).await;
    let refused = join(&mut cid, &id, ch, "cid").await;
    assert_eq!(refused["event"], "pusher:subscription_error", "{refused}");
    assert_eq!(refused["channel"], ch);
    let data: Value = serde_json::from_str(refused["data"].as_str().unwrap()).unwrap();
    assert_eq!(data["status"], 403);
    assert_eq!(data["error"], "presence_full");
    // The socket stays open; the channel holds its two users.
    cid.send(json!({"event":"pusher:ping","data":{}})).await;
    assert_eq!(cid.next_json().await["event"], "pusher:pong");
    assert_eq!(users(b.addr, ch).await, ["ann", "bob"]);
}

#[tokio::test]
async fn presence_auth_covers_channel_data_and_bad_channel_data_is_400() {
    let b = Broker::start("");
    let ch = "presence-auth";
    let (mut c, id) = connected(b.addr).await;
    // Signed for ann, claiming to be bob: refused 401.
    let sig = hmac_hex(
        SECRET.as_bytes(),
        format!("{id}:{ch}:{}", channel_data("ann")).as_bytes(),
    );
    c.send(json!({"event":"pusher:subscribe","data":{
        "channel": ch, "auth": format!("{KEY}:{sig}"), "channel_data": channel_data("bob")}}))
        .await;
    let refused = c.next_json().await;
    assert_eq!(refused["event"], "pusher:subscription_error");
    let data: Value = serde_json::from_str(refused["data"].as_str().unwrap()).unwrap();
    assert_eq!(data["status"], 401);
    // Signed, but no user_id: 400.
    let cd = r#"{"user_info":{}}"#;
    let sig = hmac_hex(SECRET.as_bytes(), format!("{id}:{ch}:{cd}").as_bytes());
    c.send(json!({"event":"pusher:subscribe","data":{
        "channel": ch, "auth": format!("{KEY}:{sig}"), "channel_data": cd}}))
        .await;
    let refused = c.next_json().await;
    let data: Value = serde_json::from_str(refused["data"].as_str().unwrap()).unwrap();
    assert_eq!(data["status"], 400, "{data}");
    assert_eq!(data["type"], "InvalidChannelData");
    // user_count is for presence channels only.
    let (status, body) = get(
        b.addr,
        &format!("/apps/{APP}/channels/public-x"),
        &[("info", "user_count")],
    )
    .await;
    assert_eq!(status, 400, "{body}");
}

#[tokio::test]
async fn client_events_on_presence_channels_carry_the_senders_user_id() {
    let b = Broker::start("");
    let ch = "presence-chat";
    let (mut ann, _) = member(b.addr, ch, "ann").await;
    let (mut bob, _) = member(b.addr, ch, "bob").await;
    member_event(&mut ann, ch).await;
    bob.send(json!({"event":"client-typing","channel":ch,"data":{"typing":true}}))
        .await;
    let got = ann.next_json().await;
    assert_eq!(got["event"], "client-typing");
    assert_eq!(got["user_id"], "bob");
    assert_eq!(got["data"], r#"{"typing":true}"#);
}

#[tokio::test]
async fn the_http_api_counts_users_of_presence_channels() {
    let b = Broker::start("");
    let (_a1, _) = member(b.addr, "presence-one", "ann").await;
    let (_a2, _) = member(b.addr, "presence-one", "ann").await;
    let (_b1, _) = member(b.addr, "presence-one", "bob").await;
    let (_c1, _) = member(b.addr, "presence-two", "cid").await;
    let (status, body) = get(
        b.addr,
        &format!("/apps/{APP}/channels"),
        &[("filter_by_prefix", "presence-"), ("info", "user_count")],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({"channels":{"presence-one":{"user_count":2},"presence-two":{"user_count":1}}})
    );
    let (status, _) = get(
        b.addr,
        &format!("/apps/{APP}/channels"),
        &[("info", "user_count")],
    )
    .await;
    assert_eq!(status, 400);
    // An event's `info` counts users of the presence channels it reached.
    let body = json!({"name":"e","data":"{}","channels":["presence-one","lobby"],
        "info":"user_count,subscription_count"})
    .to_string();
    let path = format!("/apps/{APP}/events");
    let q = signed_query(
        KEY,
        SECRET.as_bytes(),
        ("POST", &path),
        &[],
        body.as_bytes(),
        now(),
    );
    let resp = reqwest::Client::new()
        .post(format!("http://{}{path}?{q}", b.addr))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let info: Value = resp.json().await.unwrap();
    assert_eq!(
        info,
        json!({"channels":{"presence-one":{"user_count":2,"subscription_count":3},
            "lobby":{"subscription_count":0}}})
    );
}

/// A Pusher-app node of a cluster on `redis`.
fn node(redis: &RedisServer, id: &str, prefix: &str) -> Broker {
    crate::cluster::node(redis, id, prefix, "")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_are_users_across_two_nodes() {
    let redis = RedisServer::start();
    let p = crate::cluster::prefix();
    let (a, b) = (node(&redis, "a", &p), node(&redis, "b", &p));
    crate::presence_cluster::up(&a).await;
    crate::presence_cluster::up(&b).await;
    let ch = "presence-cluster";
    let (mut ann, _) = member(a.addr, ch, "ann").await;
    let (_bob, listed) = member(b.addr, ch, "bob").await;
    assert_eq!(listed["ids"], json!(["ann", "bob"]), "{listed}");
    let (what, user, _) = member_event(&mut ann, ch).await;
    assert_eq!((what.as_str(), user.as_str()), ("added", "bob"));
    // Bob's second tab, on the other node: still one member.
    let (bob2, listed) = member(a.addr, ch, "bob").await;
    assert_eq!(listed["count"], 2, "{listed}");
    let (_cid, _) = member(b.addr, ch, "cid").await;
    let (what, user, _) = member_event(&mut ann, ch).await;
    assert_eq!((what.as_str(), user.as_str()), ("added", "cid"));
    assert_eq!(users(b.addr, ch).await, ["ann", "bob", "cid"]);
    drop(bob2);
    let (_dan, _) = member(b.addr, ch, "dan").await;
    let (what, user, _) = member_event(&mut ann, ch).await;
    assert_eq!(
        (what.as_str(), user.as_str()),
        ("added", "dan"),
        "one of bob's two tabs closing is no news"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cap_counts_users_across_the_cluster() {
    let redis = RedisServer::start();
    let p = crate::cluster::prefix();
    let app = r#"
        [[pusher.apps]]
        id = "1234"
        key = "app-key"
        secret = "tidegate-sample-pusher-secret"
        account = "acme"
        max_presence_members = 2
        "#;
    let a = crate::cluster::node(&redis, "a", &p, app);
    let b = crate::cluster::node(&redis, "b", &p, app);
    crate::presence_cluster::up(&a).await;
    crate::presence_cluster::up(&b).await;
    let ch = "presence-capped";
    let (_ann, _) = member(a.addr, ch, "ann").await;
    let (_bob, _) = member(b.addr, ch, "bob").await;
    // Ann's second tab, on the other node: no new member.
    let (_ann2, listed) = member(b.addr, ch, "ann").await;
    assert_eq!(listed["ids"], json!(["ann", "bob"]), "{listed}");
    // A third user, on either node: the channel is full.
    for at in [a.addr, b.addr] {
        let (mut cid, id) = connected(at).await;
        let refused = join(&mut cid, &id, ch, "cid").await;
        assert_eq!(refused["event"], "pusher:subscription_error", "{refused}");
        let data: Value = serde_json::from_str(refused["data"].as_str().unwrap()).unwrap();
        assert_eq!(
            (data["status"].clone(), data["error"].clone()),
            (json!(403), json!("presence_full"))
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_nodes_members_leave_within_the_lease() {
    let redis = RedisServer::start();
    let p = crate::cluster::prefix();
    let config = crate::process::shipped(&[
        ("mode = \"memory\"", "mode = \"redis\""),
        (
            "redis_url = \"redis://127.0.0.1:6379/\"",
            &format!("redis_url = \"{}\"", redis.url()),
        ),
        (
            "key_prefix = \"tidegate:\"",
            &format!("key_prefix = \"{p}\""),
        ),
        ("lease_ms = 10000", "lease_ms = 1000"),
        ("id = \"n1\"", "id = \"doomed\""),
    ]);
    let mut doomed = crate::process::Proc::start(&config).await;
    let a = node(&redis, "a", &p);
    crate::presence_cluster::up(&a).await;
    let ch = "presence-doomed";
    let (mut ann, _) = member(a.addr, ch, "ann").await;
    let (_zoe, listed) = member(doomed.addr(), ch, "zoe").await;
    assert_eq!(listed["ids"], json!(["ann", "zoe"]), "{listed}");
    let (what, user, _) = member_event(&mut ann, ch).await;
    assert_eq!((what.as_str(), user.as_str()), ("added", "zoe"));
    doomed.kill9().await;
    let killed = Instant::now();
    let (what, user, _) = member_event(&mut ann, ch).await;
    assert_eq!((what.as_str(), user.as_str()), ("removed", "zoe"));
    // The lease (1 s), the renewal tick that finds it ended (a third of
    // it) and one diff window (200 ms), with room for a loaded machine.
    let took = killed.elapsed();
    assert!(took < Duration::from_secs(4), "zoe left after {took:?}");
    assert_eq!(users(a.addr, ch).await, ["ann"]);
}
