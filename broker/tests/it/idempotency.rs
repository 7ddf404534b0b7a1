//! Idempotency keys (§17) against a real broker: a retry with the same key
//! on every API is answered with the first `seq` and `duplicate`, and
//! subscribers see the message once; concurrent duplicates publish once;
//! a refused publish uses up nothing; a duplicate pays the base price; the
//! window and `idempotency_max_keys` bound what is held; two nodes sharing
//! one Redis or a Redis Cluster publish a key once.

use std::time::{Duration, Instant};

use futures_util::future::join_all;
use serde_json::{Value, json};

use crate::cluster::{prefix, subscribed, two_nodes};
use crate::common::{API_KEY, Broker, Client, PATIENCE};
use crate::graphql::query;
use crate::grpc::{authed, connect, md, msg};
use crate::redis_cluster::{Backend, on_both};

/// A POST of `{"channel","data"}` to `path` with `auth`, and the key in
/// `Idempotency-Key` when given: (status, body, headers).
async fn post(
    b: &Broker,
    path: &str,
    auth: &str,
    body: Value,
    key: Option<&str>,
) -> (u16, Value, reqwest::header::HeaderMap) {
    let mut r = reqwest::Client::new()
        .post(b.url(path))
        .bearer_auth(auth)
        .json(&body);
    if let Some(k) = key {
        r = r.header("Idempotency-Key", k);
    }
    let resp = r.send().await.unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    (status, resp.json().await.unwrap_or(Value::Null), headers)
}

async fn publish_keyed(b: &Broker, channel: &str, data: Value, key: &str) -> Value {
    let (status, body, _) = post(
        b,
        "/v1/publish",
        API_KEY,
        json!({"channel": channel, "data": data}),
        Some(key),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body
}

fn header(h: &reqwest::header::HeaderMap, name: &str) -> u64 {
    h.get(name).unwrap().to_str().unwrap().parse().unwrap()
}

/// Asserts `sub` receives the message `seq` and then nothing else before a
/// marker published after every retry: each key went out once.
async fn delivered_once(b: &Broker, sub: &mut Client, channel: &str, seq: u64) {
    let marker = b.publish_http(channel, json!("marker")).await;
    let marker: Value = marker.json().await.unwrap();
    let marker = marker["seq"].as_u64().unwrap();
    let mut seqs = Vec::new();
    while seqs.last() != Some(&marker) {
        let m = sub.until(|v| v["type"] == "message").await;
        seqs.push(m["seq"].as_u64().unwrap());
    }
    assert_eq!(
        seqs,
        [seq, marker],
        "the keyed message once, then the marker"
    );
}

#[actix_rt::test]
async fn socket_retries_get_the_first_seq_and_subscribers_see_one_message() {
    let b = Broker::start("");
    let mut sub = subscribed(&b, "reader", "doc:s").await;
    let mut publisher = b.client("acme").await;
    let frame = json!({"type":"publish","channel":"doc:s","data":{"n":1},"key":"k-1"});
    let first = publisher.call(frame.clone(), 1).await;
    assert_eq!(first["type"], "ack", "{first}");
    assert!(first.get("duplicate").is_none(), "{first}");
    let seq = first["seq"].as_u64().unwrap();
    let again = publisher.call(frame, 2).await;
    assert_eq!(again["seq"], seq, "{again}");
    assert_eq!(again["duplicate"], true, "{again}");
    // Another connection of the same account: the same publisher.
    let mut other = b.client("acme").await;
    let third = other
        .call(
            json!({"type":"publish","channel":"doc:s","data":{"n":2},"key":"k-1"}),
            3,
        )
        .await;
    assert_eq!(
        (third["seq"].as_u64(), &third["duplicate"]),
        (Some(seq), &json!(true))
    );
    delivered_once(&b, &mut sub, "doc:s", seq).await;
    assert_eq!(
        b.metric("tidegate_publish_duplicates_total{api=\"ws\"}")
            .await,
        2.0
    );
}

#[actix_rt::test]
async fn a_bad_socket_key_is_a_bad_request_naming_the_frame() {
    let b = Broker::start("");
    let mut c = b.client("acme").await;
    for (key, words) in [
        (json!(""), "must not be empty"),
        (json!("a".repeat(65)), "at most 64"),
        (json!("a b"), "may hold only"),
        (json!(7), "key must be a string"),
    ] {
        let e = c
            .call(
                json!({"type":"publish","channel":"doc:1","data":1,"key":key}),
                9,
            )
            .await;
        assert_eq!(e["type"], "error", "{e}");
        assert_eq!(e["code"], "bad_request", "{e}");
        assert!(e["message"].as_str().unwrap().contains(words), "{e}");
    }
}

#[actix_rt::test]
async fn http_retries_single_and_batch_get_the_first_seq() {
    let b = Broker::start("");
    let mut sub = subscribed(&b, "reader", "doc:h").await;
    let first = publish_keyed(&b, "doc:h", json!(1), "order-7").await;
    assert!(first.get("duplicate").is_none(), "{first}");
    let seq = first["seq"].as_u64().unwrap();
    let again = publish_keyed(&b, "doc:h", json!(2), "order-7").await;
    assert_eq!(again, json!({"seq": seq, "duplicate": true}));
    delivered_once(&b, &mut sub, "doc:h", seq).await;

    // A batch: the same key twice (the second a duplicate of the first), a
    // bad key (that message's error only), and a key already published.
    let batch = json!({"messages": [
        {"channel":"doc:h","data":1,"key":"b-1"},
        {"channel":"doc:h","data":2,"key":"b-1"},
        {"channel":"doc:h","data":3,"key":""},
        {"channel":"doc:h","data":4,"key":"order-7"},
        {"channel":"doc:h","data":5},
    ]});
    let (status, body, _) = post(&b, "/v1/publish/batch", API_KEY, batch.clone(), None).await;
    assert_eq!(status, 200, "{body}");
    let r = &body["results"];
    let b1 = r[0]["seq"].as_u64().unwrap();
    assert!(r[0].get("duplicate").is_none(), "{body}");
    assert_eq!(r[1], json!({"seq": b1, "duplicate": true}));
    assert_eq!(r[2]["error"], "bad_request", "{body}");
    assert!(
        r[2]["message"].as_str().unwrap().contains("empty"),
        "{body}"
    );
    assert_eq!(r[3], json!({"seq": seq, "duplicate": true}));
    let plain = r[4]["seq"].as_u64().unwrap();
    assert!(plain > b1);
    // The whole batch again: every keyed message is a duplicate.
    let (_, body, _) = post(&b, "/v1/publish/batch", API_KEY, batch, None).await;
    let r = &body["results"];
    assert_eq!(r[0], json!({"seq": b1, "duplicate": true}));
    assert_eq!(r[1], json!({"seq": b1, "duplicate": true}));
    assert!(
        r[4]["seq"].as_u64().unwrap() > plain,
        "unkeyed publishes again"
    );
}

#[actix_rt::test]
async fn a_bad_idempotency_key_header_is_a_bad_request() {
    let b = Broker::start("");
    for key in ["", "with space", &"x".repeat(65)] {
        let (status, body, _) = post(
            &b,
            "/v1/publish",
            API_KEY,
            json!({"channel":"doc:1","data":1}),
            Some(key),
        )
        .await;
        assert_eq!(
            (status, &body["error"]),
            (400, &json!("bad_request")),
            "{key:?}: {body}"
        );
    }
}

#[actix_rt::test]
async fn a_tokens_sub_and_its_accounts_api_key_are_one_publisher() {
    let b = Broker::start("");
    let token = b.token("acme");
    let body = json!({"channel":"doc:c","data":1});
    let (status, first, _) =
        post(&b, "/v1/client/publish", &token, body.clone(), Some("c-1")).await;
    assert_eq!(status, 200, "{first}");
    let seq = first["seq"].as_u64().unwrap();
    let (_, again, _) = post(&b, "/v1/client/publish", &token, body.clone(), Some("c-1")).await;
    assert_eq!(again, json!({"seq": seq, "duplicate": true}));
    // The API key of account acme retries the token's publish.
    let by_key = publish_keyed(&b, "doc:c", json!(1), "c-1").await;
    assert_eq!(by_key, json!({"seq": seq, "duplicate": true}));
    // Another account's key is its own publisher.
    let other = b.token("globex");
    let (_, theirs, _) = post(&b, "/v1/client/publish", &other, body, Some("c-1")).await;
    assert!(theirs["seq"].as_u64().unwrap() > seq, "{theirs}");
    assert!(theirs.get("duplicate").is_none(), "{theirs}");
}

#[actix_rt::test]
async fn grpc_unary_and_stream_retries_get_the_first_seq() {
    let b = Broker::start("");
    let mut sub = subscribed(&b, "reader", "doc:g").await;
    let mut c = connect(&b).await;
    let keyed = |id: &str| tidegate::grpc::proto::PublishRequest {
        idempotency_key: "g-1".into(),
        ..msg("doc:g", "1", id)
    };
    let first = c
        .publish(authed(keyed("a"), API_KEY))
        .await
        .unwrap()
        .into_inner();
    assert!(!first.duplicate);
    let again = c
        .publish(authed(keyed("b"), API_KEY))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((again.seq, again.duplicate), (first.seq, true));
    // A stream: a retry of the unary one, then a new key twice.
    let reqs = vec![
        keyed("c"),
        tidegate::grpc::proto::PublishRequest {
            idempotency_key: "g-2".into(),
            ..msg("doc:g", "2", "d")
        },
        tidegate::grpc::proto::PublishRequest {
            idempotency_key: "g-2".into(),
            ..msg("doc:g", "2", "e")
        },
        tidegate::grpc::proto::PublishRequest {
            idempotency_key: "bad key".into(),
            ..msg("doc:g", "2", "f")
        },
    ];
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
    assert_eq!((got[0].seq, got[0].duplicate), (first.seq, true));
    assert!(got[1].seq > first.seq && !got[1].duplicate);
    assert_eq!((got[2].seq, got[2].duplicate), (got[1].seq, true));
    assert_eq!(got[3].error.as_ref().unwrap().code, "bad_request");
    let mut seqs = Vec::new();
    let marker = b.publish_http("doc:g", json!("marker")).await;
    let marker = marker.json::<Value>().await.unwrap()["seq"]
        .as_u64()
        .unwrap();
    while seqs.last() != Some(&marker) {
        let m = sub.until(|v| v["type"] == "message").await;
        seqs.push(m["seq"].as_u64().unwrap());
    }
    assert_eq!(seqs, [first.seq, got[1].seq, marker]);
}

#[actix_rt::test]
async fn graphql_retries_get_the_first_seq_and_duplicate() {
    let b = Broker::start("");
    let mut sub = subscribed(&b, "reader", "doc:q").await;
    let q = r#"mutation($k: String) { publish(channel: "doc:q", data: {n: 1}, key: $k) { seq duplicate } }"#;
    let first = query(&b, q, json!({"k": "q-1"})).await;
    assert_eq!(first.status, 200, "{}", first.text);
    let seq = first.body["data"]["publish"]["seq"].clone();
    assert_eq!(first.body["data"]["publish"]["duplicate"], false);
    let again = query(&b, q, json!({"k": "q-1"})).await;
    assert_eq!(
        again.body["data"]["publish"],
        json!({"seq": seq, "duplicate": true})
    );
    let batch = r#"mutation { publishBatch(messages: [
        {channel: "doc:q", data: 2, key: "q-2"},
        {channel: "doc:q", data: 2, key: "q-2"},
        {channel: "doc:q", data: 3, key: "q-1"}]) { seq duplicate } }"#;
    let r = query(&b, batch, json!({})).await;
    let out = &r.body["data"]["publishBatch"];
    assert_eq!(out[0]["duplicate"], false, "{}", r.text);
    assert_eq!(out[1], json!({"seq": out[0]["seq"], "duplicate": true}));
    assert_eq!(out[2], json!({"seq": seq, "duplicate": true}));
    let bad = query(&b, q, json!({"k": ""})).await;
    assert_eq!(
        bad.body["errors"][0]["extensions"]["code"], "BAD_REQUEST",
        "{}",
        bad.text
    );
    let seq: u64 = seq
        .as_str()
        .map_or_else(|| seq.as_u64().unwrap(), |s| s.parse().unwrap());
    let second: u64 = match &out[0]["seq"] {
        Value::String(s) => s.parse().unwrap(),
        v => v.as_u64().unwrap(),
    };
    let marker = b.publish_http("doc:q", json!("marker")).await;
    let marker = marker.json::<Value>().await.unwrap()["seq"]
        .as_u64()
        .unwrap();
    let mut seqs = Vec::new();
    while seqs.last() != Some(&marker) {
        let m = sub.until(|v| v["type"] == "message").await;
        seqs.push(m["seq"].as_u64().unwrap());
    }
    assert_eq!(seqs, [seq, second, marker]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_duplicates_publish_once_with_one_seq() {
    let b = Broker::start("");
    let mut sub = subscribed(&b, "reader", "doc:x").await;
    let answers = join_all((0..32).map(|i| publish_keyed(&b, "doc:x", json!(i), "same"))).await;
    let seq = answers[0]["seq"].as_u64().unwrap();
    assert!(answers.iter().all(|a| a["seq"] == seq), "{answers:?}");
    let firsts = answers
        .iter()
        .filter(|a| a.get("duplicate").is_none())
        .count();
    assert_eq!(firsts, 1, "{answers:?}");
    delivered_once(&b, &mut sub, "doc:x", seq).await;
}

#[actix_rt::test]
async fn a_refused_publish_uses_up_nothing_so_its_retry_publishes() {
    let b = Broker::start(
        "[plans.free]\nmax_payload_bytes = 64\naccount_burst = 2\naccount_messages_per_sec = 0.5\naccount_sample_every = 1\n",
    );
    // Too large: refused, nothing held.
    let big = json!("x".repeat(100));
    let (status, _, _) = post(
        &b,
        "/v1/publish",
        API_KEY,
        json!({"channel":"doc:r","data":big}),
        Some("r-1"),
    )
    .await;
    assert_eq!(status, 413);
    let first = publish_keyed(&b, "doc:r", json!(1), "r-1").await;
    assert!(
        first.get("duplicate").is_none(),
        "the retry published: {first}"
    );
    // Rate limited: the bucket (2) is spent by the publish above and one
    // more, so the next keyed one is refused; its retry, once the bucket
    // refills, publishes.
    b.publish_http("doc:r", json!(2)).await;
    let (status, body, _) = post(
        &b,
        "/v1/publish",
        API_KEY,
        json!({"channel":"doc:r","data":3}),
        Some("r-2"),
    )
    .await;
    assert_eq!(status, 429, "{body}");
    let deadline = Instant::now() + PATIENCE;
    let retried = loop {
        let (status, body, _) = post(
            &b,
            "/v1/publish",
            API_KEY,
            json!({"channel":"doc:r","data":3}),
            Some("r-2"),
        )
        .await;
        if status == 200 {
            break body;
        }
        assert_eq!(status, 429, "{body}");
        assert!(Instant::now() < deadline, "the bucket never refilled");
        let wait = body["retryAfterMs"].as_u64().unwrap_or(100);
        tokio::time::sleep(Duration::from_millis(wait)).await;
    };
    assert!(retried.get("duplicate").is_none(), "{retried}");
    assert!(retried["seq"].as_u64() > first["seq"].as_u64());
}

#[actix_rt::test]
async fn a_duplicate_pays_the_base_price_only() {
    let b = Broker::start(
        "[plans.free]\naccount_messages_per_sec = 0.01\n[plans.free.costs]\npublish_per_kib = 5\n",
    );
    let data = json!("y".repeat(3000));
    let body = json!({"channel":"doc:p","data":data});
    let (_, first, h1) = post(&b, "/v1/publish", API_KEY, body.clone(), Some("p-1")).await;
    assert!(first.get("duplicate").is_none());
    assert_eq!(header(&h1, "tidegate-cost"), 1 + 3 * 5, "the full price");
    let before = header(&h1, "x-ratelimit-remaining");
    let (_, again, h2) = post(&b, "/v1/publish", API_KEY, body, Some("p-1")).await;
    assert_eq!(again["duplicate"], true);
    assert_eq!(header(&h2, "tidegate-cost"), 1, "the base price");
    assert_eq!(header(&h2, "x-ratelimit-remaining"), before - 1);
    // gRPC: the same key, the same price.
    let mut c = connect(&b).await;
    let reply = c
        .publish(authed(
            tidegate::grpc::proto::PublishRequest {
                idempotency_key: "p-1".into(),
                ..msg("doc:p", &format!("\"{}\"", "y".repeat(3000)), "")
            },
            API_KEY,
        ))
        .await
        .unwrap();
    assert_eq!(md(reply.metadata(), "tidegate-cost"), 1);
    assert!(reply.into_inner().duplicate);
    // A duplicate that finds the bucket empty is refused like any publish.
    let mut last = 200;
    for _ in 0..300 {
        let (status, body, _) = post(
            &b,
            "/v1/publish",
            API_KEY,
            json!({"channel":"doc:p","data":1}),
            Some("p-1"),
        )
        .await;
        last = status;
        if status == 429 {
            assert_eq!(body["error"], "rate_limited");
            break;
        }
    }
    assert_eq!(last, 429, "duplicates drained the bucket and were refused");
}

#[actix_rt::test]
async fn a_key_publishes_again_once_its_window_passes() {
    let b = Broker::start("[publish]\nidempotency_window_ms = 300\n");
    let first = publish_keyed(&b, "doc:w", json!(1), "w-1").await;
    let seq = first["seq"].as_u64().unwrap();
    assert_eq!(
        publish_keyed(&b, "doc:w", json!(1), "w-1").await["duplicate"],
        true
    );
    let deadline = Instant::now() + PATIENCE;
    let later = loop {
        let a = publish_keyed(&b, "doc:w", json!(1), "w-1").await;
        if a.get("duplicate").is_none() {
            break a;
        }
        assert_eq!(a["seq"], seq, "a duplicate keeps the first seq");
        assert!(Instant::now() < deadline, "the window never passed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(later["seq"].as_u64().unwrap() > seq);
}

#[actix_rt::test]
async fn keys_past_max_keys_are_evicted_oldest_first_and_counted() {
    let b = Broker::start("[publish]\nidempotency_max_keys = 2\n");
    let a = publish_keyed(&b, "doc:m", json!(1), "a").await;
    publish_keyed(&b, "doc:m", json!(1), "b").await;
    publish_keyed(&b, "doc:m", json!(1), "c").await;
    assert_eq!(b.metric("tidegate_idempotency_evictions_total").await, 1.0);
    assert_eq!(b.metric("tidegate_idempotency_keys").await, 2.0);
    assert_eq!(
        publish_keyed(&b, "doc:m", json!(1), "c").await["duplicate"],
        true
    );
    // The oldest went: its retry publishes again.
    let again = publish_keyed(&b, "doc:m", json!(1), "a").await;
    assert!(again.get("duplicate").is_none(), "{again}");
    assert!(again["seq"].as_u64() > a["seq"].as_u64());
}

on_both!(a_key_sent_to_two_nodes_publishes_once,);

async fn a_key_sent_to_two_nodes_publishes_once(redis: &impl Backend) {
    let p = prefix();
    let (a, b) = two_nodes(redis, &p, "").await;
    let mut sub = subscribed(&a, "reader", "doc:n").await;
    let first = publish_keyed(&a, "doc:n", json!(1), "n-1").await;
    assert!(first.get("duplicate").is_none(), "{first}");
    let seq = first["seq"].as_u64().unwrap();
    let on_b = publish_keyed(&b, "doc:n", json!(1), "n-1").await;
    assert_eq!(on_b, json!({"seq": seq, "duplicate": true}));
    let mut ws = b.client("acme").await;
    let ack = ws
        .call(
            json!({"type":"publish","channel":"doc:n","data":1,"key":"n-1"}),
            1,
        )
        .await;
    assert_eq!(
        (ack["seq"].as_u64(), &ack["duplicate"]),
        (Some(seq), &json!(true))
    );
    // Many at once on both nodes: one publish, one seq.
    let answers = join_all((0..16).map(|i| {
        let node = if i % 2 == 0 { &a } else { &b };
        publish_keyed(node, "doc:n", json!(i), "n-2")
    }))
    .await;
    let seq2 = answers[0]["seq"].as_u64().unwrap();
    assert!(answers.iter().all(|x| x["seq"] == seq2), "{answers:?}");
    assert_eq!(
        answers
            .iter()
            .filter(|x| x.get("duplicate").is_none())
            .count(),
        1,
        "{answers:?}"
    );
    let marker = a.publish_http("doc:n", json!("marker")).await;
    let marker = marker.json::<Value>().await.unwrap()["seq"]
        .as_u64()
        .unwrap();
    let mut seqs = Vec::new();
    while seqs.last() != Some(&marker) {
        let m = sub.until(|v| v["type"] == "message").await;
        seqs.push(m["seq"].as_u64().unwrap());
    }
    assert_eq!(seqs, [seq, seq2, marker]);
}
