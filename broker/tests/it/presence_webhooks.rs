//! `member.added` / `member.removed` (§13) against a real receiver: once per
//! user (not per connection), the removal after `vacated_delay_ms`, a
//! rejoin inside the delay sending neither, and across two nodes, once
//! for the cluster (on one real Redis and on a three-master Redis
//! Cluster).

use serde_json::json;

use crate::cluster::{bridge_up, node, prefix};
use crate::common::{Broker, Client};
use crate::receiver::Receiver;
use crate::redis_cluster::{Backend, on_both};
use crate::webhooks::hook;

on_both!(across_nodes_a_user_is_added_and_removed_once);

const NS: &str = "[namespaces.note]\npresence = true\n";

fn hooks(url: &str) -> String {
    format!(
        "{NS}{}",
        hook(
            "members",
            url,
            "events = [\"member.added\", \"member.removed\", \"message.published\"]\nvacated_delay_ms = 1000\nmax_in_flight = 1",
        )
    )
}

async fn member(b: &Broker, user: &str, channel: &str) -> Client {
    let token = b.token_with(user, &["note:*"], &[], None);
    let mut c = Client::connect(&b.ws_url(), &token).await.unwrap();
    c.next_json().await;
    let ack = c
        .call(json!({"type":"subscribe","channel":channel}), 1)
        .await;
    assert_eq!(ack["type"], "ack", "{ack}");
    c
}

#[tokio::test(flavor = "multi_thread")]
async fn added_once_per_user_removed_after_the_delay_and_a_rejoin_cancels() {
    let mut rx = Receiver::accepting();
    let b = Broker::start(&hooks(&rx.url));
    let one = member(&b, "ann", "note:w").await;
    let two = member(&b, "ann", "note:w").await;
    let added = rx.next().await;
    assert_eq!(added.body["type"], "member.added");
    assert_eq!(added.body["data"], json!({"channel":"note:w","user":"ann"}));
    // Both of Ann's connections go, and one comes back inside the delay.
    drop(one);
    drop(two);
    b.wait_sockets(0).await;
    let back = member(&b, "ann", "note:w").await;
    // A marker published after the delay has run out: nothing came before.
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    b.publish_http("note:w", json!("marker")).await;
    let next = rx.next().await;
    assert_eq!(next.body["type"], "message.published", "{:?}", next.body);
    // Now the last connection goes for good: removed after the delay.
    drop(back);
    let left = std::time::Instant::now();
    let removed = rx.next().await;
    assert_eq!(removed.body["type"], "member.removed");
    assert_eq!(
        removed.body["data"],
        json!({"channel":"note:w","user":"ann"})
    );
    assert!(removed.at.duration_since(left) >= std::time::Duration::from_secs(1));
    assert!(rx.drain().is_empty());
}

async fn across_nodes_a_user_is_added_and_removed_once(redis: &impl Backend) {
    let mut rx = Receiver::accepting();
    let p = prefix();
    let a = node(redis, "a", &p, &hooks(&rx.url));
    let b = node(redis, "b", &p, &hooks(&rx.url));
    bridge_up(&a, true).await;
    bridge_up(&b, true).await;
    let on_a = member(&a, "bob", "note:x").await;
    let added = rx.next().await;
    assert_eq!(added.body["type"], "member.added");
    let on_b = member(&b, "bob", "note:x").await;
    drop(on_a);
    a.wait_sockets(0).await;
    drop(on_b);
    let removed = rx.next().await;
    assert_eq!(removed.body["type"], "member.removed", "{:?}", removed.body);
    assert_eq!(
        removed.body["data"],
        json!({"channel":"note:x","user":"bob"})
    );
    a.publish_http("note:x", json!("marker")).await;
    let next = rx.next().await;
    assert_eq!(
        next.body["type"], "message.published",
        "one added, one removed: {:?}",
        next.body
    );
}
