//! §12 over HTTP: `/v1/graphql` after GraphQL over HTTP (media types,
//! methods, statuses), identity and permissions, the schema's reads and
//! writes, the SDL and `GET /v1/prices`. Charges and refunds are in
//! `graphql_budget.rs`.

use serde_json::{Value, json};

use crate::common::{API_KEY, Broker};

pub const GQL_JSON: &str = "application/graphql-response+json";

/// One answer: status, the headers that matter, the body as JSON and text.
pub struct Answer {
    pub status: u16,
    pub content_type: String,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
    pub text: String,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<u64> {
        self.headers.get(name)?.to_str().ok()?.parse().ok()
    }

    pub fn rate(&self) -> &Value {
        &self.body["extensions"]["rateLimit"]
    }

    pub fn code(&self) -> &Value {
        &self.body["errors"][0]["extensions"]["code"]
    }
}

async fn answer(resp: reqwest::Response) -> Answer {
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let text = resp.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or(Value::Null);
    Answer {
        status,
        content_type,
        headers,
        body,
        text,
    }
}

/// POSTs `body` with `auth` as the bearer credential, accepting `accept`.
pub async fn post(broker: &Broker, auth: Option<&str>, accept: &str, body: &Value) -> Answer {
    let mut r = reqwest::Client::new()
        .post(broker.url("/v1/graphql"))
        .header("content-type", "application/json")
        .header("accept", accept)
        .body(body.to_string());
    if let Some(a) = auth {
        r = r.bearer_auth(a);
    }
    answer(r.send().await.unwrap()).await
}

/// POSTs a query with the API key, accepting `graphql-response+json`.
pub async fn query(broker: &Broker, q: &str, variables: Value) -> Answer {
    post(
        broker,
        Some(API_KEY),
        GQL_JSON,
        &json!({"query": q, "variables": variables}),
    )
    .await
}

async fn get(broker: &Broker, auth: Option<&str>, params: &[(&str, &str)]) -> Answer {
    let url = reqwest::Url::parse_with_params(&broker.url("/v1/graphql"), params).unwrap();
    let mut r = reqwest::Client::new().get(url).header("accept", GQL_JSON);
    if let Some(a) = auth {
        r = r.bearer_auth(a);
    }
    answer(r.send().await.unwrap()).await
}

#[tokio::test]
async fn queries_answer_in_the_media_type_the_client_accepts() {
    let broker = Broker::start("");
    let q = json!({"query": "{ __typename }"});
    let a = post(&broker, Some(API_KEY), GQL_JSON, &q).await;
    assert_eq!(a.status, 200);
    assert!(a.content_type.starts_with(GQL_JSON), "{}", a.content_type);
    assert_eq!(a.body["data"], json!({"__typename": "Query"}));
    for accept in ["application/json", "*/*", ""] {
        let a = post(&broker, Some(API_KEY), accept, &q).await;
        assert_eq!(a.status, 200, "{accept}");
        assert!(
            a.content_type.starts_with("application/json"),
            "{accept}: {}",
            a.content_type
        );
    }
    let a = post(&broker, Some(API_KEY), "text/html", &q).await;
    assert_eq!((a.status, a.code()), (406, &json!("NOT_ACCEPTABLE")));
    // Every response carries the runtime signal; no operation is free
    // (`__typename` weighs nothing, the operation costs its minimum).
    let a = post(&broker, Some(API_KEY), GQL_JSON, &q).await;
    assert_eq!(a.header("x-ratelimit-limit"), Some(200));
    let left = a.header("x-ratelimit-remaining").unwrap();
    assert!(left <= 199, "{left}");
    assert!(a.header("x-ratelimit-reset").is_some());
    let r = a.rate();
    assert_eq!(
        (r["cost"].as_u64(), r["estimated"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(r["maxSingleCost"], 200);
    assert_eq!(r["remaining"], left);
}

#[tokio::test]
async fn request_errors_are_400_for_graphql_responses_and_200_for_json() {
    let broker = Broker::start("");
    for (q, code) in [("{", Some("BAD_REQUEST")), ("{ noSuchField }", None)] {
        let body = json!({"query": q});
        let a = post(&broker, Some(API_KEY), GQL_JSON, &body).await;
        assert_eq!(a.status, 400, "{q}: {}", a.text);
        assert!(
            a.body.get("data").is_none(),
            "a request error has no data: {}",
            a.text
        );
        assert!(a.body["errors"][0]["message"].as_str().is_some());
        if let Some(code) = code {
            assert_eq!(a.code(), code);
        }
        // A refused document costs `malformed` (1): garbage is not free.
        assert_eq!(a.rate()["cost"], 1, "charged: {}", a.text);
        assert_eq!(a.rate()["estimated"], 1, "{}", a.text);
        let a = post(&broker, Some(API_KEY), "application/json", &body).await;
        assert_eq!(a.status, 200, "{q}");
        assert!(a.body["errors"].is_array());
    }
    // Variables that do not fit their types.
    let body = json!({"query": "query($n: Int!) { channels(prefix: \"\", first: $n) { name } }", "variables": {"n": "x"}});
    let a = post(&broker, Some(API_KEY), GQL_JSON, &body).await;
    assert_eq!(a.status, 400, "{}", a.text);
}

#[tokio::test]
async fn malformed_requests_methods_and_sizes_have_their_statuses() {
    let broker = Broker::start("");
    let c = reqwest::Client::new();
    // No content type.
    let r = c
        .post(broker.url("/v1/graphql"))
        .bearer_auth(API_KEY)
        .body(r#"{"query":"{ __typename }"}"#)
        .send()
        .await
        .unwrap();
    let a = answer(r).await;
    assert_eq!(
        (a.status, a.code()),
        (415, &json!("UNSUPPORTED_MEDIA_TYPE"))
    );
    // A batch of operations, no query, a query that is not a string.
    for body in [
        json!([{"query": "{ __typename }"}]),
        json!({"notquery": "{ __typename }"}),
        json!({"query": 7}),
        json!({"query": "{ __typename }", "variables": [1]}),
    ] {
        let a = post(&broker, Some(API_KEY), GQL_JSON, &body).await;
        assert_eq!((a.status, a.code()), (400, &json!("BAD_REQUEST")), "{body}");
    }
    let a = post(
        &broker,
        Some(API_KEY),
        GQL_JSON,
        &json!([{"query": "{ __typename }"}]),
    )
    .await;
    assert!(
        a.body["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("one operation per request")
    );
    // Past 64 KiB of document.
    let big = format!("{{ __typename {} }}", " ".repeat(64 * 1024));
    let a = post(&broker, Some(API_KEY), GQL_JSON, &json!({"query": big})).await;
    assert_eq!((a.status, a.code()), (413, &json!("PAYLOAD_TOO_LARGE")));
    assert_eq!(
        a.header("x-ratelimit-limit"),
        Some(200),
        "a known caller sees its balance"
    );
    // Nesting that the parser should never see.
    let deep = format!("{}{}", "{ a ".repeat(5000), "}".repeat(5000));
    let a = post(&broker, Some(API_KEY), GQL_JSON, &json!({"query": deep})).await;
    assert_eq!((a.status, a.code()), (400, &json!("QUERY_TOO_DEEP")));
    // GET: queries only.
    let a = get(&broker, Some(API_KEY), &[("query", "{ __typename }")]).await;
    assert_eq!(a.status, 200, "{}", a.text);
    let a = get(
        &broker,
        Some(API_KEY),
        &[
            (
                "query",
                "query($n: Int) { channels(prefix: \"\", first: $n) { name } }",
            ),
            ("variables", r#"{"n":1}"#),
        ],
    )
    .await;
    assert_eq!(
        (a.status, a.body["data"]["channels"].clone()),
        (200, json!([]))
    );
    let a = get(
        &broker,
        Some(API_KEY),
        &[(
            "query",
            "mutation { publish(channel: \"doc:1\", data: 1) { seq } }",
        )],
    )
    .await;
    assert_eq!(a.status, 405);
    assert_eq!(a.headers.get("allow").unwrap(), "POST");
    let r = c.put(broker.url("/v1/graphql")).send().await.unwrap();
    assert_eq!(r.status(), 405);
    // Subscriptions need the WebSocket.
    let a = query(
        &broker,
        "subscription { messages(channel: \"doc:1\") { seq } }",
        json!({}),
    )
    .await;
    assert_eq!(a.status, 400);
    assert!(a.text.contains("graphql-transport-ws"));
}

#[tokio::test]
async fn identity_decides_the_account_the_globs_and_the_bucket() {
    let broker = Broker::start(
        "[[api_keys]]\nkey = \"narrow-key-0123456789\"\naccount = \"acme\"\npub_channels = [\"news:*\"]\nsub_channels = [\"news:*\"]\n\
         [[api_keys]]\nkey = \"tidegate-sample-publish-key\"\naccount = \"acme\"\npub_channels = [\"*\"]\nsub_channels = [\"*\"]\n",
    );
    let q = json!({"query": "{ budget { remaining capacity refillPerSec resetIn } }"});
    for accept in [GQL_JSON, "application/json"] {
        let a = post(&broker, None, accept, &q).await;
        assert_eq!(
            (a.status, a.code()),
            (401, &json!("UNAUTHENTICATED")),
            "{accept}"
        );
        let a = post(&broker, Some("not-a-key-or-token"), accept, &q).await;
        assert_eq!((a.status, a.code()), (401, &json!("UNAUTHENTICATED")));
    }
    // A key: its bucket (the account plan's burst 200, refill 100/s),
    // read after the operation's own unit was taken.
    let a = post(&broker, Some(API_KEY), GQL_JSON, &q).await;
    let budget = &a.body["data"]["budget"];
    assert_eq!(
        (&budget["capacity"], &budget["refillPerSec"]),
        (&json!(200), &json!(100.0)),
        "{}",
        a.text
    );
    assert!(
        (199..=200).contains(&budget["remaining"].as_u64().unwrap()),
        "{}",
        a.text
    );
    // A token: the account's budget, and the token's globs.
    let token = broker.token("globex");
    let publish =
        json!({"query": "mutation { publish(channel: \"doc:1\", data: {a: 1}) { channel seq } }"});
    let a = post(&broker, Some(&token), GQL_JSON, &publish).await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert_eq!(a.body["data"]["publish"]["channel"], "doc:1");
    assert_eq!(a.rate()["cost"], 1);
    // The balance right after the charge (a later read may already have
    // refilled: the account refills 100/s).
    assert!(a.rate()["remaining"].as_u64().unwrap() <= 199, "{}", a.text);
    let a = post(&broker, Some(&token), GQL_JSON, &q).await;
    assert_eq!(a.body["data"]["budget"]["capacity"], 200);
    assert!(a.body["data"]["budget"]["remaining"].as_u64().unwrap() <= 200);
    for (who, q) in [
        (token.as_str(), "{ channel(name: \"secret:1\") { seq } }"),
        (
            token.as_str(),
            "mutation { publish(channel: \"secret:1\", data: 1) { seq } }",
        ),
        (
            "narrow-key-0123456789",
            "{ channel(name: \"doc:1\") { seq } }",
        ),
        (
            "narrow-key-0123456789",
            "mutation { publishBatch(messages: [{channel: \"news:1\", data: 1}, {channel: \"doc:1\", data: 2}]) { seq } }",
        ),
    ] {
        let a = post(&broker, Some(who), GQL_JSON, &json!({"query": q})).await;
        assert_eq!(
            (a.status, a.code()),
            (403, &json!("FORBIDDEN")),
            "{q}: {}",
            a.text
        );
        assert_eq!(a.body["data"], Value::Null);
    }
    // The refused batch published nothing.
    let a = query(&broker, "{ channel(name: \"news:1\") { seq } }", json!({})).await;
    assert_eq!(a.body["data"]["channel"]["seq"], 0, "{}", a.text);
    let m = broker.metrics().await;
    assert!(
        crate::common::metric_value(
            &m,
            "tidegate_rejections_total{layer=\"graphql\",reason=\"forbidden\"}"
        ) >= 4.0
    );
    assert!(
        crate::common::metric_value(
            &m,
            "tidegate_rejections_total{layer=\"graphql\",reason=\"unauthorized\"}"
        ) >= 4.0
    );
}

#[tokio::test]
async fn channels_history_and_publishes_are_the_brokers_own() {
    let broker = Broker::start("");
    let mut sub = broker.client("acme").await;
    sub.call(json!({"type":"subscribe","channel":"doc:h"}), 1)
        .await;
    // Published over HTTP byte for byte (1.50 stays 1.50, keys keep their order).
    let r = reqwest::Client::new()
        .post(broker.url("/v1/publish"))
        .bearer_auth(API_KEY)
        .header("content-type", "application/json")
        .body(r#"{"channel":"doc:h","data":{"b":1,"a":[1.50,2]}}"#)
        .send()
        .await
        .unwrap();
    let first: Value = r.json().await.unwrap();
    let m = query(
        &broker,
        "mutation($d: JSON!) { publish(channel: \"doc:h\", data: $d) { channel seq } two: publishBatch(messages: [{channel: \"doc:h\", data: 3}, {channel: \"doc:h\", data: \"four\"}]) { seq } }",
        json!({"d": {"z": [true, null]}}),
    )
    .await;
    assert_eq!(m.status, 200, "{}", m.text);
    let seq = m.body["data"]["publish"]["seq"].as_u64().unwrap();
    assert_eq!(seq, first["seq"].as_u64().unwrap() + 1);
    let batch: Vec<u64> = m.body["data"]["two"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(batch, vec![seq + 1, seq + 2]);
    // Subscribers get every message, in order.
    for data in [
        json!({"b":1,"a":[1.5,2]}),
        json!({"z":[true,null]}),
        json!(3),
        json!("four"),
    ] {
        let got = sub.next_json().await;
        assert_eq!(got["data"], data);
    }
    let a = query(
        &broker,
        "{ channel(name: \"doc:h\") { name seq subscribers history(last: 3) { seq data } all: history(since: 0, last: 10) { seq data } } channels(prefix: \"doc:\") { name subscribers } }",
        json!({}),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.text);
    let ch = &a.body["data"]["channel"];
    assert_eq!(ch["seq"].as_u64(), Some(seq + 2));
    assert_eq!(ch["subscribers"], 1);
    assert_eq!(ch["history"].as_array().unwrap().len(), 3);
    assert_eq!(ch["history"][0]["seq"].as_u64(), Some(seq));
    assert_eq!(ch["all"].as_array().unwrap().len(), 4);
    assert!(
        a.text.contains(r#""data":{"b":1,"a":[1.50,2]}"#),
        "byte for byte: {}",
        a.text
    );
    assert_eq!(
        a.body["data"]["channels"],
        json!([{"name": "doc:h", "subscribers": 1}])
    );
    let a = query(
        &broker,
        "{ channel(name: \"doc:h\") { history(since: 0, last: 1) { seq } } }",
        json!({}),
    )
    .await;
    assert_eq!(
        a.body["data"]["channel"]["history"][0]["seq"].as_u64(),
        Some(seq + 2)
    );
    // Presence is not on for this namespace.
    let a = query(
        &broker,
        "{ channel(name: \"doc:h\") { presenceStats { users } } }",
        json!({}),
    )
    .await;
    assert_eq!(a.code(), "BAD_REQUEST");
    assert!(a.text.contains("presence is not enabled for"), "{}", a.text);
    // Bad channel names and sizes are refused.
    let a = query(
        &broker,
        "{ channel(name: \"bad name\") { seq } }",
        json!({}),
    )
    .await;
    assert_eq!(a.code(), "BAD_REQUEST");
    let a = query(
        &broker,
        "{ channels(prefix: \"\", first: -1) { name } }",
        json!({}),
    )
    .await;
    assert_eq!(a.code(), "BAD_REQUEST");
}

#[tokio::test]
async fn the_schema_and_the_price_list_are_published() {
    let broker = Broker::start("[plans.free.costs]\ngraphql_list_size = 7\n");
    let sdl = reqwest::get(broker.url("/v1/graphql/schema.graphql"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for needle in [
        "directive @cost(weight: String!)",
        "directive @listSize(",
        r#"budget: Budget! @cost(weight: "0")"#,
        r#"joins: [Member!]! @cost(weight: "1") @listSize(assumedSize: 7)"#,
        "type Channel {",
        "publishBatch(messages: [PublishInput!]!): [Published!]!",
        "messages(channel: String!, since: Seq): Message!",
    ] {
        assert!(sdl.contains(needle), "{needle} not in\n{sdl}");
    }
    let r = reqwest::get(broker.url("/v1/prices")).await.unwrap();
    assert_eq!(r.status(), 401);
    crate::common::check_refusal_body(401, &crate::common::refusal_json(r).await, None);
    let p: Value = reqwest::Client::new()
        .get(broker.url("/v1/prices"))
        .bearer_auth(API_KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(p["plan"], "free");
    assert_eq!(p["account"], "acme");
    assert_eq!(p["budgets"]["apiKey"]["capacity"], 200);
    assert_eq!(p["budgets"]["graphql"]["chargedTo"], "apiKey");
    assert_eq!(p["graphql"]["listSize"], 7);
    assert_eq!(
        p["graphql"]["lists"]["Query.channels"],
        json!({"slicingArgument": "first", "default": 50})
    );
    assert_eq!(p["socket"]["subscribe"], 1);
    assert_eq!(p["http"]["publish"]["base"], 1);
    // The same document through GraphQL, at the minimum of an operation.
    let a = query(&broker, "{ prices { json } }", json!({})).await;
    assert_eq!(a.body["data"]["prices"]["json"], p);
    assert_eq!(a.rate()["cost"], 1);
    let token = broker.token("globex");
    let p: Value = reqwest::Client::new()
        .get(broker.url("/v1/prices"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(p["budgets"]["graphql"]["chargedTo"], "account");
    assert!(p["budgets"].get("apiKey").is_none());
}

#[tokio::test]
async fn a_draining_node_answers_503() {
    let mut broker = Broker::start("[cluster]\ndrain_ms = 2000\n");
    // A socket keeps the drain going while the request is made.
    let _c = broker.client("acme").await;
    broker.begin_shutdown();
    let deadline = std::time::Instant::now() + crate::common::PATIENCE;
    while !broker.node.is_draining() {
        assert!(std::time::Instant::now() < deadline);
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let a = query(&broker, "{ __typename }", json!({})).await;
    assert_eq!((a.status, a.code()), (503, &json!("DRAINING")));
    assert_eq!(a.header("retry-after"), Some(1));
}
