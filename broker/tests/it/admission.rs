//! Issue 42's one admission, from outside: the same situation gets the
//! same answer on every front that concerns it.
//!
//! - `max_single` (§0) holds for one publish on every front, the GraphQL
//!   mutation included (the shipped `graphql_max_single = 0` let a publish
//!   priced 31 through against a `max_single` of 20);
//! - what a refusal costs: bad, forbidden or invalid input
//!   `costs.malformed` from the payer, `cost_exceeds_max` nothing (gRPC
//!   charged it; HTTP publish charged nothing for a 400 or a 403);
//! - a plan rule ("5 publishes a minute on this document") holds across
//!   the socket, HTTP publish and batch, client publish, the GraphQL
//!   mutation and gRPC (it held on socket frames only);
//! - `/v1/client/publish` answers `X-RateLimit-*` from the identity's
//!   bucket on a 200 and on every 429.

use reqwest::header::HeaderMap;
use serde_json::{Value, json};
use tonic::Code;

use crate::common::{API_KEY, Broker, Client};
use crate::graphql::{GQL_JSON, post as graphql};
use crate::grpc::{authed, connect, md, msg, reason};

/// One HTTP publish (`path`) with `credential`: status, headers, body.
async fn http(
    broker: &Broker,
    path: &str,
    credential: &str,
    body: &str,
) -> (u16, HeaderMap, Value) {
    let resp = reqwest::Client::new()
        .post(broker.url(path))
        .bearer_auth(credential)
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    (status, headers, resp.json().await.unwrap_or(Value::Null))
}

fn header(h: &HeaderMap, name: &str) -> u64 {
    h[name].to_str().unwrap().parse().unwrap()
}

/// A socket publish's answer: "ack" or the error's code.
async fn socket_publish(c: &mut Client, channel: &str, data: Value, id: u64) -> String {
    c.send(json!({"type":"publish","channel":channel,"data":data,"id":id}))
        .await;
    let v = c
        .until(|v| {
            v["id"] == id
                || v["ids"]
                    .as_array()
                    .is_some_and(|ids| ids.contains(&json!(id)))
        })
        .await;
    match v["type"].as_str() {
        Some("ack") => "ack".into(),
        _ => v["code"].as_str().unwrap().into(),
    }
}

/// 3,000 bytes of `data`: with `publish_per_kib = 10`, 1 + 3 × 10 = 31
/// units, over a `max_single` of 20.
fn big() -> String {
    "x".repeat(2998)
}

const PRICEY: &str = "[plans.free.costs]\npublish_per_kib = 10\nmax_single = 20\n";

#[tokio::test]
async fn one_publish_over_max_single_is_refused_on_every_front() {
    let broker = Broker::start(PRICEY);
    let data = json!(big());
    let body = json!({"channel":"doc:big","data":data}).to_string();
    let (status, _, b) = http(&broker, "/v1/publish", API_KEY, &body).await;
    assert_eq!(
        (status, b["error"].as_str()),
        (422, Some("cost_exceeds_max"))
    );
    let token = broker.token("acme");
    let (status, _, b) = http(&broker, "/v1/client/publish", &token, &body).await;
    assert_eq!(
        (status, b["error"].as_str()),
        (422, Some("cost_exceeds_max"))
    );
    let mut grpc = connect(&broker).await;
    let refused = grpc
        .publish(authed(msg("doc:big", &data.to_string(), "1"), API_KEY))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    let mut socket = broker.client("acme").await;
    let answer = socket_publish(&mut socket, "doc:big", data.clone(), 1).await;
    assert_eq!(answer, "cost_exceeds_max");
    // The GraphQL mutation, with the shipped graphql_max_single = 0 (the
    // bucket's capacity, 200): the message is one publish all the same.
    let q = json!({
        "query": "mutation($d: JSON!) { publish(channel: \"doc:big\", data: $d) { seq } }",
        "variables": {"d": data},
    });
    let a = graphql(&broker, Some(API_KEY), GQL_JSON, &q).await;
    assert_eq!(a.code(), "QUERY_TOO_EXPENSIVE", "{}", a.text);
    let x = &a.body["errors"][0]["extensions"];
    assert_eq!(
        (x["cost"].as_u64(), x["max"].as_u64()),
        (Some(31), Some(20))
    );
    assert_eq!(a.body["data"], Value::Null, "{}", a.text);
    let batch = json!({
        "query": "mutation($d: JSON!) { publishBatch(messages: [{channel: \"doc:s\", data: 1}, {channel: \"doc:big\", data: $d}]) { seq } }",
        "variables": {"d": data},
    });
    let a = graphql(&broker, Some(API_KEY), GQL_JSON, &batch).await;
    assert_eq!(a.code(), "QUERY_TOO_EXPENSIVE", "{}", a.text);
    // Nothing was published anywhere: the channel has no history.
    let read = json!({"query": "{ channel(name: \"doc:big\") { seq } }"});
    let a = graphql(&broker, Some(API_KEY), GQL_JSON, &read).await;
    let seq = &a.body["data"]["channel"]["seq"];
    assert!(*seq == json!(0) || *seq == json!("0"), "{}", a.text);
    // A publish that fits still goes through the mutation.
    let small = json!({"query": "mutation { publish(channel: \"doc:s\", data: 1) { seq } }"});
    let a = graphql(&broker, Some(API_KEY), GQL_JSON, &small).await;
    assert!(
        a.body["data"]["publish"]["seq"].as_u64().is_some(),
        "{}",
        a.text
    );
}

/// Buckets that refill too slowly to hide a charge while the test runs.
const MALFORMED_3: &str = "[plans.free]\nmessages_per_sec = 0.001\naccount_messages_per_sec = 0.001\n\
     [plans.free.costs]\nmalformed = 3\npublish_per_kib = 10\nmax_single = 20\n";

#[tokio::test]
async fn input_refusals_cost_malformed_and_limit_refusals_nothing() {
    let broker = Broker::start(MALFORMED_3);
    // The API key's bucket: HTTP publish and gRPC spend it alike.
    let (status, h, _) = http(&broker, "/v1/publish", API_KEY, "{not json").await;
    assert_eq!((status, header(&h, "tidegate-cost")), (400, 3));
    let full = header(&h, "x-ratelimit-limit");
    assert_eq!(header(&h, "x-ratelimit-remaining"), full - 3);
    let bad_channel = json!({"channel":"bad channel!","data":1}).to_string();
    let (status, h, _) = http(&broker, "/v1/publish", API_KEY, &bad_channel).await;
    assert_eq!(
        (status, header(&h, "x-ratelimit-remaining")),
        (400, full - 6)
    );
    let over = json!({"channel":"doc:big","data":big()}).to_string();
    let (status, _, _) = http(&broker, "/v1/publish", API_KEY, &over).await;
    assert_eq!(status, 422);
    let mut grpc = connect(&broker).await;
    let refused = grpc
        .publish(authed(
            msg("doc:big", &json!(big()).to_string(), "1"),
            API_KEY,
        ))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition);
    assert_eq!(md(refused.metadata(), "tidegate-cost"), 0, "{refused:?}");
    assert_eq!(md(refused.metadata(), "ratelimit-remaining"), full - 6);
    let refused = grpc
        .publish(authed(msg("doc:1", "{nope", "2"), API_KEY))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument);
    assert_eq!(md(refused.metadata(), "tidegate-cost"), 3);
    assert_eq!(md(refused.metadata(), "ratelimit-remaining"), full - 9);
    // The 422s took nothing: the next publish (1 + 10 for its started
    // KiB) leaves full - 9 - 11.
    let ok = json!({"channel":"doc:1","data":1}).to_string();
    let (status, h, _) = http(&broker, "/v1/publish", API_KEY, &ok).await;
    assert_eq!(
        (status, header(&h, "x-ratelimit-remaining")),
        (200, full - 20)
    );
    // A client publish: the identity's bucket pays its bad input.
    let token = broker.token_with("acme", &["doc:*"], &["doc:*"], None);
    let (status, h, _) = http(&broker, "/v1/client/publish", &token, "[").await;
    assert_eq!((status, header(&h, "tidegate-cost")), (400, 3));
    let identity = header(&h, "x-ratelimit-limit");
    assert_eq!(header(&h, "x-ratelimit-remaining"), identity - 3);
    let elsewhere = json!({"channel":"news:1","data":1}).to_string();
    let (status, h, b) = http(&broker, "/v1/client/publish", &token, &elsewhere).await;
    assert_eq!((status, b["error"].as_str()), (403, Some("forbidden")));
    assert_eq!(header(&h, "x-ratelimit-remaining"), identity - 6);
    let (status, _, _) = http(&broker, "/v1/client/publish", &token, &over).await;
    assert_eq!(status, 422);
    let (status, h, _) = http(&broker, "/v1/client/publish", &token, &ok).await;
    assert_eq!(
        (status, header(&h, "x-ratelimit-remaining")),
        (200, identity - 17)
    );
}

const FIVE_A_MINUTE: &str = r#"
[plans.free]
messages_per_sec = 1000
burst = 1000
account_messages_per_sec = 1000
account_burst = 1000
[[plans.free.rules]]
id = "doc-pace"
track_by = "channel"
capacity = 5
window_ms = 60000
namespace = "doc"
"#;

#[tokio::test]
async fn a_plan_rule_holds_across_every_publishing_front() {
    let broker = Broker::start(FIVE_A_MINUTE);
    let token = broker.token("acme");
    let one = json!({"channel":"doc:r","data":1}).to_string();
    let mutation = json!({"query": "mutation { publish(channel: \"doc:r\", data: 1) { seq } }"});
    let mut grpc = connect(&broker).await;
    let mut socket = broker.client("acme").await;
    // Five publishes on doc:r, one per front.
    let (status, _, b) = http(&broker, "/v1/publish", API_KEY, &one).await;
    assert_eq!(status, 200, "{b}");
    let (status, _, b) = http(&broker, "/v1/client/publish", &token, &one).await;
    assert_eq!(status, 200, "{b}");
    let a = graphql(&broker, Some(API_KEY), GQL_JSON, &mutation).await;
    assert_eq!(a.status, 200, "{}", a.text);
    grpc.publish(authed(msg("doc:r", "1", "1"), API_KEY))
        .await
        .unwrap();
    assert_eq!(
        socket_publish(&mut socket, "doc:r", json!(1), 1).await,
        "ack"
    );
    // The sixth is refused on every front, whichever it is.
    let (status, h, b) = http(&broker, "/v1/publish", API_KEY, &one).await;
    assert_eq!(
        (status, b["error"].as_str()),
        (429, Some("rate_limited")),
        "{b}"
    );
    assert!(h.contains_key("retry-after"));
    assert!(b["retryAfterMs"].as_u64().unwrap() > 0, "{b}");
    let (status, _, b) = http(&broker, "/v1/client/publish", &token, &one).await;
    assert_eq!(
        (status, b["error"].as_str()),
        (429, Some("rate_limited")),
        "{b}"
    );
    let a = graphql(&broker, Some(API_KEY), GQL_JSON, &mutation).await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (429, Some("RATE_LIMITED")),
        "{}",
        a.text
    );
    assert!(
        a.body["errors"][0]["extensions"]["retryAfterMs"]
            .as_u64()
            .unwrap()
            > 0
    );
    let refused = grpc
        .publish(authed(msg("doc:r", "1", "2"), API_KEY))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert_eq!(reason(&refused), "rate_limited");
    assert_eq!(
        socket_publish(&mut socket, "doc:r", json!(1), 2).await,
        "rate_limited"
    );
    // In a batch, the message on doc:r is refused in place, the other
    // published.
    let batch = json!({"messages":[
        {"channel":"doc:r","data":1},
        {"channel":"doc:free","data":2},
    ]})
    .to_string();
    let (status, _, b) = http(&broker, "/v1/publish/batch", API_KEY, &batch).await;
    assert_eq!(status, 200, "{b}");
    assert_eq!(b["results"][0]["error"], "rate_limited", "{b}");
    assert!(b["results"][1]["seq"].as_u64().is_some(), "{b}");
    // Another document is not limited by doc:r's bucket.
    let other = json!({"channel":"doc:other","data":1}).to_string();
    let (status, _, b) = http(&broker, "/v1/publish", API_KEY, &other).await;
    assert_eq!(status, 200, "{b}");
    let text = broker.metrics().await;
    assert!(text.contains(r#"tidegate_rejections_total{layer="rule",reason="rate_limited"}"#));
}

#[tokio::test]
async fn a_client_publishs_rate_headers_are_the_identitys_on_every_answer() {
    // The identity's bucket holds 20, the account's 2.
    let broker = Broker::start(
        "[plans.free]\nburst = 20\nmessages_per_sec = 0.01\n\
         account_burst = 2\naccount_messages_per_sec = 0.01\naccount_sample_every = 1\n",
    );
    let token = broker.token("acme");
    let one = json!({"channel":"doc:h","data":1}).to_string();
    for left in [19, 18] {
        let (status, h, b) = http(&broker, "/v1/client/publish", &token, &one).await;
        assert_eq!(status, 200, "{b}");
        assert_eq!(header(&h, "x-ratelimit-limit"), 20);
        assert_eq!(header(&h, "x-ratelimit-remaining"), left);
    }
    // The account refuses: the identity's unit goes back, and the headers
    // still speak of the identity's bucket.
    let (status, h, b) = http(&broker, "/v1/client/publish", &token, &one).await;
    assert_eq!(
        (status, b["error"].as_str()),
        (429, Some("rate_limited")),
        "{b}"
    );
    assert_eq!(header(&h, "x-ratelimit-limit"), 20);
    assert_eq!(header(&h, "x-ratelimit-remaining"), 18);
}
