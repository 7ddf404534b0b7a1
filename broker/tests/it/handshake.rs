//! §1: identity, refusals before the upgrade, the welcome frame.

use serde_json::Value;
use tidegate::auth::{Claims, unix_now};

use crate::common::{Broker, Client};

/// The status and JSON body of a refused upgrade.
async fn refused(broker: &Broker, token: &str) -> (u16, Value) {
    match broker.try_connect(token).await {
        Err((status, body, _)) => (status, body),
        Ok(_) => panic!("upgrade was accepted"),
    }
}

#[tokio::test]
async fn subprotocol_token_is_accepted_and_only_tidegate_v1_is_echoed() {
    let broker = Broker::start("");
    let mut c = Client::connect(&broker.ws_url(), &broker.token("acme"))
        .await
        .unwrap();
    assert_eq!(c.protocol.as_deref(), Some("tidegate.v1"));
    let welcome = c.next_json().await;
    assert_eq!(welcome["type"], "welcome");
    assert_eq!(welcome["account"], "acme");
    assert_eq!(welcome["node"], "n1");
    assert!(welcome["connId"].as_str().unwrap().starts_with("n1-"));
    let limits = &welcome["limits"];
    assert_eq!(limits["messagesPerSec"], 20.0);
    assert_eq!(limits["burst"], 20);
    assert_eq!(limits["maxPayloadBytes"], 65536);
    assert_eq!(limits["maxSubscriptions"], 100);
    assert_eq!(limits["accountMessagesPerSec"], 100.0);
    assert_eq!(limits["accountBurst"], 200);
    assert_eq!(limits["maxConnections"], 8);
}

#[tokio::test]
async fn authorization_header_works_for_backends() {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let broker = Broker::start("");
    let mut req = broker.ws_url().into_client_request().unwrap();
    req.headers_mut().insert(
        "Authorization",
        format!("Bearer {}", broker.token("acme")).parse().unwrap(),
    );
    let (mut ws, resp) = tokio_tungstenite::connect_async(req).await.unwrap();
    assert!(
        resp.headers().get("sec-websocket-protocol").is_none(),
        "none offered, none chosen"
    );
    use futures_util::StreamExt;
    let first = ws.next().await.unwrap().unwrap();
    assert!(first.to_text().unwrap().contains("\"welcome\""));
}

#[tokio::test]
async fn missing_bad_expired_and_unsigned_tokens_get_401_before_the_upgrade() {
    let broker = Broker::start("");
    let (status, body) = refused(&broker, "").await;
    assert_eq!(
        (status, body["error"].as_str()),
        (401, Some("unauthorized"))
    );
    assert!(body["message"].as_str().unwrap().contains("bearer"));

    let other = tidegate::auth::Authenticator::new("some-other-secret-0123456789", 0).unwrap();
    let claims = |exp| Claims {
        sub: "acme".into(),
        exp,
        plan: None,
        role: None,
        sub_channels: vec![],
        pub_channels: vec![],
        info: None,
    };
    let (status, body) = refused(&broker, &other.mint(&claims(unix_now() + 60))).await;
    assert_eq!(status, 401);
    assert!(body["message"].as_str().unwrap().contains("signature"));

    let expired = broker.node.auth.load().mint(&claims(unix_now() - 5));
    let (status, body) = refused(&broker, &expired).await;
    assert_eq!(status, 401);
    assert!(body["message"].as_str().unwrap().contains("expired"));

    // {"alg":"none"} with no signature.
    let none = "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.eyJzdWIiOiJhY21lIiwiZXhwIjo5OTk5OTk5OTk5fQ.";
    let (status, body) = refused(&broker, none).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (401, Some("unauthorized"))
    );
    assert!(body["message"].as_str().unwrap().contains("algorithm"));

    assert!(
        broker
            .metric("tidegate_rejections_total{layer=\"handshake\",reason=\"unauthorized\"}")
            .await
            >= 4.0
    );
}

#[tokio::test]
async fn unknown_plan_claim_is_refused() {
    let broker = Broker::start("");
    let token = broker.token_with("acme", &["doc:*"], &[], Some("platinum"));
    let (status, body) = refused(&broker, &token).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (401, Some("unknown_plan"))
    );
    assert!(body["message"].as_str().unwrap().contains("platinum"));
}

#[tokio::test]
async fn plan_claim_selects_the_limits_advertised() {
    let broker = Broker::start("");
    let token = broker.token_with("acme", &["doc:*"], &[], Some("pro"));
    let mut c = Client::connect(&broker.ws_url(), &token).await.unwrap();
    let welcome = c.next_json().await;
    assert_eq!(welcome["limits"]["burst"], 100);
    assert_eq!(welcome["limits"]["maxConnections"], 64);
}

#[tokio::test]
async fn plain_get_is_not_an_upgrade() {
    let broker = Broker::start("");
    let resp = reqwest::get(broker.url("/v1/ws")).await.unwrap();
    assert_eq!(resp.status(), 400);
    let body = crate::common::refusal_json(resp).await;
    assert_eq!(body["error"], "bad_request");
}
