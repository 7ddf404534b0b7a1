//! The gRPC API (§8) with a real tonic client against a real broker:
//! `Publish`, status codes, trailers, one budget shared with HTTP, and the
//! fan-out price.

use serde_json::json;
use tidegate::grpc::proto::broker_client::BrokerClient;
use tidegate::grpc::proto::{ChannelSince, PublishRequest, SubscribeRequest};
use tonic::metadata::MetadataMap;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request, Status};
use tonic_types::StatusExt;

use crate::common::{API_KEY, Broker, PATIENCE};

/// A second key of account `acme` that may publish only on `news:*` and
/// has no `sub_channels`.
pub const NEWS_KEY: &str = "news-only-key-0123456789";

pub fn news_key_config() -> String {
    format!(
        "[[api_keys]]\nkey = \"{API_KEY}\"\naccount = \"acme\"\npub_channels = [\"*\"]\nsub_channels = [\"*\"]\n\
         [[api_keys]]\nkey = \"{NEWS_KEY}\"\naccount = \"acme\"\npub_channels = [\"news:*\"]\n"
    )
}

pub async fn connect(b: &Broker) -> BrokerClient<Channel> {
    connect_with(b, |e| e).await
}

pub async fn connect_with(
    b: &Broker,
    tune: impl FnOnce(Endpoint) -> Endpoint,
) -> BrokerClient<Channel> {
    let endpoint = tune(Endpoint::from_shared(format!("http://{}", b.grpc_addr)).unwrap());
    let channel = tokio::time::timeout(PATIENCE, endpoint.connect())
        .await
        .unwrap()
        .unwrap();
    BrokerClient::new(channel)
}

/// `msg` with `authorization: Bearer <key>`.
pub fn authed<T>(msg: T, key: &str) -> Request<T> {
    let mut r = Request::new(msg);
    r.metadata_mut()
        .insert("authorization", format!("Bearer {key}").parse().unwrap());
    r
}

pub fn msg(channel: &str, data: &str, id: &str) -> PublishRequest {
    PublishRequest {
        channel: channel.into(),
        data_json: data.into(),
        id: id.into(),
        idempotency_key: String::new(),
    }
}

pub fn subscribe_req(channels: &[(&str, Option<u64>)]) -> SubscribeRequest {
    SubscribeRequest {
        channels: channels
            .iter()
            .map(|(c, since)| ChannelSince {
                channel: (*c).into(),
                since: *since,
            })
            .collect(),
    }
}

/// A numeric metadata entry (trailers merged in by tonic).
pub fn md(map: &MetadataMap, name: &str) -> u64 {
    map.get(name)
        .unwrap_or_else(|| panic!("no {name} in {map:?}"))
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// The contract code a refusal names (its `ErrorInfo.reason`).
pub fn reason(s: &Status) -> String {
    s.get_details_error_info()
        .unwrap_or_else(|| panic!("no ErrorInfo in {s:?}"))
        .reason
}

/// Sends `reqs` on one `PublishStream` with the sample key: every reply
/// until it ends, and the stream (for its trailers).
pub async fn stream_all(
    c: &mut BrokerClient<Channel>,
    reqs: Vec<PublishRequest>,
) -> (
    Vec<tidegate::grpc::proto::PublishReply>,
    tonic::Streaming<tidegate::grpc::proto::PublishReply>,
) {
    let mut replies = c
        .publish_stream(authed(tokio_stream::iter(reqs), API_KEY))
        .await
        .unwrap()
        .into_inner();
    let mut got = Vec::new();
    while let Some(r) = tokio::time::timeout(PATIENCE, replies.message())
        .await
        .unwrap()
        .unwrap()
    {
        got.push(r);
    }
    (got, replies)
}

/// Asserts the rate-limit shape of §8: RESOURCE_EXHAUSTED, the same delay
/// in `retry-after-ms`, `grpc-retry-pushback-ms` and `RetryInfo`.
pub fn assert_rate_limited(s: &Status) -> u64 {
    assert_eq!(s.code(), Code::ResourceExhausted, "{s:?}");
    assert_eq!(reason(s), "rate_limited");
    let ms = md(s.metadata(), "retry-after-ms");
    assert!(ms > 0, "{s:?}");
    assert_eq!(md(s.metadata(), "grpc-retry-pushback-ms"), ms);
    let info = s.get_details_retry_info().expect("RetryInfo detail");
    assert_eq!(
        info.retry_delay.map(|d| d.as_millis() as u64),
        Some(ms),
        "{s:?}"
    );
    ms
}

#[actix_rt::test]
async fn publish_reaches_a_websocket_subscriber_with_the_replys_seq() {
    let b = Broker::start("");
    let mut ws = b.client("acme").await;
    let ack = ws
        .call(json!({"type":"subscribe","channel":"doc:1"}), 1)
        .await;
    assert_eq!(ack["type"], "ack", "{ack}");
    let mut c = connect(&b).await;
    let reply = c
        .publish(authed(msg("doc:1", r#"{"text":"hi"}"#, "m1"), API_KEY))
        .await
        .unwrap();
    let limit = md(reply.metadata(), "ratelimit-limit");
    let remaining = md(reply.metadata(), "ratelimit-remaining");
    assert_eq!(limit, 200);
    assert!(remaining < limit, "{remaining}");
    assert_eq!(md(reply.metadata(), "tidegate-cost"), 1);
    assert!(reply.metadata().get("ratelimit-reset").is_some());
    let reply = reply.into_inner();
    assert_eq!(reply.id, "m1");
    assert!(reply.error.is_none());
    let m = ws.until(|v| v["type"] == "message").await;
    assert_eq!(m["seq"].as_u64(), Some(reply.seq));
    assert_eq!(m["data"], json!({"text":"hi"}));
    assert_eq!(
        b.metric("tidegate_publishes_total{via=\"grpc\"}").await,
        1.0
    );
}

#[actix_rt::test]
async fn every_refusal_has_its_status_code_and_is_counted() {
    let b = Broker::start(&format!(
        "{}\n[plans.free]\nmax_json_depth = 4\n[plans.free.costs]\npublish_per_kib = 30\n",
        news_key_config()
    ));
    let mut c = connect(&b).await;
    let cases: [(Request<PublishRequest>, Code, &str); 8] = [
        (
            Request::new(msg("doc:1", "1", "")),
            Code::Unauthenticated,
            "unauthorized",
        ),
        (
            authed(msg("doc:1", "1", ""), "not-a-key-0123456789"),
            Code::Unauthenticated,
            "unauthorized",
        ),
        (
            authed(msg("doc:1", "1", ""), NEWS_KEY),
            Code::PermissionDenied,
            "forbidden",
        ),
        (
            authed(msg("doc 1", "1", ""), API_KEY),
            Code::InvalidArgument,
            "bad_request",
        ),
        (
            authed(msg("doc:1", "{nope", ""), API_KEY),
            Code::InvalidArgument,
            "bad_request",
        ),
        (
            authed(msg("doc:1", "[[[[[[1]]]]]]", ""), API_KEY),
            Code::InvalidArgument,
            "bad_request",
        ),
        (
            authed(
                msg("doc:1", &format!("\"{}\"", "x".repeat(70_000)), ""),
                API_KEY,
            ),
            Code::InvalidArgument,
            "payload_too_large",
        ),
        // 1 + 30 units for a started KiB, above max_single = 20.
        (
            authed(msg("doc:1", "\"short\"", ""), API_KEY),
            Code::FailedPrecondition,
            "cost_exceeds_max",
        ),
    ];
    for (req, code, why) in cases {
        let s = c.publish(req).await.unwrap_err();
        assert_eq!(s.code(), code, "{s:?}");
        assert_eq!(reason(&s), why, "{s:?}");
        assert!(!s.message().is_empty());
        if code != Code::Unauthenticated {
            // A recognised key sees its balance, charged the malformed
            // price for its input (issue 26: refusals are not free), and
            // nothing for `cost_exceeds_max`, a limit (issue 42).
            let charged = if why == "cost_exceeds_max" { 0 } else { 1 };
            assert_eq!(md(s.metadata(), "tidegate-cost"), charged, "{s:?}");
            assert!(md(s.metadata(), "ratelimit-remaining") < 200);
        }
    }
    for (reason, n) in [
        ("unauthorized", 2.0),
        ("forbidden", 1.0),
        ("bad_request", 3.0),
        ("payload_too_large", 1.0),
        ("cost_exceeds_max", 1.0),
    ] {
        let series = format!("tidegate_rejections_total{{layer=\"grpc\",reason=\"{reason}\"}}");
        assert_eq!(b.metric(&series).await, n, "{series}");
    }
    // A key without sub_channels may not subscribe.
    let s = c
        .subscribe(authed(subscribe_req(&[("news:1", None)]), NEWS_KEY))
        .await
        .expect_err("refused");
    assert_eq!(s.code(), Code::PermissionDenied);
    assert_eq!(reason(&s), "forbidden");
}

#[actix_rt::test]
async fn http_and_grpc_spend_one_budget() {
    let b = Broker::start(
        "[plans.free]\naccount_burst = 6\naccount_messages_per_sec = 0.01\naccount_sample_every = 1\n",
    );
    let mut c = connect(&b).await;
    for i in 0..3 {
        let r = b.publish_http("doc:1", json!(i)).await;
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["tidegate-cost"], "1");
    }
    for i in 0..3 {
        let r = c
            .publish(authed(msg("doc:1", &i.to_string(), ""), API_KEY))
            .await
            .unwrap();
        assert_eq!(md(r.metadata(), "ratelimit-remaining"), 2 - i);
    }
    let s = c
        .publish(authed(msg("doc:1", "7", ""), API_KEY))
        .await
        .unwrap_err();
    assert_rate_limited(&s);
    assert_eq!(md(s.metadata(), "ratelimit-remaining"), 0);
    assert_eq!(md(s.metadata(), "tidegate-cost"), 0);
    let r = b.publish_http("doc:1", json!(8)).await;
    assert_eq!(r.status(), 429);
    assert_eq!(
        b.metric("tidegate_rejections_total{layer=\"grpc\",reason=\"rate_limited\"}")
            .await,
        1.0
    );
}

#[actix_rt::test]
async fn a_publish_is_priced_by_its_fan_out_on_every_transport() {
    // 5 more units per 1,000 subscribers; sockets refill too slowly for
    // the test to see it.
    let b = Broker::start(
        "[grpc]\nmax_concurrent_streams = 2000\n\
         [plans.free]\naccount_burst = 100000\naccount_messages_per_sec = 1000\n\
         messages_per_sec = 0.01\nburst = 20\n\
         [plans.free.costs]\npublish_per_1k_subscribers = 5\n",
    );
    let c = connect(&b).await;
    let mut joining = Vec::new();
    for _ in 0..999 {
        let mut c = c.clone();
        joining.push(tokio::spawn(async move {
            c.subscribe(authed(subscribe_req(&[("doc:big", None)]), API_KEY))
                .await
                .unwrap()
                .into_inner()
        }));
    }
    let mut subs = Vec::new();
    for s in joining {
        subs.push(s.await.unwrap());
    }
    let grpc_cost = |c: &BrokerClient<Channel>| {
        let mut c = c.clone();
        async move {
            let r = c
                .publish(authed(msg("doc:big", "1", ""), API_KEY))
                .await
                .unwrap();
            md(r.metadata(), "tidegate-cost")
        }
    };
    assert_eq!(
        grpc_cost(&c).await,
        1,
        "999 subscribers are under a thousand"
    );
    let r = b.publish_http("doc:big", json!(1)).await;
    assert_eq!(r.headers()["tidegate-cost"], "1");

    // The 1,000th subscriber: a socket, which then publishes itself.
    let mut ws = b.client("acme").await;
    let ack = ws
        .call(json!({"type":"subscribe","channel":"doc:big"}), 1)
        .await;
    assert_eq!(ack["type"], "ack");
    assert_eq!(grpc_cost(&c).await, 6, "1,000 subscribers");
    let r = b.publish_http("doc:big", json!(1)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["tidegate-cost"], "6");
    // The socket spent 1 on its subscribe; three publishes at 6 leave 1
    // unit, so the fourth is dropped (it would have cost 1 before).
    for id in 2..5 {
        let ack = ws
            .call(json!({"type":"publish","channel":"doc:big","data":id}), id)
            .await;
        assert_eq!(ack["type"], "ack", "{ack}");
    }
    ws.send(json!({"type":"publish","channel":"doc:big","data":5,"id":5}))
        .await;
    let limited = ws.until(|v| v["code"] == "rate_limited").await;
    assert_eq!(limited["ids"], json!([5]), "{limited}");
    drop(subs);
}
