//! §15's publish hook on `POST /v1/client/publish`: after the charge and
//! before the fan-out, in place of the token's `pub_channels` for the
//! channels it covers; a rewrite, a refusal (403 with the hook's code), a
//! failure (503 `hook_unavailable`), a duplicate key not asked again, and
//! dry run.

use serde_json::{Value, json};

use crate::common::Broker;
use crate::hooks_backend::{Backend, Reply};

async fn post(broker: &Broker, body: Value, key: Option<&str>) -> (u16, Value, Option<String>) {
    let token = broker.token_with("u1", &["chat:*"], &["chat:*"], None);
    let mut req = reqwest::Client::new()
        .post(broker.url("/v1/client/publish"))
        .bearer_auth(token)
        .json(&body);
    if let Some(k) = key {
        req = req.header("Idempotency-Key", k);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let retry = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    (status, resp.json().await.unwrap(), retry)
}

fn hooked(backend: &Backend, extra: &str) -> Broker {
    Broker::start(&backend.hook(&format!(
        "events = [\"publish\"]\nchannels = [\"doc:*\"]\ntimeout_ms = 300\n{extra}"
    )))
}

#[actix_rt::test]
async fn the_publish_hook_decides_and_rewrites_a_client_publish() {
    let mut backend = Backend::start(|_| Reply::result(json!({"data": {"clean": true}})));
    let broker = hooked(&backend, "");
    let mut reader = broker.client("reader").await;
    reader
        .call(json!({"type": "subscribe", "channel": "doc:1"}), 1)
        .await;
    let body = json!({"channel": "doc:1", "data": {"dirty": 1}});
    let (status, first, _) = post(&broker, body.clone(), Some("k1")).await;
    assert_eq!(
        status, 200,
        "the hook allows what the token does not: {first}"
    );
    let call = backend.call().await;
    assert_eq!(
        (
            call["event"].clone(),
            call["channel"].clone(),
            call["data"].clone(),
            call["client"]["sub"].clone(),
            call["client"]["transport"].clone()
        ),
        (
            json!("publish"),
            json!("doc:1"),
            json!({"dirty": 1}),
            json!("u1"),
            json!("http")
        )
    );
    let msg = reader.until(|f| f["type"] == "message").await;
    assert_eq!(
        msg["data"],
        json!({"clean": true}),
        "published as rewritten"
    );
    let (status, again, _) = post(&broker, body, Some("k1")).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["seq"], first["seq"], "{again}");
    assert_eq!(
        backend.calls(),
        1,
        "a duplicate gets the first answer without a call"
    );

    backend.answer(|_| Reply::error("spam"));
    let (status, e, _) = post(&broker, json!({"channel": "doc:1", "data": "buy"}), None).await;
    assert_eq!((status, e["error"].clone()), (403, json!("spam")), "{e}");
    assert_eq!(e["message"], "the backend says no");

    backend.answer(|_| Reply::Hang);
    let (status, e, retry) = post(&broker, json!({"channel": "doc:1", "data": 1}), None).await;
    assert_eq!(
        (status, e["error"].clone()),
        (503, json!("hook_unavailable")),
        "{e}"
    );
    assert!(retry.is_some_and(|s| s.parse::<u64>().unwrap() >= 1));

    // A channel no hook covers: the token decides, no call.
    let before = backend.calls();
    let (status, _, _) = post(&broker, json!({"channel": "chat:1", "data": 1}), None).await;
    assert_eq!(status, 200);
    let (status, e, _) = post(&broker, json!({"channel": "news:1", "data": 1}), None).await;
    assert_eq!((status, e["error"].clone()), (403, json!("forbidden")));
    assert_eq!(backend.calls(), before);
    assert_eq!(
        broker
            .metric("tidegate_rejections_total{layer=\"hook\",reason=\"spam\"}")
            .await,
        1.0
    );
}

#[actix_rt::test]
async fn a_dry_run_publish_hook_on_client_publish_is_compared_and_the_token_enforced() {
    let backend = Backend::start(|_| Reply::ok());
    let broker = hooked(&backend, "dry_run = true");
    let (status, e, _) = post(&broker, json!({"channel": "doc:1", "data": 1}), None).await;
    assert_eq!(
        (status, e["error"].clone()),
        (403, json!("forbidden")),
        "the token decides: {e}"
    );
    let series = "tidegate_hook_disagreements_total{hook=\"app\",event=\"publish\"}";
    let deadline = std::time::Instant::now() + crate::common::PATIENCE;
    while broker.metric(series).await < 1.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no disagreement counted"
        );
        tokio::task::yield_now().await;
    }
    assert_eq!(
        broker.node.metrics.hooks.calls("app", "publish", "allowed"),
        1
    );
}
