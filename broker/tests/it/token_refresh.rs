//! A socket lives as long as its token (§2, §4): `welcome.tokenExpiresAt`,
//! close 4001 at `exp`, and the `refresh` frame that replaces the token on
//! the socket (same account, else `forbidden`; a bad token is
//! `bad_request` and the old one stays; the new one's plan and globs apply
//! from then on).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use tidegate::auth::{Claims, unix_now};

use crate::common::{Broker, Client};

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn claims(account: &str, exp: u64, sub: &[&str], plan: Option<&str>) -> Claims {
    Claims {
        sub: account.into(),
        exp,
        plan: plan.map(Into::into),
        role: None,
        sub_channels: sub.iter().map(|s| s.to_string()).collect(),
        pub_channels: vec!["doc:*".into()],
        info: None,
    }
}

async fn connect(b: &Broker, token: &str) -> (Client, Value) {
    let mut c = Client::connect(&b.ws_url(), token).await.unwrap();
    let welcome = c.next_json().await;
    assert_eq!(welcome["type"], "welcome", "{welcome}");
    (c, welcome)
}

/// Sockets closed with 4001 so far.
async fn expired_closes(b: &Broker) -> f64 {
    b.metric("tidegate_rejections_total{layer=\"connection\",reason=\"token_expired\"}")
        .await
}

/// Waits until the wall clock passes `unix_ms` (the token's own clock:
/// nothing else to wait on).
async fn until_wall_clock(unix_ms: u64) {
    let now = now_ms();
    if unix_ms > now {
        tokio::time::sleep(Duration::from_millis(unix_ms - now)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_whose_token_expires_is_closed_with_4001() {
    let b = Broker::start("");
    let exp = unix_now() + 2;
    let (mut c, welcome) = connect(&b, &b.mint(claims("acme", exp, &["doc:*"], None))).await;
    assert_eq!(welcome["tokenExpiresAt"], json!(exp * 1000), "{welcome}");
    assert_eq!(c.closed().await, Some(4001));
    assert!(
        now_ms() >= exp * 1000,
        "closed before the token's exp ({} < {})",
        now_ms(),
        exp * 1000
    );
    b.wait_sockets(0).await;
    assert_eq!(expired_closes(&b).await, 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refreshed_socket_outlives_its_first_token() {
    let b = Broker::start("");
    let exp = unix_now() + 2;
    let (mut c, _) = connect(&b, &b.mint(claims("acme", exp, &["doc:*"], None))).await;
    let later = unix_now() + 600;
    let fresh = b.mint(claims("acme", later, &["doc:*"], None));
    let ack = c.call(json!({"type":"refresh","token":fresh}), 5).await;
    assert_eq!(
        ack,
        json!({"type":"ack","id":5,"tokenExpiresAt":later * 1000})
    );
    // Past the first token's exp (and then some), the socket still answers.
    until_wall_clock(exp * 1000 + 1500).await;
    let budget = c.call(json!({"type":"budget"}), 6).await;
    assert_eq!(budget["type"], "budget", "{budget}");
    assert_eq!(expired_closes(&b).await, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_refresh_keeps_the_old_token_and_its_deadline() {
    let b = Broker::start("");
    let exp = unix_now() + 3;
    let (mut c, _) = connect(&b, &b.mint(claims("acme", exp, &["doc:*"], None))).await;
    let later = unix_now() + 600;

    let other = b.mint(claims("zeta", later, &["doc:*"], None));
    let e = c.call(json!({"type":"refresh","token":other}), 1).await;
    assert_eq!(
        (e["type"].as_str(), e["code"].as_str()),
        (Some("error"), Some("forbidden")),
        "{e}"
    );
    assert!(
        e["message"].as_str().unwrap().contains("same")
            || e["message"].as_str().unwrap().contains("this connection"),
        "{e}"
    );

    let foreign = tidegate::auth::Authenticator::new("some-other-secret-0123456789", 0)
        .unwrap()
        .mint(&claims("acme", later, &["doc:*"], None));
    for (id, token) in [
        (2, foreign.as_str()),
        (3, "not-a-jwt"),
        (4, &b.mint(claims("acme", unix_now() - 5, &["doc:*"], None))),
        (
            5,
            &b.mint(claims("acme", later, &["doc:*"], Some("platinum"))),
        ),
    ] {
        let e = c.call(json!({"type":"refresh","token":token}), id).await;
        assert_eq!(e["code"], "bad_request", "{e}");
        assert!(
            e["message"]
                .as_str()
                .unwrap()
                .contains("current token stays"),
            "{e}"
        );
    }
    // The old token still rules: the socket is closed at its exp.
    assert_eq!(c.closed().await, Some(4001));
    assert!(now_ms() >= exp * 1000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_refreshed_tokens_globs_apply_and_end_what_they_no_longer_allow() {
    let b = Broker::start("");
    let later = unix_now() + 600;
    let (mut c, _) = connect(
        &b,
        &b.mint(claims("acme", later, &["doc:*", "chat:*"], None)),
    )
    .await;
    for (id, channel) in [(1, "doc:1"), (2, "chat:1")] {
        let ack = c
            .call(json!({"type":"subscribe","channel":channel}), id)
            .await;
        assert_eq!(ack["type"], "ack", "{ack}");
    }
    let narrower = b.mint(claims("acme", later + 60, &["doc:*"], None));
    c.send(json!({"type":"refresh","token":narrower,"id":3}))
        .await;
    let mut ended = None;
    let mut acked = false;
    while ended.is_none() || !acked {
        let f = c.next_json().await;
        match f["type"].as_str() {
            Some("error") => ended = Some(f),
            Some("ack") => {
                assert_eq!(f["id"], 3);
                acked = true;
            }
            _ => panic!("unexpected {f}"),
        }
    }
    let ended = ended.unwrap();
    assert_eq!(
        (ended["code"].as_str(), ended["channel"].as_str()),
        (Some("forbidden"), Some("chat:1")),
        "{ended}"
    );
    assert!(
        ended.get("id").is_none(),
        "no request of the client's caused it"
    );
    // chat:1 is no longer delivered; doc:1 is. Published in that order, the
    // first message to arrive is doc:1's.
    assert_eq!(b.publish_http("chat:1", json!("gone")).await.status(), 200);
    assert_eq!(b.publish_http("doc:1", json!("kept")).await.status(), 200);
    let m = c.until(|f| f["type"] == "message").await;
    assert_eq!(
        (m["channel"].as_str(), &m["data"]),
        (Some("doc:1"), &json!("kept"))
    );
    let refused = c
        .call(json!({"type":"subscribe","channel":"chat:2"}), 4)
        .await;
    assert_eq!(refused["code"], "forbidden", "{refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_is_priced_and_its_plan_applies() {
    // A bucket that does not refill during the test, and a priced refresh.
    let b =
        Broker::start("[plans.free]\nmessages_per_sec = 0.001\n[plans.free.costs]\nrefresh = 2\n");
    let later = unix_now() + 600;
    let (mut c, _) = connect(&b, &b.mint(claims("acme", later, &["doc:*"], None))).await;
    let before = c.call(json!({"type":"budget"}), 1).await;
    assert_eq!(before["connection"]["remaining"], 20, "{before}");
    let same_plan = b.mint(claims("acme", later + 1, &["doc:*"], None));
    let ack = c.call(json!({"type":"refresh","token":same_plan}), 2).await;
    assert_eq!(ack["type"], "ack");
    let after = c.call(json!({"type":"budget"}), 3).await;
    assert_eq!(
        after["connection"]["remaining"], 18,
        "a refresh costs its price: {after}"
    );

    // A token with another plan: its limits from now on (balance kept).
    let pro = b.mint(claims("acme", later + 2, &["doc:*"], Some("pro")));
    let ack = c.call(json!({"type":"refresh","token":pro}), 4).await;
    assert_eq!(ack["type"], "ack", "{ack}");
    let pro_budget = c.call(json!({"type":"budget"}), 5).await;
    assert_eq!(pro_budget["connection"]["capacity"], 100, "{pro_budget}");
    assert_eq!(pro_budget["connection"]["refillPerSec"], 50, "{pro_budget}");
}

#[tokio::test]
async fn a_refresh_frame_without_a_token_is_a_bad_request() {
    let b = Broker::start("");
    let mut c = b.client("acme").await;
    let e = c.call(json!({"type":"refresh"}), 9).await;
    assert_eq!(
        (e["code"].as_str(), e["id"].as_u64()),
        (Some("bad_request"), Some(9))
    );
    assert!(e["message"].as_str().unwrap().contains("token"), "{e}");
    // The socket stays open.
    let budget = c.call(json!({"type":"budget"}), 10).await;
    assert_eq!(budget["type"], "budget");
}
