//! Issue 38, what a request's head may make the broker parse before its
//! credential: an SSE query string is read only once the §1 layers
//! admitted the caller (the per-IP rate and the token come first), in one
//! pass, keeping at most the channels the subscription cap allows; and a token's
//! `sub` (which names Redis keys, buckets and log lines) is bounded.

use tidegate::auth::{Claims, MAX_SUB_BYTES, unix_now};

use crate::common::Broker;
use crate::sse_client::open;

/// `channel=doc:0&channel=doc:1&...`: `n` distinct channels.
fn channels(n: usize) -> String {
    (0..n)
        .map(|i| format!("channel=doc:{i}"))
        .collect::<Vec<_>>()
        .join("&")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sse_query_of_thousands_of_channels_meets_the_cheap_checks_first() {
    let b = Broker::start("[handshake]\nip_handshake_burst = 3\nip_handshakes_per_sec = 0.001\n");
    let query = channels(3000);
    assert!(query.len() > 40_000);
    // Without a credential: the address's rate, then the token, refuse
    // it; the channels are never read.
    let mut outcomes = Vec::new();
    for _ in 0..5 {
        let (status, body, _) = open(b.addr, &format!("/v1/sse?{query}"), &[])
            .await
            .err()
            .expect("refused");
        outcomes.push((
            status,
            body["error"].as_str().unwrap_or_default().to_owned(),
        ));
    }
    let expected: Vec<(u16, String)> = [401, 401, 401, 429, 429]
        .into_iter()
        .zip([
            "unauthorized",
            "unauthorized",
            "unauthorized",
            "ip_rate_limited",
            "ip_rate_limited",
        ])
        .map(|(s, e)| (s, e.to_owned()))
        .collect();
    assert_eq!(outcomes, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admitted_sse_query_keeps_only_what_the_subscription_cap_allows() {
    let b = Broker::start("");
    let token = b.token("acme");
    // Thousands of distinct channels: refused at the first one past the
    // plan's `max_subscriptions` (checked before anything about the
    // position, issue 42).
    let (status, body, _) = open(
        b.addr,
        &format!("/v1/sse?token={token}&{}", channels(3000)),
        &[],
    )
    .await
    .err()
    .expect("refused");
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("too_many_subscriptions")),
        "{body}"
    );
    // Thousands of copies of one channel are one subscription.
    let same = vec!["channel=doc:1"; 3000].join("&");
    let mut s = open(b.addr, &format!("/v1/sse?token={token}&{same}"), &[])
        .await
        .expect("one channel, named 3,000 times");
    let welcome = s.event().await;
    assert!(welcome.is("welcome"), "{welcome:?}");
}

fn claims(sub: String) -> Claims {
    Claims {
        sub,
        exp: unix_now() + 600,
        plan: None,
        role: None,
        sub_channels: vec!["doc:*".into()],
        pub_channels: vec!["doc:*".into()],
        info: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_whose_sub_is_too_long_is_unauthorized_everywhere() {
    let b = Broker::start("");
    let long = b.mint(claims("a".repeat(MAX_SUB_BYTES + 1)));
    let longest = b.mint(claims("a".repeat(MAX_SUB_BYTES)));
    // The WebSocket handshake.
    let (status, body, _) = b.try_connect(&long).await.map(|_| ()).expect_err("refused");
    assert_eq!(
        (status, body["error"].as_str()),
        (401, Some("unauthorized")),
        "{body}"
    );
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("sub") && message.contains(&MAX_SUB_BYTES.to_string()),
        "{message}"
    );
    // A client publish and an SSE stream.
    let resp = reqwest::Client::new()
        .post(b.url("/v1/client/publish"))
        .bearer_auth(&long)
        .json(&serde_json::json!({"channel": "doc:1", "data": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    let (status, _, _) = open(b.addr, &format!("/v1/sse?token={long}&channel=doc:1"), &[])
        .await
        .err()
        .expect("refused");
    assert_eq!(status, 401);
    // At the limit, a token is accepted.
    let mut c = b
        .try_connect(&longest)
        .await
        .map_err(|e| e.0)
        .expect("admitted");
    assert_eq!(c.next_json().await["type"], "welcome");
}
