//! §5: HTTP publish for backend services.

use serde_json::{Value, json};

use crate::common::{API_KEY, Broker};

async fn post(broker: &Broker, path: &str, key: &str, body: String) -> reqwest::Response {
    reqwest::Client::new()
        .post(broker.url(path))
        .bearer_auth(key)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap()
}

fn header(resp: &reqwest::Response, name: &str) -> Option<u64> {
    resp.headers().get(name)?.to_str().ok()?.parse().ok()
}

#[tokio::test]
async fn publish_returns_seq_with_rate_limit_headers_and_reaches_subscribers() {
    let broker = Broker::start("");
    let mut c = broker.client("acme").await;
    c.call(json!({"type":"subscribe","channel":"doc:7"}), 1)
        .await;
    let resp = broker.publish_http("doc:7", json!({"hello":"world"})).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-ratelimit-limit"), Some(200));
    assert_eq!(header(&resp, "x-ratelimit-remaining"), Some(199));
    assert!(header(&resp, "x-ratelimit-reset").unwrap() >= 1);
    let seq = resp.json::<Value>().await.unwrap()["seq"].as_u64().unwrap();
    assert_eq!(
        c.next_json().await,
        json!({"type":"message","channel":"doc:7","seq":seq,"data":{"hello":"world"}})
    );
}

#[tokio::test]
async fn every_refusal_has_its_status_and_the_error_body() {
    let broker = Broker::start(
        "[plans.free]\nmax_payload_bytes = 1024\n[plans.free.costs]\npublish_per_kib = 30\nmax_single = 20\n\
         [[api_keys]]\nkey = \"narrow-key-0123456789\"\naccount = \"acme\"\npub_channels = [\"news:*\"]\n\
         [[api_keys]]\nkey = \"tidegate-sample-publish-key\"\naccount = \"acme\"\n",
    );
    let check = |status: u16, code: &'static str| {
        move |resp: reqwest::Response| async move {
            assert_eq!(resp.status(), status);
            let body = crate::common::refusal_json(resp).await;
            assert_eq!(body["error"], code, "{body}");
            assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()));
        }
    };
    check(401, "unauthorized")(post(&broker, "/v1/publish", "nope", "{}".into()).await).await;
    check(400, "bad_request")(post(&broker, "/v1/publish", API_KEY, "{nope".into()).await).await;
    check(400, "bad_request")(
        post(
            &broker,
            "/v1/publish",
            API_KEY,
            json!({"channel":"a b","data":1}).to_string(),
        )
        .await,
    )
    .await;
    let big = json!({"channel":"doc:1","data":"x".repeat(2000)}).to_string();
    check(413, "payload_too_large")(post(&broker, "/v1/publish", API_KEY, big).await).await;
    let narrow = post(
        &broker,
        "/v1/publish",
        "narrow-key-0123456789",
        json!({"channel":"doc:1","data":1}).to_string(),
    )
    .await;
    assert!(header(&narrow, "x-ratelimit-limit").is_none() || narrow.status() == 403);
    check(403, "forbidden")(narrow).await;
    let costly = json!({"channel":"doc:1","data":"x".repeat(900)}).to_string();
    check(422, "cost_exceeds_max")(post(&broker, "/v1/publish", API_KEY, costly).await).await;
    let text = broker.metrics().await;
    for reason in [
        "unauthorized",
        "bad_request",
        "payload_too_large",
        "forbidden",
        "cost_exceeds_max",
    ] {
        assert!(
            text.contains(&format!(
                "tidegate_rejections_total{{layer=\"http\",reason=\"{reason}\"}}"
            )),
            "no metric for {reason}"
        );
    }
}

#[tokio::test]
async fn an_empty_bucket_answers_429_with_retry_after() {
    let broker = Broker::start(
        "[plans.free]\naccount_burst = 3\naccount_messages_per_sec = 0.5\naccount_sample_every = 1\n",
    );
    for _ in 0..3 {
        assert_eq!(broker.publish_http("doc:1", json!(1)).await.status(), 200);
    }
    let resp = broker.publish_http("doc:1", json!(1)).await;
    assert_eq!(resp.status(), 429);
    assert_eq!(header(&resp, "retry-after"), Some(2), "one token at 0.5/s");
    assert_eq!(header(&resp, "x-ratelimit-remaining"), Some(0));
    assert_eq!(header(&resp, "x-ratelimit-limit"), Some(3));
    let body = crate::common::refusal_json(resp).await;
    assert_eq!(body["error"], "rate_limited");
    assert!(body["retryAfterMs"].as_u64().unwrap() > 1000);
}

#[tokio::test]
async fn batch_answers_in_order_and_costs_its_size() {
    let broker = Broker::start(
        "[plans.free]\naccount_burst = 5\naccount_messages_per_sec = 0.1\naccount_sample_every = 1\n[http]\nmax_batch = 4\n",
    );
    let mut c = broker.client("acme").await;
    c.call(json!({"type":"subscribe","channel":"doc:b"}), 1)
        .await;
    let body = json!({"messages":[
        {"channel":"doc:b","data":1},
        {"channel":"bad name","data":2},
        {"channel":"doc:b","data":3},
    ]});
    let resp = post(&broker, "/v1/publish/batch", API_KEY, body.to_string()).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        header(&resp, "x-ratelimit-remaining"),
        Some(2),
        "3 messages cost 3"
    );
    let results = resp.json::<Value>().await.unwrap()["results"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(results.len(), 3);
    assert_eq!(results[1]["error"], "bad_request");
    let (a, b) = (
        results[0]["seq"].as_u64().unwrap(),
        results[2]["seq"].as_u64().unwrap(),
    );
    assert!(b > a);
    assert_eq!(c.next_json().await["data"], 1);
    assert_eq!(c.next_json().await["data"], 3);

    let five = json!({"messages": (0..5).map(|i| json!({"channel":"doc:b","data":i})).collect::<Vec<_>>()});
    let too_many = post(&broker, "/v1/publish/batch", API_KEY, five.to_string()).await;
    assert_eq!(too_many.status(), 400);
    crate::common::refusal_json(too_many).await;
    let three = json!({"messages": (0..3).map(|i| json!({"channel":"doc:b","data":i})).collect::<Vec<_>>()});
    let resp = post(&broker, "/v1/publish/batch", API_KEY, three.to_string()).await;
    assert_eq!(resp.status(), 429, "3 > 2 left: all or nothing");
    assert!(crate::common::refusal_json(resp).await["retryAfterMs"].as_u64() > Some(0));
}
