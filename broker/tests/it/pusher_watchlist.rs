//! Pusher's watchlists and `user_authentication_timeout_s` (§16) against a
//! real broker: a signed-in user's watchlist is told its state, then who
//! comes online (first connection signed in) and goes offline (last one
//! gone), one user with two tabs being one; past 100 ids it is watched in
//! part with `pusher:error` 4302; across two nodes on a test-started Redis,
//! and a killed node's users going offline within the lease. A connection
//! not signed in within the app's timeout is closed 4009.

use serde_json::{Value, json};
use tidegate::pusher::sign::hmac_hex;

use crate::common::{Broker, Client};
use crate::pusher_api::{APP, KEY, SECRET, connected, pong};
use crate::redis_server::RedisServer;

/// `pusher:signin` as `user` watching `watchlist`, as `authenticateUser`
/// signs it; the answer.
async fn signin(c: &mut Client, socket_id: &str, user: &str, watchlist: &[&str]) -> Value {
    let user_data = json!({"id": user, "watchlist": watchlist}).to_string();
    let sig = hmac_hex(
        SECRET.as_bytes(),
        format!("{socket_id}::user::{user_data}").as_bytes(),
    );
    let data = json!({"auth": format!("{KEY}:{sig}"), "user_data": user_data});
    c.send(json!({"event":"pusher:signin","data":data})).await;
    c.next_json().await
}

/// A connection of `b` signed in as `user`, watching `watchlist`.
async fn user(b: &Broker, user: &str, watchlist: &[&str]) -> Client {
    let (mut c, id) = connected(b).await;
    let ok = signin(&mut c, &id, user, watchlist).await;
    assert_eq!(ok["event"], "pusher:signin_success", "{ok}");
    c
}

/// The next frame: `pusher_internal:watchlist_events`, as its
/// `(name, user_ids)` pairs.
async fn watchlist_events(c: &mut Client) -> Vec<(String, Vec<String>)> {
    let v = c.next_json().await;
    assert_eq!(v["event"], "pusher_internal:watchlist_events", "{v}");
    assert!(v.get("channel").is_none(), "{v}");
    let data: Value = serde_json::from_str(v["data"].as_str().unwrap()).unwrap();
    data["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let ids = e["user_ids"].as_array().unwrap();
            let ids = ids.iter().map(|i| i.as_str().unwrap().to_owned());
            (e["name"].as_str().unwrap().to_owned(), ids.collect())
        })
        .collect()
}

fn said(name: &str, ids: &[&str]) -> Vec<(String, Vec<String>)> {
    vec![(name.to_owned(), ids.iter().map(|i| i.to_string()).collect())]
}

#[tokio::test]
async fn a_watchlist_is_told_its_state_then_who_comes_online_and_goes_offline() {
    let b = Broker::start("");
    let bob = user(&b, "bob", &[]).await;
    let mut ann = user(&b, "ann", &["bob", "cid"]).await;
    // Its state as it is: bob online, cid not.
    assert_eq!(
        watchlist_events(&mut ann).await,
        [
            ("online".to_owned(), vec!["bob".to_owned()]),
            ("offline".to_owned(), vec!["cid".to_owned()])
        ]
    );
    // cid with two tabs is one user: online once.
    let cid1 = user(&b, "cid", &[]).await;
    assert_eq!(watchlist_events(&mut ann).await, said("online", &["cid"]));
    let mut cid2 = user(&b, "cid", &[]).await;
    // A user nobody watches is nobody's news.
    let _dan = user(&b, "dan", &[]).await;
    // One tab closes: still online; the last closes: offline.
    drop(cid1);
    assert_eq!(pong(&mut cid2).await["event"], "pusher:pong");
    drop(cid2);
    assert_eq!(watchlist_events(&mut ann).await, said("offline", &["cid"]));
    // Nothing was said in between (a tab's close would have come first).
    drop(bob);
    assert_eq!(watchlist_events(&mut ann).await, said("offline", &["bob"]));
    // Watching nobody, nothing is sent: bob's own connection never was.
    let mut bob = user(&b, "bob", &[]).await;
    assert_eq!(watchlist_events(&mut ann).await, said("online", &["bob"]));
    assert_eq!(pong(&mut bob).await["event"], "pusher:pong");
}

#[tokio::test]
async fn a_watchlist_past_100_ids_is_watched_in_part_and_said_so_4302() {
    let b = Broker::start("");
    let ids: Vec<String> = (0..120).map(|i| format!("u{i}")).collect();
    let mut list: Vec<&str> = ids.iter().map(String::as_str).collect();
    list.push("u0"); // a repeat is no entry of its own
    list.push(""); // nor is an empty id: left out
    let mut ann = user(&b, "ann", &list).await;
    let err = ann.next_json().await;
    assert_eq!(err["event"], "pusher:error", "{err}");
    assert_eq!(err["data"]["code"], 4302, "{err}");
    let told = watchlist_events(&mut ann).await;
    assert_eq!(told.len(), 1);
    assert_eq!(told[0].0, "offline");
    assert_eq!(told[0].1.len(), 100);
    assert_eq!(told[0].1[..2], ["u0", "u1"]);
    // The first 100 are watched, the rest are not.
    let _u110 = user(&b, "u110", &[]).await;
    let _u99 = user(&b, "u99", &[]).await;
    assert_eq!(watchlist_events(&mut ann).await, said("online", &["u99"]));
}

#[tokio::test]
async fn a_connection_not_signed_in_within_the_apps_timeout_is_closed_4009() {
    let b = Broker::start(&format!(
        "[[pusher.apps]]\nid = \"{APP}\"\nkey = \"{KEY}\"\nsecret = \"{SECRET}\"\naccount = \"acme\"\nuser_authentication_timeout_s = 1\n"
    ));
    let mut signed = user(&b, "ann", &[]).await;
    let (mut unsigned, _) = connected(&b).await;
    assert_eq!(unsigned.closed().await, Some(4009));
    // Opened first, its timeout rang first: signed in, it stays.
    assert_eq!(pong(&mut signed).await["event"], "pusher:pong");
}

#[test]
fn check_config_refuses_a_user_authentication_timeout_past_an_hour() {
    let dir = std::env::temp_dir().join(format!("tidegate-watch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("pusher.toml");
    let app = format!(
        "[[pusher.apps]]\nid = \"{APP}\"\nkey = \"{KEY}\"\nsecret = \"{SECRET}\"\nplan = \"free\"\naccount = \"acme\"\nuser_authentication_timeout_s = 3601\n"
    );
    std::fs::write(&file, app).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tidegate"))
        .arg("check-config")
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let want = "user_authentication_timeout_s: at most 3600";
    assert!(err.contains(want), "missing {want:?} in:\n{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn online_status_spans_two_nodes() {
    let redis = RedisServer::start();
    let prefix = crate::cluster::prefix();
    let (a, b) = crate::cluster::two_nodes(&redis, &prefix, "").await;
    let bob_b = user(&b, "bob", &[]).await;
    let mut ann_a = user(&a, "ann", &["bob", "cid"]).await;
    assert_eq!(
        watchlist_events(&mut ann_a).await,
        [
            ("online".to_owned(), vec!["bob".to_owned()]),
            ("offline".to_owned(), vec!["cid".to_owned()])
        ]
    );
    // cid on both nodes is one user.
    let cid_b = user(&b, "cid", &[]).await;
    assert_eq!(watchlist_events(&mut ann_a).await, said("online", &["cid"]));
    let mut cid_a = user(&a, "cid", &[]).await;
    drop(cid_b);
    assert_eq!(pong(&mut cid_a).await["event"], "pusher:pong");
    drop(cid_a);
    assert_eq!(
        watchlist_events(&mut ann_a).await,
        said("offline", &["cid"])
    );
    drop(bob_b);
    assert_eq!(
        watchlist_events(&mut ann_a).await,
        said("offline", &["bob"])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_nodes_users_go_offline_within_the_lease() {
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
    let a = crate::cluster::node(&redis, "a", &p, "");
    crate::cluster::bridge_up(&a, true).await;
    let mut ann = user(&a, "ann", &["zoe"]).await;
    assert_eq!(watchlist_events(&mut ann).await, said("offline", &["zoe"]));
    let url = format!("ws://{}/app/{KEY}?protocol=7", doomed.addr());
    let (ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    let mut zoe = Client::new(ws, None);
    let hello = zoe.next_json().await;
    let hello: Value = serde_json::from_str(hello["data"].as_str().unwrap()).unwrap();
    let ok = signin(&mut zoe, hello["socket_id"].as_str().unwrap(), "zoe", &[]).await;
    assert_eq!(ok["event"], "pusher:signin_success", "{ok}");
    assert_eq!(watchlist_events(&mut ann).await, said("online", &["zoe"]));
    // No goodbye from the node: its lease runs out and ann is told.
    doomed.kill9().await;
    assert_eq!(watchlist_events(&mut ann).await, said("offline", &["zoe"]));
}
