//! GraphQL `subscription { presence(channel) }` over `graphql-transport-ws`
//! (§12, §13), from a client speaking the protocol by hand: the members
//! as they stand first, then one `next` per window (coalesced per
//! `diff_ms` like a socket's diffs), empty diffs with the counts in
//! `extensions.presenceStats` past `join_leave_max_members`, the price,
//! the grants and the subscription cap; and an observer on a node with no
//! members of the channel (one Redis and a three-master Redis Cluster).

use serde_json::{Value, json};

use crate::cluster::{node, prefix};
use crate::common::{API_KEY, Broker, Client};
use crate::graphql_ws::{SUB, connected, next_for, subscribe};
use crate::presence_cluster::up;
use crate::presence_single::{conns, sorted};
use crate::redis_cluster::{Backend, on_both};

const PRESENCE: &str = "subscription($c: String!) { presence(channel: $c) { channel joins { connId info } leaves { connId } } }";

/// Two units: what the refusals are tested with (the bucket holds 200).
const CHEAP: &str = "subscription($c: String!) { presence(channel: $c) { channel } }";

on_both!(an_observer_on_a_node_without_members_gets_them_and_their_diffs);

fn broker(extra: &str) -> Broker {
    Broker::start(&format!(
        "[namespaces.note]\npresence = true\njoin_leave = true\n{extra}\n\
         [namespaces.quiet]\npresence = true\n"
    ))
}

fn token(b: &Broker, user: &str, channels: &[&str]) -> String {
    b.member_token(user, channels, Some(json!({ "name": user })))
}

/// A `/v1/ws` member of `channel` on `b`: the client and its connection
/// id.
async fn join(b: &Broker, user: &str, channel: &str) -> (Client, String) {
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

/// [`join`], once the member's own join's diff came (the window that
/// held it is closed).
async fn member(b: &Broker, user: &str, channel: &str) -> (Client, String) {
    let (mut c, conn) = join(b, user, channel).await;
    c.until(|v| v["type"] == "presence_diff" && conns(&v["joins"]).contains(&conn))
        .await;
    (c, conn)
}

/// The `data.presence` of a `next` for `id`.
async fn diff(c: &mut Client, id: &str) -> Value {
    let m = next_for(c, id).await;
    assert_eq!(m["type"], "next", "{m}");
    m["payload"]["data"]["presence"].clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_members_come_first_then_each_window_as_one_diff() {
    let b = broker("diff_ms = 1000");
    let (_ann, ca) = member(&b, "ann", "note:g").await;
    let mut g = connected(&b, API_KEY).await;
    subscribe(&mut g, "p", PRESENCE, json!({"c":"note:g"})).await;
    let first = next_for(&mut g, "p").await;
    assert_eq!(first["type"], "next", "{first}");
    assert_eq!(
        first["payload"]["data"]["presence"],
        json!({"channel":"note:g",
               "joins":[{"connId":ca,"info":{"name":"ann"}}],
               "leaves":[]})
    );
    // Priced as §12 prices a subscription: 1 + 1 + (1 + 50×2) + (1 + 50).
    assert_eq!(first["payload"]["extensions"]["rateLimit"]["cost"], 154);
    // Two joins in one window: one `next`.
    let (_bob, cb) = join(&b, "bob", "note:g").await;
    let (cid, cc) = join(&b, "cid", "note:g").await;
    let d = diff(&mut g, "p").await;
    assert_eq!(conns(&d["joins"]), sorted(vec![cb, cc.clone()]), "{d}");
    assert_eq!(d["leaves"], json!([]));
    drop(cid);
    let d = diff(&mut g, "p").await;
    assert_eq!(
        d,
        json!({"channel":"note:g","joins":[],"leaves":[{"connId":cc}]})
    );
    // Completed: the operation is gone and its id free again.
    g.send(json!({"type":"complete","id":"p"})).await;
    subscribe(&mut g, "p", PRESENCE, json!({"c":"note:g"})).await;
    let again = diff(&mut g, "p").await;
    assert_eq!(conns(&again["joins"]).len(), 2, "{again}");
}

#[tokio::test(flavor = "multi_thread")]
async fn past_the_threshold_the_diffs_are_empty_and_carry_the_counts() {
    let b = broker("diff_ms = 200\njoin_leave_max_members = 2");
    let mut g = connected(&b, API_KEY).await;
    subscribe(&mut g, "p", PRESENCE, json!({"c":"note:c"})).await;
    assert_eq!(diff(&mut g, "p").await["joins"], json!([]));
    let mut members = Vec::new();
    for i in 0..3 {
        let mut c = Client::connect(&b.ws_url(), &token(&b, &format!("u{i}"), &["note:*"]))
            .await
            .unwrap();
        c.next_json().await;
        let ack = c
            .call(json!({"type":"subscribe","channel":"note:c"}), 1)
            .await;
        assert_eq!(ack["type"], "ack", "{ack}");
        members.push(c);
    }
    let counts = g
        .until(|v| {
            v["id"] == "p" && v["payload"]["extensions"]["presenceStats"]["connections"] == 3
        })
        .await;
    assert_eq!(
        counts["payload"]["data"]["presence"],
        json!({"channel":"note:c","joins":[],"leaves":[]}),
        "no member list past the threshold: {counts}"
    );
    assert_eq!(counts["payload"]["extensions"]["presenceStats"]["users"], 3);
    // Back under the threshold: diffs again (both leaves, in one window
    // or two).
    members.truncate(1);
    let mut leaves = 0;
    while leaves < 2 {
        let back = g
            .until(|v| v["id"] == "p" && v["payload"]["extensions"]["presenceStats"].is_null())
            .await;
        let d = &back["payload"]["data"]["presence"];
        assert_eq!(d["joins"], json!([]), "{back}");
        leaves += d["leaves"].as_array().unwrap().len();
    }
    assert_eq!(leaves, 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn grants_presence_and_the_subscription_cap_refuse_one_operation() {
    let b = broker("[plans.free]\nmax_subscriptions = 2");
    // A token whose grants do not cover the channel.
    let mut t = connected(&b, &token(&b, "eve", &["doc:*"])).await;
    subscribe(&mut t, "f", CHEAP, json!({"c":"note:g"})).await;
    let e = next_for(&mut t, "f").await;
    assert_eq!(e["type"], "error", "{e}");
    assert_eq!(e["payload"][0]["extensions"]["code"], "FORBIDDEN");
    // One whose grants do: it watches (charged to its account).
    let mut ok = connected(&b, &token(&b, "eve", &["note:*"])).await;
    subscribe(&mut ok, "w", CHEAP, json!({"c":"note:g"})).await;
    let w = next_for(&mut ok, "w").await;
    assert_eq!(
        w["payload"]["data"]["presence"],
        json!({"channel":"note:g"}),
        "{w}"
    );
    assert_eq!(w["payload"]["extensions"]["rateLimit"]["cost"], 2, "{w}");
    // No presence, and presence without diffs: bad requests.
    let mut g = connected(&b, API_KEY).await;
    for (id, ch) in [("n", "doc:1"), ("q", "quiet:1")] {
        subscribe(&mut g, id, CHEAP, json!({"c":ch})).await;
        let e = next_for(&mut g, id).await;
        assert_eq!(e["type"], "error", "{e}");
        assert_eq!(e["payload"][0]["extensions"]["code"], "BAD_REQUEST", "{e}");
    }
    // Two running subscriptions, a presence one among them: the third is
    // refused and the socket stays open.
    subscribe(&mut g, "p", CHEAP, json!({"c":"note:g"})).await;
    assert_eq!(next_for(&mut g, "p").await["type"], "next");
    subscribe(&mut g, "m", SUB, json!({"c":"doc:1"})).await;
    crate::graphql_ws::live(&b, "doc:1", 1).await;
    subscribe(&mut g, "x", CHEAP, json!({"c":"note:h"})).await;
    let e = next_for(&mut g, "x").await;
    assert_eq!(e["type"], "error", "{e}");
    assert_eq!(
        e["payload"][0]["extensions"]["code"],
        "TOO_MANY_SUBSCRIPTIONS"
    );
    // Completing the presence one frees its place.
    g.send(json!({"type":"complete","id":"p"})).await;
    subscribe(&mut g, "y", CHEAP, json!({"c":"note:h"})).await;
    assert_eq!(next_for(&mut g, "y").await["type"], "next");
}

async fn an_observer_on_a_node_without_members_gets_them_and_their_diffs(redis: &impl Backend) {
    let p = prefix();
    let ns = "[namespaces.note]\npresence = true\njoin_leave = true\ndiff_ms = 100\n";
    let a = node(redis, "a", &p, ns);
    let b = node(redis, "b", &p, ns);
    up(&a).await;
    up(&b).await;
    let (ann, ca) = member(&a, "ann", "note:o").await;
    // Node b has nobody in the channel: its observer starts from Redis.
    let mut g = connected(&b, API_KEY).await;
    subscribe(&mut g, "p", PRESENCE, json!({"c":"note:o"})).await;
    assert_eq!(conns(&diff(&mut g, "p").await["joins"]), vec![ca.clone()]);
    let (_bob, cb) = member(&a, "bob", "note:o").await;
    let d = diff(&mut g, "p").await;
    assert_eq!(
        (conns(&d["joins"]), d["leaves"].clone()),
        (vec![cb], json!([]))
    );
    drop(ann);
    let d = diff(&mut g, "p").await;
    assert_eq!(d["leaves"], json!([{"connId": ca}]), "{d}");
}
