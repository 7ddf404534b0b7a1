//! §13 for backends: gRPC `Presence` with a real tonic client (the same
//! answer as the socket's read, priced per started 100 of `limit` with
//! the trailers, the key's globs, the status codes).

use serde_json::json;
use tidegate::auth::{Claims, unix_now};
use tidegate::grpc::proto::PresenceRequest;
use tonic::Code;

use crate::common::{API_KEY, Broker, Client};
use crate::grpc::{NEWS_KEY, authed, connect, news_key_config};

#[tokio::test(flavor = "multi_thread")]
async fn grpc_presence_answers_members_and_is_priced_like_the_frame() {
    let b = Broker::start(&format!(
        "[namespaces.note]\npresence = true\n{}",
        news_key_config()
    ));
    let token = b.mint(Claims {
        sub: "ann".into(),
        exp: unix_now() + 600,
        plan: None,
        role: None,
        sub_channels: vec!["note:*".into()],
        pub_channels: vec![],
        info: Some(json!({"name": "Ann"})),
    });
    let mut c = Client::connect(&b.ws_url(), &token).await.unwrap();
    let conn = c.next_json().await["connId"].as_str().unwrap().to_owned();
    let ack = c
        .call(json!({"type":"subscribe","channel":"note:g"}), 1)
        .await;
    assert_eq!(ack["type"], "ack");
    let mut g = connect(&b).await;
    let req = |channel: &str, limit: u32| PresenceRequest {
        channel: channel.into(),
        limit,
    };
    let reply = g.presence(authed(req("note:g", 0), API_KEY)).await.unwrap();
    assert_eq!(reply.metadata().get("tidegate-cost").unwrap(), "1");
    assert!(reply.metadata().get("ratelimit-remaining").is_some());
    let r = reply.into_inner();
    assert_eq!((r.users, r.connections, r.partial), (1, 1, false));
    assert_eq!(r.members.len(), 1);
    assert_eq!(
        (r.members[0].user.as_str(), r.members[0].conn_id.as_str()),
        ("ann", conn.as_str())
    );
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&r.members[0].info_json).unwrap(),
        json!({"name": "Ann"})
    );
    let reply = g
        .presence(authed(req("note:g", 1000), API_KEY))
        .await
        .unwrap();
    assert_eq!(reply.metadata().get("tidegate-cost").unwrap(), "10");
    // The price list says so.
    let prices: serde_json::Value = reqwest::Client::new()
        .get(b.url("/v1/prices"))
        .bearer_auth(API_KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        prices["grpc"]["Presence"]["perStarted100OfLimit"], 1,
        "{prices}"
    );
    assert_eq!(prices["socket"]["presence_stats"], 1);
    for (request, key, code) in [
        (req("note:g", 1001), API_KEY, Code::InvalidArgument),
        (req("doc:1", 0), API_KEY, Code::InvalidArgument),
        (req("bad name", 0), API_KEY, Code::InvalidArgument),
        (req("note:g", 0), NEWS_KEY, Code::PermissionDenied),
        (req("note:g", 0), "nope", Code::Unauthenticated),
    ] {
        let e = g.presence(authed(request, key)).await.unwrap_err();
        assert_eq!(e.code(), code, "{e:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn graphql_channel_presence_and_presence_stats_read_the_members() {
    let b = Broker::start("[namespaces.note]\npresence = true\n");
    let token = b.mint(Claims {
        sub: "ann".into(),
        exp: unix_now() + 600,
        plan: None,
        role: None,
        sub_channels: vec!["note:*".into()],
        pub_channels: vec![],
        info: Some(json!({"name": "Ann"})),
    });
    let mut c = Client::connect(&b.ws_url(), &token).await.unwrap();
    let conn = c.next_json().await["connId"].as_str().unwrap().to_owned();
    let ack = c
        .call(json!({"type":"subscribe","channel":"note:q"}), 1)
        .await;
    assert_eq!(ack["type"], "ack");
    let a = crate::graphql::query(
        &b,
        "{ channel(name: \"note:q\") { presence(first: 10) { user connId info } presenceStats { users connections } } }",
        json!({}),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert_eq!(
        a.body["data"]["channel"],
        json!({"presence":[{"user":"ann","connId":conn,"info":{"name":"Ann"}}],
               "presenceStats":{"users":1,"connections":1}})
    );
    let a = crate::graphql::query(
        &b,
        "{ channel(name: \"note:q\") { presence(first: 1001) { user } } }",
        json!({}),
    )
    .await;
    // Priced before it runs: 1,001 members are refused as too expensive.
    assert_eq!(a.code(), "QUERY_TOO_EXPENSIVE", "{}", a.text);
}
