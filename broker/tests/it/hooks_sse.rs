//! §15's hooks on `/v1/sse`: the subscribe hook decides the stream's
//! channels it covers before the stream starts (a refusal is the
//! response), dry run, and the tokenless connect with its server-side
//! channels in the welcome.

use serde_json::{Value, json};

use crate::common::Broker;
use crate::hooks_backend::{Backend, Reply};
use crate::sse_client::{Refused, Sse, open};

fn hooked(backend: &Backend, events: &str, extra: &str) -> Broker {
    Broker::start(&backend.hook(&format!(
        "events = [{events}]\nchannels = [\"doc:*\"]\n{extra}"
    )))
}

/// A stream with a token that allows only `chat:*`: on `doc:*` the hook
/// decides.
async fn try_stream(
    broker: &Broker,
    query: &str,
    headers: &[(&str, &str)],
) -> Result<Sse, Refused> {
    let token = broker.token_with("u1", &["chat:*"], &["chat:*"], None);
    open(
        broker.addr,
        &format!("/v1/sse?token={token}&{query}"),
        headers,
    )
    .await
}

/// Past `retry:`, the welcome's frame.
async fn welcome(s: &mut Sse) -> Value {
    assert!(s.next().await.unwrap().retry.is_some(), "retry first");
    let w = s.event().await;
    assert!(w.is("welcome"), "{w:?}");
    w.json()
}

fn retry_after(head: &str) -> Option<u64> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("retry-after")
            .then(|| v.trim().parse().unwrap())
    })
}

#[actix_rt::test]
async fn the_subscribe_hook_decides_a_streams_channels_before_it_starts() {
    let mut backend = Backend::start(|_| Reply::ok());
    let broker = hooked(&backend, "\"subscribe\"", "timeout_ms = 300");
    let mut s = try_stream(&broker, "channel=doc:1&channel=chat:1", &[])
        .await
        .expect("the hook allows what the token does not");
    let call = backend.call().await;
    assert_eq!(
        (
            call["event"].clone(),
            call["channel"].clone(),
            call["client"]["sub"].clone(),
            call["client"]["transport"].clone()
        ),
        (
            json!("subscribe"),
            json!("doc:1"),
            json!("u1"),
            json!("sse")
        )
    );
    welcome(&mut s).await;
    let seq = broker
        .publish_http("doc:1", json!("hi"))
        .await
        .json::<Value>()
        .await
        .unwrap()["seq"]
        .as_u64()
        .unwrap();
    assert_eq!(
        s.message().await,
        json!({"channel": "doc:1", "seq": seq, "data": "hi"})
    );
    assert_eq!(
        backend.calls(),
        1,
        "chat:1 is the token's: no call, and none again in the actor"
    );

    backend.answer(|_| Reply::error("not_member"));
    let (status, body, _) = try_stream(&broker, "channel=doc:2", &[])
        .await
        .err()
        .unwrap();
    assert_eq!(
        (status, body["error"].clone()),
        (403, json!("not_member")),
        "{body}"
    );
    assert_eq!(body["message"], "the backend says no");

    backend.answer(|_| Reply::Status(500));
    let (status, body, head) = try_stream(&broker, "channel=doc:3", &[])
        .await
        .err()
        .unwrap();
    assert_eq!(
        (status, body["error"].clone()),
        (503, json!("hook_unavailable")),
        "{body}"
    );
    assert!(retry_after(&head).is_some_and(|s| s >= 1), "{head}");
    assert!(body["retryAfterMs"].as_u64().is_some_and(|ms| ms >= 1));

    backend.answer(|_| Reply::disconnect(4403));
    let (status, body, _) = try_stream(&broker, "channel=doc:4", &[])
        .await
        .err()
        .unwrap();
    assert_eq!(
        (status, body["error"].clone()),
        (403, json!("forbidden")),
        "{body}"
    );
    assert_eq!(
        broker
            .metric("tidegate_rejections_total{layer=\"hook\",reason=\"not_member\"}")
            .await,
        1.0
    );
}

#[actix_rt::test]
async fn a_dry_run_hook_on_a_stream_is_compared_and_the_token_enforced() {
    let backend = Backend::start(|_| Reply::ok());
    let broker = hooked(&backend, "\"subscribe\"", "dry_run = true");
    let (status, body, _) = try_stream(&broker, "channel=doc:1", &[])
        .await
        .err()
        .unwrap();
    assert_eq!(
        (status, body["error"].clone()),
        (403, json!("forbidden")),
        "the token decides: {body}"
    );
    let series = "tidegate_hook_disagreements_total{hook=\"app\",event=\"subscribe\"}";
    let deadline = std::time::Instant::now() + crate::common::PATIENCE;
    while broker.metric(series).await < 1.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no disagreement counted"
        );
        tokio::task::yield_now().await;
    }
    assert_eq!(
        broker
            .node
            .metrics
            .hooks
            .calls("app", "subscribe", "allowed"),
        1
    );
}

#[actix_rt::test]
async fn a_tokenless_stream_is_named_by_the_connect_hook_with_its_channels() {
    let mut backend = Backend::start(|v| {
        if v["event"] == "connect" {
            Reply::result(json!({"sub": "ann", "subChannels": ["doc:*"], "channels": ["user:ann"]}))
        } else {
            Reply::ok()
        }
    });
    let broker = Broker::start(&backend.hook("events = [\"connect\"]"));
    let mut s = open(
        broker.addr,
        "/v1/sse?channel=doc:1",
        &[("Cookie", "sid=abc")],
    )
    .await
    .expect("the connect hook names the stream");
    let call = backend.call().await;
    assert_eq!(call["event"], "connect");
    assert_eq!(call["client"]["transport"], "sse");
    assert_eq!(call["headers"]["cookie"], "sid=abc");
    let w = welcome(&mut s).await;
    assert_eq!(w["account"], "ann", "{w}");
    assert_eq!(w["channels"][0]["channel"], "user:ann", "{w}");
    assert!(w["channels"][0]["seq"].as_u64().is_some(), "{w}");
    for channel in ["user:ann", "doc:1"] {
        let resp = broker.publish_http(channel, json!(channel)).await;
        assert_eq!(resp.status(), 200);
        let m = s.message().await;
        assert_eq!(
            (m["channel"].as_str(), m["data"].as_str()),
            (Some(channel), Some(channel))
        );
    }
    backend.answer(|_| Reply::error("no_session"));
    let (status, body, _) = open(broker.addr, "/v1/sse", &[("Cookie", "sid=old")])
        .await
        .err()
        .unwrap();
    assert_eq!(
        (status, body["error"].clone()),
        (403, json!("no_session")),
        "{body}"
    );
}
