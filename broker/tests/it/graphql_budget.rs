//! §12's price and consume: what a GraphQL operation is charged, from
//! which bucket, the refusals before and at the charge, the refund after
//! it, shadow mode, and one budget across protocols and nodes.

use serde_json::{Value, json};

use crate::common::{API_KEY, Broker, metric_value};
use crate::graphql::{GQL_JSON, post, query};

/// A key bucket of `burst` that refills too slowly to matter in a test.
pub fn slow(burst: u32) -> String {
    format!(
        "[plans.free]\naccount_burst = {burst}\naccount_messages_per_sec = 0.01\naccount_sample_every = 1\n"
    )
}

#[tokio::test]
async fn the_worked_example_is_charged_71_then_refunded_what_its_lists_did_not_return() {
    let broker = Broker::start(&slow(200));
    let mut sub = broker.client("acme").await;
    sub.call(json!({"type":"subscribe","channel":"doc:q"}), 1)
        .await;
    for i in 0..2 {
        assert_eq!(broker.publish_http("doc:q", json!(i)).await.status(), 200);
    }
    let a = query(
        &broker,
        "{ channels(prefix: \"doc:\", first: 10) { name history(last: 5) { seq } } }",
        json!({}),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert_eq!(
        a.body["data"]["channels"][0]["history"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    // Returned: one channel (name, history) with two messages: 1 + 1 + 1 + 2.
    let r = a.rate();
    assert_eq!(r["estimated"], 71);
    assert_eq!(r["cost"], 5);
    assert_eq!(r["refunded"], 66);
    // 200 − 2 publishes − 71 + 66.
    assert_eq!(r["remaining"], 193, "{r}");
    assert_eq!(a.header("x-ratelimit-remaining"), Some(193));
    assert_eq!(a.header("x-ratelimit-limit"), Some(200));
    // The bucket agrees: the next read sees the refund (and its own unit).
    let b = query(&broker, "{ budget { remaining } }", json!({})).await;
    assert_eq!(b.body["data"]["budget"]["remaining"], 192);
}

#[tokio::test]
async fn one_bucket_is_spent_by_http_publish_and_the_publish_mutation() {
    let broker = Broker::start(&slow(5));
    for i in 0..3 {
        assert_eq!(broker.publish_http("doc:1", json!(i)).await.status(), 200);
    }
    let m = "mutation { publish(channel: \"doc:1\", data: 1) { seq } }";
    for left in [1, 0] {
        let a = query(&broker, m, json!({})).await;
        assert_eq!(a.status, 200, "{}", a.text);
        assert_eq!(a.rate()["remaining"], left);
    }
    let a = query(&broker, m, json!({})).await;
    assert_eq!(a.status, 429, "{}", a.text);
    assert!(a.body.get("data").is_none());
    let e = &a.body["errors"][0];
    assert_eq!(e["message"], "rate limit exceeded");
    let x = &e["extensions"];
    assert_eq!(
        (
            x["code"].as_str(),
            x["cost"].as_u64(),
            x["remaining"].as_u64()
        ),
        (Some("RATE_LIMITED"), Some(1), Some(0))
    );
    // One unit at 0.01/s: 100 s, exactly, not a guess.
    let ms = x["retryAfterMs"].as_u64().unwrap();
    assert!((99_000..=100_000).contains(&ms), "{ms}");
    assert_eq!(x["retryAfter"], 100);
    assert_eq!(a.header("retry-after"), Some(100));
    assert_eq!(a.header("x-ratelimit-remaining"), Some(0));
    assert_eq!(a.rate()["cost"], 0);
    // Also for a status-only client: 429 with application/json too.
    let a = post(
        &broker,
        Some(API_KEY),
        "application/json",
        &json!({"query": m}),
    )
    .await;
    assert_eq!(a.status, 429);
    // And HTTP publish sees the same empty bucket.
    assert_eq!(broker.publish_http("doc:1", json!(9)).await.status(), 429);
    assert!(
        metric_value(
            &broker.metrics().await,
            "tidegate_rejections_total{layer=\"graphql\",reason=\"rate_limited\"}"
        ) >= 2.0
    );
}

#[tokio::test]
async fn an_operation_that_could_never_fit_is_refused_before_any_charge() {
    let broker = Broker::start("");
    let q = "{ channels(prefix: \"\", first: 1000) { history(last: 50) { seq } } }";
    let a = query(&broker, q, json!({})).await;
    assert_eq!(a.status, 400, "{}", a.text);
    let e = &a.body["errors"][0];
    assert_eq!(
        e["extensions"],
        json!({"code": "QUERY_TOO_EXPENSIVE", "cost": 51001, "max": 200})
    );
    assert_eq!(
        e["message"],
        "query cost 51001 exceeds the maximum of 200; request smaller pages or fewer nested lists"
    );
    assert_eq!(
        a.header("x-ratelimit-remaining"),
        Some(200),
        "nothing was charged"
    );
    assert_eq!(
        (a.rate()["cost"].as_u64(), a.rate()["estimated"].as_u64()),
        (Some(0), Some(51001))
    );
    let a = post(
        &broker,
        Some(API_KEY),
        "application/json",
        &json!({"query": q}),
    )
    .await;
    assert_eq!(a.status, 200);
    assert_eq!(a.code(), "QUERY_TOO_EXPENSIVE");
    // Too deep is refused the same way.
    let deep = "{ channel(name: \"doc:1\") { history { data { a { b { c { d { e { f { g { h } } } } } } } } } } }";
    let a = query(&broker, deep, json!({})).await;
    assert_eq!(
        (a.status, a.code()),
        (400, &json!("QUERY_TOO_DEEP")),
        "{}",
        a.text
    );
    assert_eq!(a.body["errors"][0]["extensions"]["max"], 10);
    // A plan may set a lower maximum.
    let low = Broker::start("[plans.free.costs]\ngraphql_max_single = 60\n");
    let q = "{ channels(prefix: \"q\", first: 10) { name history(last: 5) { seq } } }";
    assert_eq!(query(&low, q, json!({})).await.rate()["maxSingleCost"], 60);
    let a = query(
        &low,
        "{ channels(prefix: \"\", first: 60) { name } }",
        json!({}),
    )
    .await;
    assert_eq!(
        a.body["errors"][0]["extensions"],
        json!({"code": "QUERY_TOO_EXPENSIVE", "cost": 61, "max": 60})
    );
    let m = broker.metrics().await;
    assert!(
        metric_value(
            &m,
            "tidegate_rejections_total{layer=\"graphql\",reason=\"query_too_expensive\"}"
        ) >= 2.0
    );
    assert!(metric_value(&m, "tidegate_graphql_cost_count{operation=\"query\"}") >= 2.0);
}

#[tokio::test]
async fn variables_size_the_price_and_batches_cost_the_sum_of_their_messages() {
    let broker = Broker::start("[plans.free.costs]\npublish_per_kib = 2\n");
    let q = "query($n: Int, $m: Int = 3) { channels(prefix: \"none:\", first: $n) { history(last: $m) { seq } } }";
    let a = query(&broker, q, json!({"n": 4})).await;
    // 1 + 4×(1 + 3): nothing returned, so all but the list field refunded.
    assert_eq!(
        (a.rate()["estimated"].as_u64(), a.rate()["cost"].as_u64()),
        (Some(17), Some(1))
    );
    let big = "x".repeat(1500);
    let a = query(
        &broker,
        "mutation($m: [PublishInput!]!) { publishBatch(messages: $m) { seq } }",
        json!({"m": [{"channel": "doc:b", "data": 1}, {"channel": "doc:b", "data": big}]}),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.text);
    // (1 + 2×1) + (1 + 2×2): each message's HTTP publish price.
    assert_eq!(a.rate()["cost"], 3 + 5);
    assert_eq!(a.rate()["refunded"], 0);
}

#[tokio::test]
async fn shadow_mode_prices_and_counts_but_never_refuses() {
    let broker = Broker::start(&format!("{}dry_run = [\"graphql\"]\n", slow(2)));
    let m = "mutation { publish(channel: \"doc:1\", data: 1) { seq } }";
    for would in [false, false, true, true] {
        let a = query(&broker, m, json!({})).await;
        assert_eq!(a.status, 200, "{}", a.text);
        assert!(a.body["data"]["publish"]["seq"].is_u64());
        assert_eq!(a.rate()["mode"], "shadow");
        assert_eq!(a.rate()["wouldRefuse"], would, "{}", a.text);
    }
    // Too expensive runs too, and says it would have been refused.
    let a = query(
        &broker,
        "{ channels(prefix: \"\", first: 100) { name } }",
        json!({}),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert_eq!(a.rate()["wouldRefuse"], true);
    let text = broker.metrics().await;
    assert!(
        metric_value(
            &text,
            "tidegate_dry_run_rejections_total{layer=\"graphql\",reason=\"rate_limited\"}"
        ) >= 3.0
    );
    assert_eq!(
        metric_value(
            &text,
            "tidegate_rejections_total{layer=\"graphql\",reason=\"rate_limited\"}"
        ),
        0.0
    );
    let over =
        "tidegate_dry_run_rejections_total{layer=\"graphql\",reason=\"query_too_expensive\"}";
    assert_eq!(metric_value(&text, over), 1.0);
}

#[tokio::test]
async fn a_token_is_charged_to_its_account_budget_shared_with_its_sockets() {
    let broker = Broker::start(&slow(30));
    let token = broker.token("globex");
    let m = json!({"query": "mutation { publish(channel: \"doc:1\", data: 1) { seq } }"});
    let mut remaining = Vec::new();
    for _ in 0..3 {
        let a = post(&broker, Some(&token), GQL_JSON, &m).await;
        remaining.push(a.rate()["remaining"].as_u64().unwrap());
    }
    assert_eq!(remaining, vec![29, 28, 27]);
    // A socket of the same account spends the same budget (sampled every
    // message here): a subscribe costs 1.
    let mut c = broker.client("globex").await;
    c.call(json!({"type":"subscribe","channel":"doc:2"}), 1)
        .await;
    let b: Value = c.call(json!({"type":"budget"}), 2).await;
    let a = post(
        &broker,
        Some(&token),
        GQL_JSON,
        &json!({"query": "{ budget { remaining } }"}),
    )
    .await;
    let left = a.body["data"]["budget"]["remaining"].as_u64().unwrap();
    assert!(left <= 26, "the socket's frames count: {left}, {b}");
}

/// Two nodes on one real Redis: a key's bucket is one budget across
/// nodes and protocols, and a channel read on any node sees what was
/// published on another.
#[actix_rt::test]
async fn budgets_and_reads_are_cluster_wide() {
    use crate::cluster::{bridge_up, node, prefix};
    let redis = crate::redis_server::RedisServer::start();
    let p = prefix();
    let a = node(&redis, "a", &p, &slow(20));
    let b = node(&redis, "b", &p, &slow(20));
    bridge_up(&a, true).await;
    bridge_up(&b, true).await;
    let mut seqs = Vec::new();
    for (on, i) in [(&a, 0), (&b, 1), (&a, 2)] {
        let m = query(
            on,
            "mutation($d: JSON!) { publish(channel: \"doc:c\", data: $d) { seq } }",
            json!({"d": i}),
        )
        .await;
        assert_eq!(m.status, 200, "{}", m.text);
        seqs.push(m.body["data"]["publish"]["seq"].as_u64().unwrap());
    }
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    // Read on b what a published: seq and history from Redis.
    let r = query(
        &b,
        "{ channel(name: \"doc:c\") { seq history(last: 3) { seq data } } }",
        json!({}),
    )
    .await;
    let ch = &r.body["data"]["channel"];
    assert_eq!(ch["seq"].as_u64(), seqs.last().copied(), "{}", r.text);
    let got: Vec<(u64, Value)> = ch["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["seq"].as_u64().unwrap(), m["data"].clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            (seqs[0], json!(0)),
            (seqs[1], json!(1)),
            (seqs[2], json!(2))
        ]
    );
    // 20 units: three mutations, the read (1 + 1 + 1 + 3×2, all returned,
    // and 1 for the started KiB of data it rendered), an HTTP publish on
    // b: a mutation on a sees the rest.
    assert_eq!(
        (r.rate()["cost"].as_u64(), r.rate()["remaining"].as_u64()),
        (Some(10), Some(7))
    );
    assert_eq!(b.publish_http("doc:c", json!(3)).await.status(), 200);
    let m = query(
        &a,
        "mutation { publish(channel: \"doc:c\", data: 4) { seq } }",
        json!({}),
    )
    .await;
    assert_eq!(m.rate()["remaining"], 5, "{}", m.text);
    assert_eq!(m.header("x-ratelimit-limit"), Some(20));
}
