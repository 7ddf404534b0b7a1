//! §13 on one node, over real sockets: joins and leaves coalesced into one
//! `presence_diff` per window, counts instead of diffs past the threshold,
//! `presence_full`, the `info` claim's bound, priced reads over the socket
//! and `GET /v1/presence`.

use serde_json::{Value, json};

use crate::common::{API_KEY, Broker, Client};

/// A presence namespace `note:` with diffs; `extra` adds keys to it.
fn broker(extra: &str) -> Broker {
    Broker::start(&format!(
        "[namespaces.note]\npresence = true\njoin_leave = true\n{extra}\n"
    ))
}

fn token(b: &Broker, user: &str, info: Option<Value>) -> String {
    b.member_token(user, &["note:*", "doc:*"], info)
}

async fn join(b: &Broker, user: &str, channel: &str) -> (Client, String) {
    let mut c = Client::connect(&b.ws_url(), &token(b, user, Some(json!({"name": user}))))
        .await
        .unwrap();
    let welcome = c.next_json().await;
    let conn = welcome["connId"].as_str().unwrap().to_owned();
    let ack = c
        .call(json!({"type":"subscribe","channel":channel}), 1)
        .await;
    assert_eq!(ack["type"], "ack", "{ack}");
    (c, conn)
}

/// The `connId`s of a member list, sorted (shared by the presence tests).
pub(crate) fn conns(list: &Value) -> Vec<String> {
    let mut v: Vec<String> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["connId"].as_str().unwrap().to_owned())
        .collect();
    v.sort();
    v
}

pub(crate) fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread")]
async fn joins_in_one_window_arrive_as_one_diff_and_leaves_follow() {
    let b = broker("diff_ms = 1000");
    let (mut a, ca) = join(&b, "ann", "note:1").await;
    let (_bb, cb) = join(&b, "bob", "note:1").await;
    let (cc, ccid) = join(&b, "cid", "note:1").await;
    let (dd, cd) = join(&b, "dan", "note:1").await;
    // Every join of the window, A's own included, in one frame.
    let diff = a.until(|v| v["type"] == "presence_diff").await;
    assert_eq!(diff["channel"], "note:1");
    assert_eq!(
        conns(&diff["joins"]),
        sorted(vec![ca.clone(), cb.clone(), ccid.clone(), cd.clone()]),
        "{diff}"
    );
    assert_eq!(diff["leaves"], json!([]));
    let ann = diff["joins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["connId"] == ca.as_str())
        .unwrap();
    assert_eq!(ann["user"], "ann");
    assert_eq!(ann["info"], json!({"name": "ann"}));
    // Two closes: one diff with both leaves.
    drop(cc);
    drop(dd);
    let diff = a.until(|v| v["type"] == "presence_diff").await;
    assert_eq!(conns(&diff["leaves"]), sorted(vec![ccid, cd]), "{diff}");
    assert_eq!(diff["joins"], json!([]));
    let read = a
        .call(json!({"type":"presence","channel":"note:1"}), 7)
        .await;
    assert_eq!(read["type"], "presence", "{read}");
    assert_eq!(conns(&read["members"]), sorted(vec![ca, cb]));
    assert_eq!(
        (read["users"].clone(), read["connections"].clone()),
        (json!(2), json!(2))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_member_that_joins_and_leaves_inside_a_window_is_in_neither_list() {
    let b = broker("diff_ms = 1000");
    let (mut a, ca) = join(&b, "ann", "note:2").await;
    let (mut e, _) = join(&b, "eve", "note:2").await;
    let ack = e
        .call(json!({"type":"unsubscribe","channel":"note:2"}), 2)
        .await;
    assert_eq!(ack["type"], "ack");
    let diff = a.until(|v| v["type"] == "presence_diff").await;
    assert_eq!(conns(&diff["joins"]), vec![ca], "{diff}");
    assert_eq!(diff["leaves"], json!([]));
}

#[tokio::test(flavor = "multi_thread")]
async fn reads_are_sorted_bounded_and_need_permission() {
    let b = broker("");
    let (mut a, _) = join(&b, "zed", "note:3").await;
    let (_b1, _) = join(&b, "amy", "note:3").await;
    let (_b2, _) = join(&b, "amy", "note:3").await;
    let read = a
        .call(json!({"type":"presence","channel":"note:3","limit":2}), 3)
        .await;
    let members = read["members"].as_array().unwrap();
    assert_eq!(members.len(), 2, "{read}");
    assert_eq!(
        (members[0]["user"].clone(), members[1]["user"].clone()),
        (json!("amy"), json!("amy"))
    );
    assert!(members[0]["connId"].as_str() < members[1]["connId"].as_str());
    assert_eq!(
        (read["users"].clone(), read["connections"].clone()),
        (json!(2), json!(3))
    );
    assert!(
        read.get("partial").is_none(),
        "one node is never partial: {read}"
    );
    let stats = a
        .call(json!({"type":"presence_stats","channel":"note:3"}), 4)
        .await;
    assert_eq!(
        stats,
        json!({"type":"presence_stats","id":4,"channel":"note:3","users":2,"connections":3})
    );
    // Not a presence namespace; outside the token's globs; a limit too big.
    let e = a
        .call(json!({"type":"presence","channel":"doc:1"}), 5)
        .await;
    assert_eq!(e["code"], "bad_request", "{e}");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("presence is not enabled")
    );
    let e = a
        .call(json!({"type":"presence","channel":"other:1"}), 6)
        .await;
    assert_eq!(e["code"], "forbidden", "{e}");
    let e = a
        .call(
            json!({"type":"presence","channel":"note:3","limit":1001}),
            7,
        )
        .await;
    assert_eq!(e["code"], "bad_request", "{e}");
}

#[tokio::test(flavor = "multi_thread")]
async fn past_the_threshold_subscribers_get_counts_not_diffs() {
    let b = broker("diff_ms = 500\njoin_leave_max_members = 2");
    let (mut a, _) = join(&b, "u0", "note:4").await;
    let mut others = Vec::new();
    for i in 1..5 {
        others.push(join(&b, &format!("u{i}"), "note:4").await);
    }
    let frame = a
        .until(|v| v["type"] == "presence_diff" || v["type"] == "presence_stats")
        .await;
    assert_eq!(
        frame,
        json!({"type":"presence_stats","channel":"note:4","users":5,"connections":5}),
        "five members, threshold two: counts, not a diff"
    );
    // A leave while still above the threshold: counts again, never a diff.
    others.pop();
    let frame = a
        .until(|v| v["type"] == "presence_diff" || v["type"] == "presence_stats")
        .await;
    assert_eq!(frame["type"], "presence_stats", "{frame}");
    assert_eq!(frame["connections"], 4);
    // Below the threshold again: diffs resume.
    others.truncate(1);
    let frame = a
        .until(|v| {
            (v["type"] == "presence_stats" && v["connections"] == 2) || v["type"] == "presence_diff"
        })
        .await;
    assert_eq!(frame["type"], "presence_diff", "{frame}");
    assert_eq!(frame["leaves"].as_array().unwrap().len(), 2, "{frame}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_channel_refuses_with_presence_full_and_keeps_the_socket() {
    let b = broker("max_members = 2");
    let (_a, _) = join(&b, "a", "note:5").await;
    let (_b, _) = join(&b, "b", "note:5").await;
    let mut c = Client::connect(&b.ws_url(), &token(&b, "c", None))
        .await
        .unwrap();
    c.next_json().await;
    let e = c
        .call(json!({"type":"subscribe","channel":"note:5"}), 9)
        .await;
    assert_eq!(e["type"], "error", "{e}");
    assert_eq!(
        (e["code"].clone(), e["retryAfterMs"].clone()),
        (json!("presence_full"), json!(0))
    );
    assert_eq!(e["channel"], "note:5");
    let stats = c
        .call(json!({"type":"presence_stats","channel":"note:5"}), 10)
        .await;
    assert_eq!(
        stats["connections"], 2,
        "still open and not counted: {stats}"
    );
    let ok = c
        .call(json!({"type":"subscribe","channel":"note:6"}), 11)
        .await;
    assert_eq!(ok["type"], "ack");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_info_claim_is_a_small_object_or_the_handshake_is_refused() {
    let b = broker("");
    for info in [json!("ann"), json!({"x": "y".repeat(1100)})] {
        let (status, body, _) = b
            .try_connect(&token(&b, "ann", Some(info)))
            .await
            .err()
            .unwrap();
        assert_eq!(
            (status, body["error"].clone()),
            (401, json!("unauthorized"))
        );
        assert!(body["message"].as_str().unwrap().contains("info"), "{body}");
    }
    let ok = json!({"name": "n".repeat(1000)});
    assert!(b.try_connect(&token(&b, "ann", Some(ok))).await.is_ok());
}

#[tokio::test(flavor = "multi_thread")]
async fn reads_are_priced_per_started_hundred_of_limit() {
    // max_single 20: a read of 700 costs 21 and is refused before any
    // bucket is touched; 600 costs 18 and goes through.
    let b = broker("\n[plans.free.costs]\npresence = 3\npresence_stats = 25");
    let (mut a, _) = join(&b, "ann", "note:7").await;
    let ok = a
        .call(json!({"type":"presence","channel":"note:7","limit":600}), 1)
        .await;
    assert_eq!(ok["type"], "presence", "{ok}");
    let e = a
        .call(json!({"type":"presence","channel":"note:7","limit":700}), 2)
        .await;
    assert_eq!(e["code"], "cost_exceeds_max", "{e}");
    assert!(e["message"].as_str().unwrap().contains("21"), "{e}");
    let e = a
        .call(json!({"type":"presence_stats","channel":"note:7"}), 3)
        .await;
    assert_eq!(e["code"], "cost_exceeds_max", "{e}");
}

#[tokio::test(flavor = "multi_thread")]
async fn http_presence_answers_a_key_and_charges_its_bucket() {
    let b = broker("");
    let (_a, ca) = join(&b, "ann", "note:8").await;
    let http = reqwest::Client::new();
    let get = |q: &str| {
        http.get(b.url(&format!("/v1/presence?{q}")))
            .bearer_auth(API_KEY)
            .send()
    };
    let resp = get("channel=note:8&limit=1000").await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["tidegate-cost"], "10");
    assert!(resp.headers().contains_key("x-ratelimit-remaining"));
    let body: Value = resp.json().await.unwrap();
    assert_eq!(
        body,
        json!({"type":"presence","channel":"note:8",
               "members":[{"user":"ann","connId":ca,"info":{"name":"ann"}}],
               "users":1,"connections":1})
    );
    for (q, status, code) in [
        ("channel=doc:1", 400, "bad_request"),
        ("channel=note:8&limit=0", 400, "bad_request"),
        ("limit=5", 400, "bad_request"),
        ("channel=bad%20name", 400, "bad_request"),
    ] {
        let resp = get(q).await.unwrap();
        assert_eq!(resp.status(), status, "{q}");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["error"], code, "{q}: {body}");
    }
    let resp = http
        .get(b.url("/v1/presence?channel=note:8"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
}
