//! §15's `connect` hook over `/v1/ws`: a tokenless handshake named by the
//! backend (a session cookie), its three answers and its failures, and the
//! Origin check that comes before the call.

use serde_json::{Value, json};
use tidegate::auth::unix_now;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::common::{Broker, Client, refusal};
use crate::hooks_backend::{Backend, Reply};

/// A tokenless handshake with these headers.
pub async fn connect_without_token(
    broker: &Broker,
    headers: &[(&str, &str)],
) -> Result<Client, (u16, Value, Option<u64>)> {
    let mut req = broker.ws_url().into_client_request().unwrap();
    req.headers_mut()
        .insert("Sec-WebSocket-Protocol", "tidegate.v1".parse().unwrap());
    for (k, v) in headers {
        req.headers_mut().insert(
            tokio_tungstenite::tungstenite::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            v.parse().unwrap(),
        );
    }
    let result = tokio_tungstenite::connect_async(req)
        .await
        .map(|(ws, _)| Client::new(ws, None));
    refusal(result)
}

fn later_ms() -> u64 {
    (unix_now() + 600) * 1000
}

fn connect_hook(backend: &Backend, extra: &str) -> Broker {
    Broker::start(&backend.hook(&format!("events = [\"connect\"]\n{extra}")))
}

#[actix_rt::test]
async fn a_connect_result_is_the_connections_identity_and_its_channels_are_joined() {
    let expires = later_ms();
    let mut backend = Backend::start(move |_| {
        Reply::result(json!({
            "sub": "u1",
            "subChannels": ["doc:*"],
            "pubChannels": [],
            "channels": ["doc:7"],
            "info": {"name": "Ada"},
            "expiresAt": expires,
        }))
    });
    let broker = connect_hook(&backend, "");
    let mut c = connect_without_token(&broker, &[("Cookie", "session=abc")])
        .await
        .expect("the hook's result opens the socket");
    let call = backend.call().await;
    assert_eq!(call["event"], "connect");
    assert_eq!(call["hook"], "app");
    assert_eq!(call["headers"]["cookie"], "session=abc");
    assert_eq!(call["client"]["transport"], "websocket");
    assert!(
        call["client"].get("sub").is_none(),
        "no sub on connect: {call}"
    );
    let welcome = c.next_json().await;
    assert_eq!(welcome["type"], "welcome", "{welcome}");
    assert_eq!(welcome["account"], "u1");
    assert_eq!(welcome["tokenExpiresAt"], expires);
    assert_eq!(welcome["connId"], call["client"]["connId"]);
    assert_eq!(welcome["channels"][0]["channel"], "doc:7", "{welcome}");
    let seq = welcome["channels"][0]["seq"]
        .as_u64()
        .expect("a seq as an ack carries it");
    // Joined server-side: a publish reaches it without a subscribe.
    assert!(
        broker
            .publish_http("doc:7", json!("hi"))
            .await
            .status()
            .is_success()
    );
    let msg = c.until(|f| f["type"] == "message").await;
    assert_eq!(
        (msg["channel"].clone(), msg["data"].clone()),
        (json!("doc:7"), json!("hi"))
    );
    assert!(msg["seq"].as_u64().unwrap() > seq, "{msg} after {seq}");
    // The hook's grants are the token's: doc:* may be subscribed, not published.
    c.send(json!({"type": "publish", "channel": "doc:7", "data": 1, "id": 2}))
        .await;
    let e = c.until(|f| f["id"] == 2).await;
    assert_eq!(e["code"], "forbidden", "{e}");
}

#[actix_rt::test]
async fn a_connect_error_is_403_with_the_hooks_code_and_a_disconnect_403_forbidden() {
    let mut backend = Backend::start(|_| Reply::error("no_session"));
    let broker = connect_hook(&backend, "");
    let (status, body, _) = connect_without_token(&broker, &[]).await.err().unwrap();
    backend.call().await;
    assert_eq!(
        (status, body["error"].clone()),
        (403, json!("no_session")),
        "{body}"
    );
    assert_eq!(body["message"], "the backend says no");
    backend.answer(|_| Reply::disconnect(4403));
    let (status, body, _) = connect_without_token(&broker, &[]).await.err().unwrap();
    assert_eq!(
        (status, body["error"].clone()),
        (403, json!("forbidden")),
        "{body}"
    );
    assert!(
        broker
            .metric("tidegate_rejections_total{layer=\"hook\",reason=\"no_session\"}")
            .await
            >= 1.0
    );
}

#[actix_rt::test]
async fn a_failed_connect_is_503_under_deny_and_401_under_allow() {
    for reply in [Reply::Status(500), Reply::Junk, Reply::Hang] {
        let backend = Backend::start(move |_| reply.clone());
        let broker = connect_hook(&backend, "timeout_ms = 300");
        let (status, body, retry) = connect_without_token(&broker, &[]).await.err().unwrap();
        assert_eq!(
            (status, body["error"].clone()),
            (503, json!("hook_unavailable")),
            "{body}"
        );
        assert!(
            retry.is_some_and(|r| r >= 1),
            "Retry-After on a temporary refusal"
        );
        assert_eq!(
            broker.node.metrics.hooks.calls("app", "connect", "failed"),
            1
        );
        let broker = connect_hook(&backend, "timeout_ms = 300\non_error = \"allow\"");
        let (status, body, _) = connect_without_token(&broker, &[]).await.err().unwrap();
        assert_eq!(
            (status, body["error"].clone()),
            (401, json!("unauthorized")),
            "{body}"
        );
    }
}

#[actix_rt::test]
async fn an_unknown_plan_or_a_past_expiry_is_401() {
    let backend = Backend::start(|_| Reply::result(json!({"sub": "u1", "plan": "gold"})));
    let broker = connect_hook(&backend, "");
    let (status, body, _) = connect_without_token(&broker, &[]).await.err().unwrap();
    assert_eq!(
        (status, body["error"].clone()),
        (401, json!("unknown_plan")),
        "{body}"
    );
    backend.answer(|_| Reply::result(json!({"sub": "u1", "expiresAt": 1000})));
    let (status, body, _) = connect_without_token(&broker, &[]).await.err().unwrap();
    assert_eq!(
        (status, body["error"].clone()),
        (401, json!("unauthorized")),
        "{body}"
    );
}

#[actix_rt::test]
async fn a_token_never_calls_the_connect_hook() {
    let backend = Backend::start(|_| Reply::error("no"));
    let broker = connect_hook(&backend, "");
    let _c = broker.client("u1").await;
    assert_eq!(backend.calls(), 0);
}

#[actix_rt::test]
async fn a_foreign_origin_is_refused_before_the_call() {
    let mut backend = Backend::start(|_| Reply::result(json!({"sub": "u1"})));
    let broker = connect_hook(&backend, "");
    let host = broker.addr.to_string();
    for origin in ["https://evil.example", "null"] {
        let (status, body, _) = connect_without_token(&broker, &[("Origin", origin)])
            .await
            .err()
            .unwrap();
        assert_eq!(
            (status, body["error"].clone()),
            (403, json!("forbidden_origin")),
            "{origin}"
        );
    }
    assert_eq!(backend.calls(), 0, "refused before the call");
    let same = format!("http://{host}");
    connect_without_token(&broker, &[("Origin", &same)])
        .await
        .expect("the same host passes");
    connect_without_token(&broker, &[])
        .await
        .expect("no Origin (not a browser) is not checked");
    backend.call().await;
    backend.call().await;
    let allowed = connect_hook(&backend, "allowed_origins = [\"https://app.example\"]");
    connect_without_token(&allowed, &[("Origin", "https://app.example")])
        .await
        .expect("an allowed origin passes");
    let same = format!("http://{}", allowed.addr);
    let (status, body, _) = connect_without_token(&allowed, &[("Origin", &same)])
        .await
        .err()
        .unwrap();
    assert_eq!(
        (status, body["error"].clone()),
        (403, json!("forbidden_origin"))
    );
}
