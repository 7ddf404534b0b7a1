//! Issue 38's GraphQL classes over HTTP: price what runs. The pricer and
//! the executor see one operation (variable defaults, `@skip`/`@include`,
//! a batch of one object), a document's expanded size and depth are held
//! to the plan before any of it runs (fragments, aliases, introspection),
//! no operation is free (refused documents cost `malformed`), results that
//! outgrow their estimate pay the rest (history bytes, channel scans), and
//! an operation runs off the worker that serves everything else.

use std::time::Instant;

use serde_json::{Value, json};

use crate::common::{API_KEY, Broker, metric_value};
use crate::graphql::{GQL_JSON, post, query};
use crate::graphql_budget::slow;

/// `{ ...F0 }` where each of `levels` fragments spreads the next `fan`
/// times and the last selects `leaf`: `fan^levels` leaves once expanded.
pub fn chain(levels: usize, fan: usize, leaf: &str) -> String {
    let mut q = String::from("{ ...F0 } ");
    for i in 0..levels {
        let spreads = format!("...F{} ", i + 1).repeat(fan);
        q.push_str(&format!("fragment F{i} on Query {{ {spreads}}} "));
    }
    q.push_str(&format!("fragment F{levels} on Query {{ {leaf} }}"));
    q
}

/// `n` aliases of `field` (written tight: 3,200 of `prices{json}` fit in
/// the 64 KiB a document may have).
fn aliases(n: usize, field: &str) -> String {
    let mut q = String::from("{");
    for i in 0..n {
        q.push_str(&format!(" a{i}:{field}"));
    }
    q.push('}');
    q
}

/// The start of an answer, for a failure's message (some are megabytes).
fn brief(a: &crate::graphql::Answer) -> String {
    a.text.chars().take(400).collect()
}

fn remaining(a: &crate::graphql::Answer) -> u64 {
    a.header("x-ratelimit-remaining")
        .expect("every answer has the balance")
}

async fn seq_of(broker: &Broker, channel: &str) -> u64 {
    let q = format!("{{ channel(name: \"{channel}\") {{ seq }} }}");
    let a = query(broker, &q, json!({})).await;
    a.body["data"]["channel"]["seq"].as_u64().unwrap()
}

#[tokio::test]
async fn fragments_that_multiply_are_refused_too_complex_and_cost_malformed() {
    let broker = Broker::start(&slow(50));
    let mut left = 50;
    for doc in [
        chain(12, 2, "__typename"),
        chain(9, 3, "a: __typename b: __typename"),
        chain(16, 2, "budget { remaining }"),
        // Behind a skipped spread and inline fragments: validation would
        // walk it all the same.
        chain(30, 2, "... on Query { __typename }").replacen(
            "{ ...F0 }",
            "{ ...F0 @skip(if: true) }",
            1,
        ),
        chain(30, 2, "__typename"),
        chain(60, 2, "__typename"),
    ] {
        let a = query(&broker, &doc, json!({})).await;
        assert_eq!(
            (a.status, a.code()),
            (400, &json!("QUERY_TOO_COMPLEX")),
            "{}",
            brief(&a)
        );
        assert_eq!(a.body["errors"][0]["extensions"]["max"], 500);
        assert!(a.body.get("data").is_none(), "nothing ran: {}", brief(&a));
        assert_eq!(a.rate()["cost"], 1, "a refused document costs malformed");
        left -= 1;
        assert_eq!(remaining(&a), left, "{}", brief(&a));
    }
    // Within the limit it runs, at its price (at least 1).
    let a = query(&broker, &chain(8, 2, "__typename"), json!({})).await;
    assert_eq!(a.status, 200, "{}", brief(&a));
    assert_eq!(a.body["data"], json!({"__typename": "Query"}));
    assert_eq!(a.rate()["cost"], 1);
    let m = broker.metrics().await;
    assert!(
        metric_value(
            &m,
            "tidegate_rejections_total{layer=\"graphql\",reason=\"query_too_complex\"}"
        ) >= 6.0
    );
}

#[tokio::test]
async fn variable_defaults_decide_skip_and_include_for_the_price_and_the_run() {
    let broker = Broker::start(&slow(100));
    for i in 0..3 {
        assert_eq!(broker.publish_http("doc:s", json!(i)).await.status(), 200);
    }
    // `$s` not sent: its default skips the history for both.
    let q = "query($s: Boolean = true) { channel(name: \"doc:s\") { seq hist: history(last: 50) @skip(if: $s) { data } } }";
    let a = query(&broker, q, json!({})).await;
    assert_eq!(a.status, 200, "{}", brief(&a));
    assert!(
        a.body["data"]["channel"].get("hist").is_none(),
        "the executor skipped what the pricer skipped: {}",
        brief(&a)
    );
    // Sent, it wins: the history runs and is paid.
    let a = query(&broker, q, json!({"s": false})).await;
    assert_eq!(
        a.body["data"]["channel"]["hist"].as_array().unwrap().len(),
        3
    );
    assert!(a.rate()["cost"].as_u64().unwrap() >= 1 + 1 + 1 + 3);
    // Mutations: ten publishes skipped by a default publish nothing, and
    // cost the minimum.
    let mut m = String::from("mutation($s: Boolean = true) {");
    for i in 0..10 {
        m.push_str(&format!(
            " p{i}: publish(channel: \"doc:m\", data: {i}) @skip(if: $s) {{ seq }}"
        ));
    }
    m.push('}');
    let before = seq_of(&broker, "doc:m").await;
    let a = query(&broker, &m, json!({})).await;
    assert_eq!(a.status, 200, "{}", brief(&a));
    assert_eq!(a.rate()["cost"], 1, "{}", brief(&a));
    assert_eq!(
        seq_of(&broker, "doc:m").await,
        before,
        "nothing was published"
    );
    // An @include whose default is true runs, and is charged each publish.
    let m = m
        .replace("$s: Boolean = true", "$run: Boolean = true")
        .replace("@skip(if: $s)", "@include(if: $run)");
    let a = query(&broker, &m, json!({})).await;
    assert_eq!(a.status, 200, "{}", brief(&a));
    assert_eq!(a.rate()["cost"], 10, "{}", brief(&a));
    assert_eq!(a.body["data"].as_object().unwrap().len(), 10);
}

#[tokio::test]
async fn a_batch_given_one_object_is_priced_as_one_message() {
    let broker = Broker::start(&slow(100));
    let mut m = String::from("mutation {");
    for i in 0..10 {
        m.push_str(&format!(
            " b{i}: publishBatch(messages: {{channel: \"doc:b\", data: \"{i}\"}}) {{ seq }}"
        ));
    }
    m.push('}');
    let a = query(&broker, &m, json!({})).await;
    assert_eq!(a.status, 200, "{}", brief(&a));
    assert_eq!(a.rate()["cost"], 10, "{}", brief(&a));
    assert_eq!(remaining(&a), 90);
    assert_eq!(a.body["data"]["b9"].as_array().unwrap().len(), 1);
    // Through a variable too.
    let a = query(
        &broker,
        "mutation($m: [PublishInput!]!) { publishBatch(messages: $m) { seq } }",
        json!({"m": {"channel": "doc:b", "data": {"x": 1}}}),
    )
    .await;
    assert_eq!(a.status, 200, "{}", brief(&a));
    assert_eq!(a.rate()["cost"], 1);
    assert_eq!(remaining(&a), 89);
    assert_eq!(broker.publish_http("doc:b", json!(0)).await.status(), 200);
    assert_eq!(
        remaining(&query(&broker, "{ __typename }", json!({})).await),
        87
    );
}

#[tokio::test]
async fn zero_weight_aliases_cost_the_minimum_and_floods_are_too_complex() {
    let broker = Broker::start(&slow(20));
    let a = query(&broker, &aliases(3200, "prices{json}"), json!({})).await;
    assert_eq!(
        (a.status, a.code()),
        (400, &json!("QUERY_TOO_COMPLEX")),
        "{}",
        brief(&a)
    );
    assert_eq!((a.rate()["cost"].as_u64(), remaining(&a)), (Some(1), 19));
    let a = query(&broker, &aliases(251, "budget { remaining }"), json!({})).await;
    assert_eq!(a.code(), "QUERY_TOO_COMPLEX");
    assert_eq!(remaining(&a), 18);
    // Within the limit: answered, and still not free.
    let a = query(&broker, &aliases(100, "prices { json }"), json!({})).await;
    assert_eq!(a.status, 200, "{}", brief(&a));
    assert_eq!(a.body["data"].as_object().unwrap().len(), 100);
    assert_eq!((a.rate()["cost"].as_u64(), remaining(&a)), (Some(1), 17));
    let a = query(&broker, &aliases(200, "budget { remaining }"), json!({})).await;
    assert_eq!(a.status, 200, "{}", brief(&a));
    // One read of the bucket serves every alias: the balance after the
    // operation's own unit.
    assert_eq!(a.body["data"]["a0"]["remaining"], 16);
    assert_eq!(a.body["data"]["a199"]["remaining"], 16);
    for left in [15, 14, 13] {
        let a = query(&broker, "{ __typename }", json!({})).await;
        assert_eq!(remaining(&a), left);
    }
}

#[tokio::test]
async fn introspection_past_the_depth_limit_is_too_deep() {
    let broker = Broker::start(&slow(500));
    let of_type = format!(
        "{{ __type(name: \"Channel\") {{ {} name {} }} }}",
        "ofType { ".repeat(12),
        "}".repeat(12)
    );
    let fields = "{ __schema { types { fields { type { fields { type { fields { type { fields { type { name } } } } } } } } } } }";
    for q in [of_type.as_str(), fields] {
        let a = query(&broker, q, json!({})).await;
        assert_eq!(
            (a.status, a.code()),
            (400, &json!("QUERY_TOO_DEEP")),
            "{}",
            brief(&a)
        );
        assert_eq!(a.body["errors"][0]["extensions"]["max"], 10);
        assert_eq!(a.rate()["cost"], 1);
    }
    assert_eq!(
        remaining(&query(&broker, "{ __typename }", json!({})).await),
        497
    );
    let a = query(
        &broker,
        "{ __type(name: \"Channel\") { name fields { name type { kind ofType { name } } } } }",
        json!({}),
    )
    .await;
    assert_eq!(a.status, 200, "{}", brief(&a));
    assert_eq!(a.body["data"]["__type"]["name"], "Channel");
    assert_eq!(a.rate()["cost"], 100);
}

#[tokio::test]
async fn a_history_read_pays_for_the_bytes_it_renders() {
    let broker = Broker::start(&slow(300));
    let big = "x".repeat(16 * 1024);
    for _ in 0..4 {
        assert_eq!(
            broker.publish_http("doc:big", json!(big)).await.status(),
            200
        );
    }
    // Each data is the JSON string: 16,386 bytes; four of them start 65
    // KiB: 65 units (recovery_per_kib = 1), as a socket recovering them
    // would pay, besides the estimate's 1 + 1 + 4×2 (all returned).
    let q = "{ channel(name: \"doc:big\") { history(last: 4) { seq data } } }";
    let a = query(&broker, q, json!({})).await;
    assert_eq!(a.status, 200, "{}", brief(&a));
    assert_eq!(
        a.body["data"]["channel"]["history"]
            .as_array()
            .unwrap()
            .len(),
        4
    );
    assert_eq!(
        (a.rate()["cost"].as_u64(), a.rate()["estimated"].as_u64()),
        (Some(75), Some(10))
    );
    assert_eq!(remaining(&a), 296 - 75);
    // Every render of data pays: three aliases, three times the bytes.
    let q3 = "{ channel(name: \"doc:big\") { history(last: 4) { a: data b: data c: data } } }";
    let a = query(&broker, q3, json!({})).await;
    assert_eq!(a.status, 200);
    // 1 + 1 + 4×3, and 196,632 bytes: 193 started KiB.
    assert_eq!(a.rate()["cost"], 14 + 193);
    assert_eq!(remaining(&a), 296 - 75 - 207);
    // The estimate fits the 14 left, the bytes do not: nothing of them is
    // handed over, and a status-only client sees the 429.
    let a = query(&broker, q, json!({})).await;
    assert_eq!(a.status, 429, "{}", brief(&a));
    assert!(a.header("retry-after").is_some());
    assert_eq!(a.body["errors"][0]["extensions"]["code"], "RATE_LIMITED");
    assert!(!a.text.contains(&big[..100]), "no data was sent");
    assert_eq!(a.rate()["cost"], 10, "{}", brief(&a));
    // Bytes that could never fit the bucket (65 units past a capacity of
    // 60) are refused as too expensive, with nothing handed over and the
    // estimate kept: the read was done.
    let small = Broker::start(&slow(60));
    for _ in 0..4 {
        assert_eq!(
            small.publish_http("doc:big", json!(big)).await.status(),
            200
        );
    }
    let q = "{ channel(name: \"doc:big\") { history(last: 4) { data } } }";
    let a = query(&small, q, json!({})).await;
    assert_eq!(a.status, 200, "{}", brief(&a));
    let x = &a.body["errors"][0]["extensions"];
    assert_eq!(
        (&x["code"], &x["cost"], &x["max"]),
        (&json!("QUERY_TOO_EXPENSIVE"), &json!(65), &json!(60))
    );
    assert!(!a.text.contains(&big[..100]), "no data was sent");
    assert_eq!(
        a.rate()["cost"],
        6,
        "1 + 1 + 4, not refunded: {}",
        brief(&a)
    );
    assert_eq!(remaining(&a), 56 - 6);
}

#[tokio::test]
async fn channels_pays_for_what_it_scans_and_first_zero_scans_nothing() {
    let broker = Broker::start(&slow(100));
    for i in 0..3500 {
        broker.node.hub.publish(&format!("scan:{i}"), "1");
    }
    let a = query(
        &broker,
        "{ channels(prefix: \"\", first: 0) { name } }",
        json!({}),
    )
    .await;
    assert_eq!(a.status, 200, "{}", brief(&a));
    assert_eq!(a.body["data"]["channels"], json!([]));
    assert_eq!(a.rate()["cost"], 1);
    // Three full thousands of channels scanned: 3 units besides the list
    // (none occupied: the estimate's 1 + 1 is refunded down to 1).
    let a = query(
        &broker,
        "{ channels(prefix: \"\", first: 1) { name } }",
        json!({}),
    )
    .await;
    assert_eq!(a.status, 200, "{}", brief(&a));
    assert_eq!(a.rate()["cost"], 1 + 3, "{}", brief(&a));
    assert_eq!(remaining(&a), 95);
}

#[tokio::test]
async fn refused_documents_cost_malformed_until_the_bucket_is_empty() {
    let broker = Broker::start(&slow(7));
    let deep = format!("{}{}", "{ a ".repeat(200), "}".repeat(200));
    let too_large = format!("{{ __typename {} }}", " ".repeat(64 * 1024));
    let mut left = 7;
    for (body, status, code) in [
        (json!({"query": "{"}), 400, "BAD_REQUEST"),
        (json!({"query": "{ noSuchField }"}), 400, ""),
        (json!({"query": deep}), 400, "QUERY_TOO_DEEP"),
        (
            json!({"query": "{ ...A } fragment A on Query { ...A }"}),
            400,
            "BAD_REQUEST",
        ),
        (
            json!({"query": "query A { __typename } query B { __typename }"}),
            400,
            "BAD_REQUEST",
        ),
        (json!({"query": too_large}), 413, "PAYLOAD_TOO_LARGE"),
        (json!({"notquery": 1}), 400, "BAD_REQUEST"),
    ] {
        let a = post(&broker, Some(API_KEY), GQL_JSON, &body).await;
        assert_eq!(a.status, status, "{}", brief(&a));
        if !code.is_empty() {
            assert_eq!(a.code(), code, "{}", brief(&a));
        }
        left -= 1;
        assert_eq!(remaining(&a), left, "{}", brief(&a));
        assert_eq!(a.rate()["cost"], 1);
    }
    // Empty: garbage is refused for the bucket, as any operation.
    let a = post(&broker, Some(API_KEY), GQL_JSON, &json!({"query": "{"})).await;
    assert_eq!(
        (a.status, a.code()),
        (429, &json!("RATE_LIMITED")),
        "{}",
        brief(&a)
    );
    assert!(a.header("retry-after").is_some());
    let m = broker.metrics().await;
    assert!(
        metric_value(
            &m,
            "tidegate_rejections_total{layer=\"graphql\",reason=\"bad_request\"}"
        ) >= 5.0
    );
}

/// A document the plan admits but that takes long to validate and run (a
/// plan that allows 2^17 fields): the worker that read it goes on serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_operation_runs_off_the_worker_that_serves_healthz() {
    let broker =
        Broker::start("[node]\nworkers = 1\n[plans.free.costs]\ngraphql_max_fields = 1000000\n");
    let doc = chain(17, 2, "__typename");
    let url = broker.url("/v1/graphql");
    let gql = tokio::spawn(async move {
        let r = reqwest::Client::new()
            .post(url)
            .bearer_auth(API_KEY)
            .header("content-type", "application/json")
            .body(json!({"query": doc}).to_string())
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let body: Value = r.json().await.unwrap();
        (status, body, Instant::now())
    });
    // Priced (the histogram counts it just before it runs): now running.
    let series = "tidegate_graphql_cost_count{operation=\"query\"}";
    let deadline = Instant::now() + crate::common::PATIENCE;
    while metric_value(&broker.node.metrics.encode(), series) < 1.0 {
        assert!(Instant::now() < deadline, "the operation was never priced");
        tokio::task::yield_now().await;
    }
    let health = reqwest::get(broker.url("/healthz")).await.unwrap();
    assert_eq!(health.status(), 200);
    let healthy = Instant::now();
    let (status, body, answered) = gql.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"], json!({"__typename": "Query"}));
    assert!(
        healthy < answered,
        "/healthz waited for the operation: the worker was blocked"
    );
}
