//! `Authorization: Bearer` is read the same way on every front: the scheme
//! is case-insensitive (RFC 7235 §2.1), and another scheme is no
//! credential. Before issue 42's one parser, lower-case `bearer` worked on
//! `/v1/graphql` only and was refused on the other fronts.

use reqwest::Method;
use serde_json::{Value, json};
use tidegate::grpc::proto::PublishRequest;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tonic::Request;

use crate::admin::{ADMIN_KEY, admin_config};
use crate::common::{API_KEY, Broker};
use crate::sse_client::open;

/// One HTTP request with `Authorization: <scheme> <credential>`.
async fn http(
    broker: &Broker,
    method: Method,
    path: &str,
    authorization: &str,
    body: Option<Value>,
) -> u16 {
    let mut req = reqwest::Client::new()
        .request(method, broker.url(path))
        .header("authorization", authorization);
    if let Some(b) = body {
        req = req.json(&b);
    }
    req.send().await.unwrap().status().as_u16()
}

/// What each front answers a request whose credential comes as
/// `<scheme> <credential>`: the status (or 101/200 for an opened stream).
async fn answers(broker: &Broker, scheme: &str) -> Vec<(&'static str, u16)> {
    let key = format!("{scheme} {API_KEY}");
    let token = format!("{scheme} {}", broker.token("acme"));
    let admin = format!("{scheme} {ADMIN_KEY}");
    let publish = json!({"channel":"doc:1","data":1});
    let mut got = vec![
        (
            "/v1/publish",
            http(
                broker,
                Method::POST,
                "/v1/publish",
                &key,
                Some(publish.clone()),
            )
            .await,
        ),
        (
            "/v1/publish/batch",
            http(
                broker,
                Method::POST,
                "/v1/publish/batch",
                &key,
                Some(json!({"messages":[publish.clone()]})),
            )
            .await,
        ),
        (
            "/v1/client/publish",
            http(
                broker,
                Method::POST,
                "/v1/client/publish",
                &token,
                Some(publish),
            )
            .await,
        ),
        (
            "/v1/presence",
            http(
                broker,
                Method::GET,
                "/v1/presence?channel=note:1",
                &key,
                None,
            )
            .await,
        ),
        (
            "/v1/graphql",
            http(
                broker,
                Method::POST,
                "/v1/graphql",
                &key,
                Some(json!({"query":"{ budget { remaining } }"})),
            )
            .await,
        ),
        (
            "/v1/admin/overview",
            http(broker, Method::GET, "/v1/admin/overview", &admin, None).await,
        ),
    ];
    let sse = open(
        broker.addr,
        "/v1/sse?channel=doc:1",
        &[("Authorization", token.as_str())],
    )
    .await;
    got.push(("/v1/sse", sse.map(|_| 200).unwrap_or_else(|r| r.0)));
    let mut req = broker.ws_url().into_client_request().unwrap();
    req.headers_mut()
        .insert("authorization", token.parse().unwrap());
    let ws = tokio_tungstenite::connect_async(req).await;
    let ws_status = match ws {
        Ok((_, resp)) => resp.status().as_u16(),
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => resp.status().as_u16(),
        Err(e) => panic!("upgrade failed: {e}"),
    };
    got.push(("/v1/ws", ws_status));
    let mut grpc = crate::grpc::connect(broker).await;
    let mut req = Request::new(PublishRequest {
        channel: "doc:1".into(),
        data_json: "1".into(),
        ..Default::default()
    });
    req.metadata_mut()
        .insert("authorization", key.parse().unwrap());
    let status = match grpc.publish(req).await {
        Ok(_) => 200,
        Err(s) if s.code() == tonic::Code::Unauthenticated => 401,
        Err(s) => panic!("gRPC publish: {s:?}"),
    };
    got.push(("grpc Publish", status));
    got
}

/// A broker with the admin API and a presence namespace, so every front
/// has something to answer.
fn broker() -> Broker {
    Broker::start(&format!(
        "{}[namespaces.note]\npresence = true\n",
        admin_config()
    ))
}

#[tokio::test]
async fn the_bearer_scheme_is_case_insensitive_on_every_front() {
    let broker = broker();
    for scheme in ["Bearer", "bearer", "BEARER"] {
        for (front, status) in answers(&broker, scheme).await {
            let expected = if front == "/v1/ws" { 101 } else { 200 };
            assert_eq!(status, expected, "{front} with `{scheme}`");
        }
    }
}

#[tokio::test]
async fn another_scheme_is_no_credential_on_every_front() {
    let broker = broker();
    for (front, status) in answers(&broker, "Basic").await {
        assert_eq!(status, 401, "{front} with `Basic`");
    }
}
