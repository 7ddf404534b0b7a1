//! Issue 42: an SSE stream is admitted as the same subscriptions on
//! `/v1/ws` are. Past the connection's `max_subscriptions` it is 400
//! `too_many_subscriptions` (the code `/v1/ws` answers, §14's status)
//! whatever the names' length, never `bad_request`; that refusal, like a
//! forbidden or a bad channel, costs `costs.malformed`
//! (`admission::refusal_units`), charged to the account budget the
//! stream's frames would have reached. A stream's recovery reaches the
//! account budget as a socket's does.

use serde_json::json;
use tidegate::protocol::position::Position;

use crate::common::{Broker, Client, metric_value};
use crate::sse_client::{Refused, open};
use crate::subscription_price::{account_budget, charged_since, sse};

/// A plan of 3 subscriptions a connection, whose refused input costs 3
/// and whose account budget sees every unit at once.
const PLAN: &str = "[plans.free]\nmax_subscriptions = 3\naccount_burst = 1000\n\
                    account_messages_per_sec = 0.01\naccount_sample_every = 1\n\
                    [plans.free.costs]\nmalformed = 3\nsubscribe = 5\n";

/// A header of a refusal's head.
fn header(head: &str, name: &str) -> Option<u64> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case(name)
            .then(|| v.trim().parse().ok())?
    })
}

async fn refused(b: &Broker, token: &str, channels: &[String]) -> Refused {
    let query: String = channels.iter().map(|c| format!("&channel={c}")).collect();
    open(b.addr, &format!("/v1/sse?token={token}{query}"), &[])
        .await
        .err()
        .expect("refused")
}

#[actix_rt::test]
async fn over_the_cap_is_too_many_subscriptions_and_costs_malformed_from_the_account() {
    let b = Broker::start(PLAN);
    let token = b.token("acme");
    let four: Vec<String> = (1..=4).map(|i| format!("doc:{i}")).collect();
    let (status, body, head) = refused(&b, &token, &four).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("too_many_subscriptions")),
        "{body}"
    );
    assert_eq!(header(&head, "tidegate-cost"), Some(3), "{head}");
    let limit = header(&head, "x-ratelimit-limit").expect("the account's balance");
    assert_eq!(limit, 1000);
    assert_eq!(header(&head, "x-ratelimit-remaining"), Some(limit - 3));
    // A forbidden channel costs the same, from the same budget.
    let (status, body, head) = refused(&b, &token, &["secret:1".to_owned()]).await;
    assert_eq!((status, body["error"].as_str()), (403, Some("forbidden")));
    assert_eq!(header(&head, "x-ratelimit-remaining"), Some(limit - 6));
    // /v1/ws refuses the fourth subscribe with the same code.
    let mut ws = b.client("acme").await;
    for (id, c) in four.iter().enumerate() {
        let reply = ws
            .call(json!({"type":"subscribe","channel":c}), id as u64 + 1)
            .await;
        let want = if id < 3 { "ack" } else { "error" };
        assert_eq!(reply["type"], want, "{reply}");
        if id == 3 {
            assert_eq!(reply["code"], "too_many_subscriptions", "{reply}");
        }
    }
    let text = b.metrics().await;
    let refusals = |layer: &str| {
        metric_value(
            &text,
            &format!(
                r#"tidegate_rejections_total{{layer="{layer}",reason="too_many_subscriptions"}}"#
            ),
        )
    };
    assert_eq!((refusals("handshake"), refusals("connection")), (1.0, 1.0));
}

#[actix_rt::test]
async fn a_hundred_and_one_channels_of_14_bytes_are_too_many_not_too_long() {
    // The shipped plan: 100 subscriptions a connection.
    let b = Broker::start("");
    let token = b.token("acme");
    let names: Vec<String> = (0..101).map(|i| format!("doc:{i:010}")).collect();
    assert_eq!(names[0].len(), 14);
    let (status, body, _) = refused(&b, &token, &names).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("too_many_subscriptions")),
        "{body}"
    );
}

/// Three messages of 1,000 bytes on `channel`; the `seq` before them.
async fn three_kib(b: &Broker, channel: &str) -> u64 {
    let before = b.published(channel, json!("start")).await;
    for _ in 0..3 {
        b.published(channel, json!("r".repeat(1000))).await;
    }
    before
}

/// Issue 42: an SSE stream recovered 30.6 MB while its account budget
/// stayed at 200/200. A recovery's history (`recovery_per_kib` per
/// started KiB) reaches the account budget from a stream as from a
/// socket: the same `since` costs the account the same on both.
#[actix_rt::test]
async fn a_recovery_is_charged_to_the_account_on_sse_as_on_a_socket() {
    let b = Broker::start(
        "[plans.free]\nburst = 1000\naccount_burst = 100000\naccount_messages_per_sec = 0.01\n\
         account_sample_every = 1\n[plans.free.costs]\nsubscribe = 1\nrecovery = 0\n\
         recovery_per_kib = 1\nbudget = 0\n",
    );
    let since = three_kib(&b, "doc:r").await;
    // At least 3 started KiB of history, plus the subscription's 1.
    let at_least = 1 + 3;

    let ws_token = b.token("ws-acct");
    let before = account_budget(&b, &ws_token).await;
    let mut ws = Client::connect(&b.ws_url(), &ws_token).await.unwrap();
    let ack = ws
        .call(
            json!({"type":"subscribe","channel":"doc:r","since":since}),
            1,
        )
        .await;
    assert_eq!(ack["type"], "ack", "{ack}");
    let on_ws = charged_since(&b, &ws_token, before, at_least).await;

    let sse_token = b.token("sse-acct");
    let before = account_budget(&b, &sse_token).await;
    let mut position = Position::new(&["doc:r"]);
    position.set("doc:r", since);
    let mut s = sse(&b, &sse_token, &["doc:r"], Some(position.encode()))
        .await
        .expect("opened");
    assert!(s.event().await.is("welcome"));
    let on_sse = charged_since(&b, &sse_token, before, at_least).await;

    assert!(on_ws >= at_least, "{on_ws}");
    assert_eq!(on_sse, on_ws, "SSE and /v1/ws");
}
