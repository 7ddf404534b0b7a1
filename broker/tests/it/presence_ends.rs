//! §13: a member lasts exactly as long as its subscription. Every path
//! that ends one ends the membership: a `refresh` whose token no longer
//! grants the channel, unsubscribe, the client's close, an operator's
//! kick and ban, an SSE stream that ends, a close after a reload turned
//! presence off, the drain (at once, not when the peer answers the close);
//! in a cluster also while the join still waits for Redis
//! (unsubscribed, refreshed away or closed meanwhile), where such a join
//! also counts toward `max_subscriptions`. Nothing is left behind: no
//! member in reads or toward `max_members`, no entry holding a closed
//! socket's outbox.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::admin::{admin_config, ban, disconnect};
use crate::cluster::{node, prefix};
use crate::common::{API_KEY, Broker, Client, PATIENCE, config};
use crate::presence_cluster::up;
use crate::presence_single::conns;
use crate::redis_server::RedisServer;

const NS: &str = "[namespaces.note]\npresence = true\njoin_leave = true\ndiff_ms = 50\n";

fn token(b: &Broker, user: &str, globs: &[&str]) -> String {
    b.member_token(user, globs, Some(json!({ "name": user })))
}

/// `user` connected to `b` and subscribed to `channel`: the client and
/// its connection id.
async fn member(b: &Broker, user: &str, channel: &str) -> (Client, String) {
    let mut c = Client::connect(&b.ws_url(), &token(b, user, &["note:*"]))
        .await
        .unwrap();
    let conn = c.next_json().await["connId"].as_str().unwrap().to_owned();
    let ack = c
        .call(json!({"type":"subscribe","channel":channel}), 1)
        .await;
    assert_eq!(ack["type"], "ack", "{ack}");
    (c, conn)
}

/// `GET /v1/presence` of `channel` on `b`.
async fn read(b: &Broker, channel: &str) -> Value {
    let resp = reqwest::Client::new()
        .get(b.url(&format!("/v1/presence?channel={channel}")))
        .bearer_auth(API_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    resp.json().await.unwrap()
}

/// Reads `channel` on `b` until its members are `want` (closes are seen
/// by the broker asynchronously), bounded by [`PATIENCE`].
async fn members_become(b: &Broker, channel: &str, want: &[&str]) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let r = read(b, channel).await;
        if conns(&r["members"]) == want && r["connections"] == want.len() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "members of {channel} stayed {r}, not {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Nothing left on `b`: no member counted, no channel entry (which would
/// hold a closed socket's outbox).
async fn nothing_left(b: &Broker) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let members = b.metric("tidegate_presence_members").await;
        let tracked = b.node.presence.tracked_channels();
        if members == 0.0 && tracked == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{members} members and {tracked} channel entries left"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refresh_that_no_longer_grants_the_channel_ends_the_membership() {
    let b = Broker::start(&format!("{NS}max_members = 1\n"));
    let (mut ann, _) = member(&b, "ann", "note:1").await;
    let fresh = token(&b, "ann", &["doc:*"]);
    ann.send(json!({"type":"refresh","token":fresh,"id":7}))
        .await;
    let ended = ann.until(|v| v["type"] == "error").await;
    assert_eq!(
        (&ended["code"], &ended["channel"]),
        (&json!("forbidden"), &json!("note:1"))
    );
    ann.until(|v| v["id"] == 7).await;
    // Gone at once, so the place it took is free for someone else.
    members_become(&b, "note:1", &[]).await;
    let (bob, idb) = member(&b, "bob", "note:1").await;
    members_become(&b, "note:1", &[&idb]).await;
    drop(ann);
    drop(bob);
    b.wait_sockets(0).await;
    nothing_left(&b).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn unsubscribe_close_kick_ban_an_ended_stream_and_a_reload_each_end_the_membership() {
    let b = Broker::start(&format!("{NS}{}", admin_config()));
    let (mut c, _) = member(&b, "u1", "note:a").await;
    let ack = c
        .call(json!({"type":"unsubscribe","channel":"note:a"}), 2)
        .await;
    assert_eq!(ack["type"], "ack");
    members_become(&b, "note:a", &[]).await;
    drop(c);

    let (c, id) = member(&b, "u2", "note:b").await;
    members_become(&b, "note:b", &[&id]).await;
    drop(c);
    members_become(&b, "note:b", &[]).await;

    let (mut c, id) = member(&b, "u3", "note:c").await;
    disconnect(&b, json!({"connId": id})).await;
    c.closed().await;
    drop(c);
    members_become(&b, "note:c", &[]).await;

    let (mut c, _) = member(&b, "u4", "note:d").await;
    ban(&b, json!({"account":"u4","ttlMs":60_000})).await;
    c.closed().await;
    drop(c);
    members_become(&b, "note:d", &[]).await;

    let path = format!(
        "/v1/sse?token={}&channel=note:e",
        token(&b, "u5", &["note:*"])
    );
    let stream = crate::sse_client::open(b.addr, &path, &[]).await.unwrap();
    let deadline = Instant::now() + PATIENCE;
    while read(&b, "note:e").await["connections"] != 1 {
        assert!(Instant::now() < deadline, "the stream never joined");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(stream);
    members_become(&b, "note:e", &[]).await;

    // Presence turned off for the namespace while a member is in: its
    // close still ends the membership it has.
    let (c, _) = member(&b, "u6", "note:f").await;
    let off = format!(
        "[namespaces.note]\npresence = false\njoin_leave = false\n{}",
        admin_config()
    );
    b.node.reload(config(&off)).expect("the reload applies");
    drop(c);
    b.wait_sockets(0).await;
    nothing_left(&b).await;
}

/// Two nodes on one Redis with presence on `note:`.
async fn cluster(redis: &RedisServer, p: &str, extra: &str) -> (Broker, Broker) {
    let a = node(redis, "a", p, &format!("{NS}{extra}"));
    let b = node(redis, "b", p, &format!("{NS}{extra}"));
    up(&a).await;
    up(&b).await;
    (a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_cluster_a_refresh_that_drops_the_grant_ends_the_membership_on_every_node() {
    let redis = RedisServer::start();
    let p = prefix();
    let (a, b) = cluster(&redis, &p, "").await;
    let (mut bob, idb) = member(&b, "bob", "note:r").await;
    let (mut ann, ida) = member(&a, "ann", "note:r").await;
    let mut both = vec![ida.as_str(), idb.as_str()];
    both.sort();
    members_become(&b, "note:r", &both).await;
    // Bob has heard Ann's join (else a join and a leave inside one window
    // would rightly be sent as neither).
    bob.until(|v| v["type"] == "presence_diff" && conns(&v["joins"]).contains(&ida))
        .await;
    let fresh = token(&a, "ann", &["doc:*"]);
    ann.call(json!({"type":"refresh","token":fresh}), 7).await;
    // Every node drops Ann, and Bob hears her leave.
    members_become(&b, "note:r", &[&idb]).await;
    members_become(&a, "note:r", &[&idb]).await;
    bob.until(|v| v["type"] == "presence_diff" && conns(&v["leaves"]).contains(&ida))
        .await;
    drop(ann);
    a.wait_sockets(0).await;
    nothing_left(&a).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ending_a_subscription_while_its_join_waits_for_redis_leaves_no_member() {
    let redis = RedisServer::start();
    let p = prefix();
    let (a, b) = cluster(&redis, &p, "").await;
    // Zoe keeps node a's lease on the channel renewed, so a member left
    // behind there would be renewed with it.
    let (_zoe, idz) = member(&a, "zoe", "note:p").await;
    members_become(&b, "note:p", &[&idz]).await;
    let sub = json!({"type":"subscribe","channel":"note:p","id":1});
    // Redis holds every script for a while (well within the command
    // timeout, so presence stays up): the joins below wait for it while
    // their subscriptions end.
    let mut admin = redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(600)
        .arg("WRITE")
        .query_async(&mut admin)
        .await
        .unwrap();
    // Unsubscribed before Redis answered the join.
    let mut x = Client::connect(&a.ws_url(), &token(&a, "xan", &["note:*"]))
        .await
        .unwrap();
    x.next_json().await;
    x.send(sub.clone()).await;
    x.send(json!({"type":"unsubscribe","channel":"note:p","id":2}))
        .await;
    x.until(|v| v["id"] == 2).await;
    // Refreshed to a token without the channel before Redis answered.
    let mut y = Client::connect(&a.ws_url(), &token(&a, "yan", &["note:*"]))
        .await
        .unwrap();
    y.next_json().await;
    y.send(sub.clone()).await;
    let fresh = token(&a, "yan", &["doc:*"]);
    y.send(json!({"type":"refresh","token":fresh,"id":2})).await;
    y.until(|v| v["id"] == 2 && v["type"] == "ack").await;
    // Closed (TCP dropped) before Redis answered.
    let mut z = Client::connect(&a.ws_url(), &token(&a, "zed", &["note:*"]))
        .await
        .unwrap();
    z.next_json().await;
    z.send(sub).await;
    drop(z);
    a.wait_sockets(3).await;
    // Only Zoe, on every node and in node a's own count.
    members_become(&b, "note:p", &[&idz]).await;
    members_become(&a, "note:p", &[&idz]).await;
    let deadline = Instant::now() + PATIENCE;
    while a.metric("tidegate_presence_members").await != 1.0 {
        assert!(
            Instant::now() < deadline,
            "node a still counts a member it lost"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribes_sent_while_presence_joins_wait_cannot_pass_max_subscriptions() {
    let redis = RedisServer::start();
    let p = prefix();
    let (a, _b) = cluster(&redis, &p, "[plans.free]\nmax_subscriptions = 3\n").await;
    let mut c = Client::connect(&a.ws_url(), &token(&a, "ann", &["note:*"]))
        .await
        .unwrap();
    c.next_json().await;
    // A burst: each join waits for Redis while the next subscribe comes.
    for i in 0..10 {
        c.send(json!({"type":"subscribe","channel":format!("note:s{i}"),"id":i}))
            .await;
    }
    let (mut acks, mut refused) = (0, 0);
    for _ in 0..10 {
        let v = c.until(|v| v.get("id").is_some()).await;
        match (v["type"].as_str(), v["code"].as_str()) {
            (Some("ack"), _) => acks += 1,
            (Some("error"), Some("too_many_subscriptions")) => refused += 1,
            _ => panic!("unexpected answer {v}"),
        }
    }
    assert_eq!(
        (acks, refused),
        (3, 7),
        "the cap counts joins still waiting"
    );
    let r = read(&a, "note:s0").await;
    assert_eq!(r["connections"], 1, "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_nodes_members_leave_when_their_sockets_close_not_with_its_lease() {
    let redis = RedisServer::start();
    let p = prefix();
    // A lease and a close timeout longer than the test's patience: only a
    // leave when the drain closes the sockets takes the members away in
    // time (not the peers' answers to the close, nor the lease).
    let config = |id: &str| {
        format!(
            "[node]\nid = \"{id}\"\n[cluster]\nmode = \"redis\"\nredis_url = \"{}\"\nkey_prefix = \"{p}\"\nlease_ms = 10000\n[socket]\nclose_timeout_ms = 30000\n{NS}",
            redis.url()
        )
    };
    let mut a = Broker::start(&config("a"));
    let b = Broker::start(&config("b"));
    up(&a).await;
    up(&b).await;
    let (_bob, idb) = member(&b, "bob", "note:dr").await;
    // Ann's sockets never read again: their close frames go unanswered.
    let mut anns = Vec::new();
    for i in 0..5 {
        anns.push(member(&a, &format!("ann{i}"), "note:dr").await);
    }
    a.begin_shutdown();
    members_become(&b, "note:dr", &[&idb]).await;
}
