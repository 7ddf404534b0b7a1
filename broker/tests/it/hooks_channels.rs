//! §15's `subscribe`, `publish` and `rpc` hooks on `/v1/ws`: each answer,
//! a failure under `deny` and `allow`, the idempotent publish called once,
//! and dry run.

use serde_json::json;

use crate::common::Broker;
use crate::hooks_backend::{Backend, Reply};

/// A client whose token allows only `chat:*`: on `doc:*` the hook decides.
async fn client(broker: &Broker, account: &str) -> crate::common::Client {
    let token = broker.token_with(account, &["chat:*"], &["chat:*"], None);
    let mut c = crate::common::Client::connect(&broker.ws_url(), &token)
        .await
        .unwrap();
    assert_eq!(c.next_json().await["type"], "welcome");
    c
}

fn hooked(backend: &Backend, events: &str, extra: &str) -> Broker {
    Broker::start(&backend.hook(&format!(
        "events = [{events}]\nchannels = [\"doc:*\"]\n{extra}"
    )))
}

#[actix_rt::test]
async fn the_subscribe_hook_replaces_the_tokens_globs_with_its_answers() {
    let mut backend = Backend::start(|_| Reply::ok());
    let broker = hooked(&backend, "\"subscribe\"", "timeout_ms = 300");
    let mut c = client(&broker, "u1").await;
    let ack = c
        .call(json!({"type": "subscribe", "channel": "doc:1"}), 1)
        .await;
    assert_eq!(
        ack["type"], "ack",
        "the hook allows what the token does not: {ack}"
    );
    let call = backend.call().await;
    assert_eq!(
        (
            call["event"].clone(),
            call["channel"].clone(),
            call["client"]["sub"].clone()
        ),
        (json!("subscribe"), json!("doc:1"), json!("u1"))
    );
    backend.answer(|_| Reply::error("not_member"));
    let e = c
        .call(json!({"type": "subscribe", "channel": "doc:2"}), 2)
        .await;
    assert_eq!(
        (e["type"].clone(), e["code"].clone()),
        (json!("error"), json!("not_member")),
        "{e}"
    );
    assert_eq!(e["channel"], "doc:2");
    backend.answer(|_| Reply::Status(500));
    let e = c
        .call(json!({"type": "subscribe", "channel": "doc:3"}), 3)
        .await;
    assert_eq!(e["code"], "hook_unavailable", "{e}");
    assert!(e["retryAfterMs"].as_u64().is_some_and(|ms| ms >= 1));
    // A channel no hook covers: the token decides, no call.
    let before = backend.calls();
    let ack = c
        .call(json!({"type": "subscribe", "channel": "chat:1"}), 4)
        .await;
    assert_eq!(ack["type"], "ack");
    assert_eq!(backend.calls(), before);
    backend.answer(|_| Reply::disconnect(4403));
    c.send(json!({"type": "subscribe", "channel": "doc:4", "id": 5}))
        .await;
    assert_eq!(c.closed().await, Some(4403));
}

#[actix_rt::test]
async fn a_failed_subscribe_under_allow_is_allowed() {
    let backend = Backend::start(|_| Reply::Junk);
    let broker = hooked(&backend, "\"subscribe\"", "on_error = \"allow\"");
    let mut c = client(&broker, "u1").await;
    let ack = c
        .call(json!({"type": "subscribe", "channel": "doc:1"}), 1)
        .await;
    assert_eq!(ack["type"], "ack", "{ack}");
    assert_eq!(
        broker
            .node
            .metrics
            .hooks
            .calls("app", "subscribe", "failed"),
        1
    );
}

#[actix_rt::test]
async fn the_publish_hook_checks_and_rewrites_and_a_duplicate_key_is_not_asked_again() {
    let mut backend = Backend::start(|_| Reply::result(json!({"data": {"clean": true}})));
    let broker = hooked(&backend, "\"publish\"", "");
    let mut reader = broker.client("reader").await;
    reader
        .call(json!({"type": "subscribe", "channel": "doc:1"}), 1)
        .await;
    let mut c = client(&broker, "u1").await;
    let ack = c
        .call(
            json!({"type": "publish", "channel": "doc:1", "data": {"dirty": 1}, "key": "k1"}),
            2,
        )
        .await;
    assert_eq!(ack["type"], "ack", "{ack}");
    let call = backend.call().await;
    assert_eq!(call["data"], json!({"dirty": 1}));
    let msg = reader.until(|f| f["type"] == "message").await;
    assert_eq!(
        msg["data"],
        json!({"clean": true}),
        "published as the hook rewrote it"
    );
    let again = c
        .call(
            json!({"type": "publish", "channel": "doc:1", "data": {"dirty": 1}, "key": "k1"}),
            3,
        )
        .await;
    assert_eq!(
        (again["seq"].clone(), again["duplicate"].clone()),
        (ack["seq"].clone(), json!(true))
    );
    assert_eq!(
        backend.calls(),
        1,
        "a duplicate gets the first answer without a call"
    );
    backend.answer(|_| Reply::error("spam"));
    let e = c
        .call(
            json!({"type": "publish", "channel": "doc:1", "data": "buy now"}),
            4,
        )
        .await;
    assert_eq!(e["code"], "spam", "{e}");
}

#[actix_rt::test]
async fn rpc_is_answered_by_the_backend_or_unknown_method_without_a_hook() {
    let mut backend =
        Backend::start(|v| Reply::result(json!({"data": {"echo": v["data"], "m": v["method"]}})));
    let broker = hooked(&backend, "\"rpc\"", "");
    let mut c = client(&broker, "u1").await;
    let reply = c
        .call(json!({"type": "rpc", "method": "sum", "data": [1, 2]}), 7)
        .await;
    assert_eq!(
        reply,
        json!({"type": "rpc", "id": 7, "data": {"echo": [1, 2], "m": "sum"}})
    );
    assert_eq!(backend.call().await["event"], "rpc");
    backend.answer(|_| Reply::error("no_such_method"));
    let e = c.call(json!({"type": "rpc", "method": "x"}), 8).await;
    assert_eq!(e["code"], "no_such_method");
    let plain = Broker::start("");
    let mut c = plain.client("u1").await;
    let e = c.call(json!({"type": "rpc", "method": "x"}), 9).await;
    assert_eq!(
        (e["type"].clone(), e["code"].clone()),
        (json!("error"), json!("unknown_method"))
    );
}

#[actix_rt::test]
async fn a_dry_run_hook_is_compared_and_the_token_enforced() {
    let backend = Backend::start(|_| Reply::ok());
    let broker = hooked(&backend, "\"subscribe\"", "dry_run = true");
    let mut c = client(&broker, "u1").await;
    let e = c
        .call(json!({"type": "subscribe", "channel": "doc:1"}), 1)
        .await;
    assert_eq!(e["code"], "forbidden", "the token decides: {e}");
    let metrics = &broker.node.metrics.hooks;
    let deadline = std::time::Instant::now() + crate::common::PATIENCE;
    while broker
        .metric("tidegate_hook_disagreements_total{hook=\"app\",event=\"subscribe\"}")
        .await
        < 1.0
    {
        assert!(
            std::time::Instant::now() < deadline,
            "no disagreement counted"
        );
        tokio::task::yield_now().await;
    }
    assert_eq!(metrics.calls("app", "subscribe", "allowed"), 1);
}

#[actix_rt::test]
async fn a_subscribe_unsubscribed_while_its_hook_is_asked_does_not_happen() {
    let mut backend = Backend::start(|_| Reply::ok());
    backend.close_gate();
    let broker = hooked(&backend, "\"subscribe\"", "timeout_ms = 10000");
    let mut c = client(&broker, "u1").await;
    c.send(json!({"type": "subscribe", "channel": "doc:1", "id": 1}))
        .await;
    backend.call().await;
    let ack = c
        .call(json!({"type": "unsubscribe", "channel": "doc:1"}), 2)
        .await;
    assert_eq!(ack["type"], "ack");
    c.send(json!({"type": "subscribe", "channel": "doc:1", "id": 3}))
        .await;
    backend.open();
    // Answers on one channel apply in frame order: 1 (dropped), then 3.
    let mut seen = Vec::new();
    loop {
        let f = c.next_json().await;
        seen.push(f["id"].clone());
        if f["id"] == 3 {
            assert_eq!(f["type"], "ack", "{f}");
            break;
        }
    }
    assert_eq!(seen, vec![json!(3)], "the first subscribe was not acked");
}

#[actix_rt::test]
async fn a_dry_run_publish_hook_is_compared_and_the_token_enforced() {
    let mut backend = Backend::start(|_| Reply::error("spam"));
    let broker = hooked(&backend, "\"publish\"", "dry_run = true");
    let mut reader = broker.client("reader").await;
    reader
        .call(json!({"type": "subscribe", "channel": "doc:1"}), 1)
        .await;
    // The token allows doc:1, the hook refuses: published as sent.
    let token = broker.token_with("u1", &["doc:*"], &["doc:1"], None);
    let mut c = crate::common::Client::connect(&broker.ws_url(), &token)
        .await
        .unwrap();
    assert_eq!(c.next_json().await["type"], "welcome");
    let ack = c
        .call(
            json!({"type": "publish", "channel": "doc:1", "data": "as sent"}),
            2,
        )
        .await;
    assert_eq!(ack["type"], "ack", "the token decides: {ack}");
    let msg = reader.until(|f| f["type"] == "message").await;
    assert_eq!(msg["data"], "as sent");
    // The dry-run call is made in the background: answered before the
    // script changes.
    assert_eq!(backend.call().await["data"], "as sent");
    // The token refuses doc:2, the hook allows: forbidden.
    backend.answer(|_| Reply::ok());
    let e = c
        .call(json!({"type": "publish", "channel": "doc:2", "data": 1}), 3)
        .await;
    assert_eq!(e["code"], "forbidden", "the token decides: {e}");
    let series = "tidegate_hook_disagreements_total{hook=\"app\",event=\"publish\"}";
    let deadline = std::time::Instant::now() + crate::common::PATIENCE;
    while broker.metric(series).await < 2.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "both disagreements were not counted"
        );
        tokio::task::yield_now().await;
    }
    let hooks = &broker.node.metrics.hooks;
    assert_eq!(
        (
            hooks.calls("app", "publish", "refused"),
            hooks.calls("app", "publish", "allowed")
        ),
        (1, 1)
    );
}

#[actix_rt::test]
async fn hook_calls_and_durations_are_on_metrics() {
    let backend = Backend::start(|v| {
        if v["channel"] == "doc:1" {
            Reply::ok()
        } else {
            Reply::error("not_member")
        }
    });
    let broker = hooked(&backend, "\"subscribe\"", "");
    let mut c = client(&broker, "u1").await;
    let ack = c
        .call(json!({"type": "subscribe", "channel": "doc:1"}), 1)
        .await;
    assert_eq!(ack["type"], "ack");
    let e = c
        .call(json!({"type": "subscribe", "channel": "doc:2"}), 2)
        .await;
    assert_eq!(e["code"], "not_member");
    let text = broker.metrics().await;
    let value = |series: &str| crate::common::metric_value(&text, series);
    for outcome in ["allowed", "refused"] {
        let series = format!(
            "tidegate_hook_calls_total{{hook=\"app\",event=\"subscribe\",outcome=\"{outcome}\"}}"
        );
        assert_eq!(value(&series), 1.0, "{series} in:\n{text}");
    }
    assert_eq!(
        value("tidegate_hook_duration_seconds_count{hook=\"app\",event=\"subscribe\"}"),
        2.0,
        "{text}"
    );
    assert!(
        value("tidegate_hook_duration_seconds_sum{hook=\"app\",event=\"subscribe\"}") > 0.0,
        "{text}"
    );
    assert_eq!(
        value("tidegate_rejections_total{layer=\"hook\",reason=\"not_member\"}"),
        1.0
    );
}
