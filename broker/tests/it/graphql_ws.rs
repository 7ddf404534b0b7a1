//! GraphQL subscriptions over `graphql-transport-ws` (§12) against a real
//! broker, from a WebSocket client speaking the protocol by hand: the
//! protocol's close codes, per-operation refusals on an open socket,
//! recovery with `since`, queries and mutations over the socket, and the
//! socket machinery's own ends (1008, 1012, 4003, 4001) on this path.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::common::{API_KEY, Broker, Client};

pub const SUB: &str =
    "subscription($c: String!, $s: Seq) { messages(channel: $c, since: $s) { seq data } }";

/// A socket on `/v1/graphql` offering `graphql-transport-ws`, optionally
/// with `Authorization` on the upgrade.
pub async fn open(b: &Broker, authorization: Option<&str>) -> Client {
    let mut req = format!("ws://{}/v1/graphql", b.addr)
        .into_client_request()
        .unwrap();
    req.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        "graphql-transport-ws".parse().unwrap(),
    );
    if let Some(a) = authorization {
        req.headers_mut()
            .insert("Authorization", format!("Bearer {a}").parse().unwrap());
    }
    let (ws, resp) = tokio_tungstenite::connect_async(req).await.unwrap();
    let protocol = resp
        .headers()
        .get("sec-websocket-protocol")
        .map(|v| v.to_str().unwrap().to_owned());
    assert_eq!(protocol.as_deref(), Some("graphql-transport-ws"));
    Client::new(ws, protocol)
}

/// An acknowledged connection for `credential`.
pub async fn connected(b: &Broker, credential: &str) -> Client {
    let mut c = open(b, None).await;
    c.send(init(credential)).await;
    let ack = c.next_json().await;
    assert_eq!(ack, json!({"type":"connection_ack"}));
    c
}

pub async fn subscribe(c: &mut Client, id: &str, query: &str, variables: Value) {
    c.send(json!({"type":"subscribe","id":id,"payload":{"query":query,"variables":variables}}))
        .await;
}

/// A raw `graphql-transport-ws` socket from a never-read small window
/// that has sent `frames` (for tests of what the broker holds for it);
/// [`crate::bounds_memory::reading`] reads it later.
pub async fn never_reading(b: &Broker, frames: &[Value]) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let window = crate::common::small_window(b.addr).await;
    let mut s =
        crate::common::upgrade_path(window, b.addr, "/v1/graphql", "graphql-transport-ws").await;
    for f in frames {
        s.write_all(&crate::common::masked_text(f.to_string().as_bytes()))
            .await
            .unwrap();
    }
    s
}

/// `connection_init` with `Bearer credential`.
pub fn init(credential: &str) -> Value {
    json!({"type":"connection_init","payload":{"authorization": format!("Bearer {credential}")}})
}

/// The `seq`s of the `next` messages (after the `connection_ack`) up to
/// the first other message, and that message (a subscription's end).
pub async fn nexts_then_end(c: &mut Client) -> (Vec<u64>, Value) {
    let mut got = Vec::new();
    loop {
        let m = c.next_json().await;
        match m["type"].as_str() {
            Some("connection_ack") => continue,
            Some("next") => got.push(m["payload"]["data"]["messages"]["seq"].as_u64().unwrap()),
            _ => return (got, m),
        }
    }
}

/// The next message for operation `id` (others are skipped).
pub async fn next_for(c: &mut Client, id: &str) -> Value {
    c.until(|v| v["id"] == id).await
}

/// The `seq`s of `n` `next` messages of `id`.
async fn seqs(c: &mut Client, id: &str, n: usize) -> Vec<u64> {
    let mut out = Vec::new();
    for _ in 0..n {
        let m = next_for(c, id).await;
        assert_eq!(m["type"], "next", "{m}");
        out.push(m["payload"]["data"]["messages"]["seq"].as_u64().unwrap());
    }
    out
}

/// Waits until `channel` has `n` subscribers on this node (operations run
/// concurrently: a subscription is live once the hub counts it).
pub async fn live(b: &Broker, channel: &str, n: u64) {
    let deadline = Instant::now() + crate::common::PATIENCE;
    while b.node.hub.subscriber_count(channel) != n {
        assert!(
            Instant::now() < deadline,
            "{channel} never had {n} subscribers"
        );
        tokio::task::yield_now().await;
    }
}

/// The first `error` message among what arrives.
async fn first_error(c: &mut Client) -> Value {
    c.until(|v| v["type"] == "error").await
}

async fn publish(b: &Broker, channel: &str, data: Value) -> u64 {
    b.published(channel, data).await
}

/// Reads until the server closes; the close code.
async fn close_code(c: &mut Client) -> Option<u16> {
    c.closed().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_delivers_its_selection_recovers_after_since_and_publishes_by_mutation() {
    let b = Broker::start("");
    let mut c = connected(&b, API_KEY).await;
    let q = r#"subscription { m: messages(channel: "doc:g1") { s: seq channel __typename data } }"#;
    subscribe(&mut c, "live", q, json!({})).await;
    live(&b, "doc:g1", 1).await;
    // A query over the socket.
    subscribe(&mut c, "q", "{ budget { capacity } }", json!({})).await;
    let answer = next_for(&mut c, "q").await;
    assert_eq!(answer["type"], "next");
    assert!(
        answer["payload"]["data"]["budget"]["capacity"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert_eq!(next_for(&mut c, "q").await["type"], "complete");
    let s1 = publish(&b, "doc:g1", json!({"text":"one"})).await;
    let m = next_for(&mut c, "live").await;
    assert_eq!(m["type"], "next", "{m}");
    assert_eq!(
        m["payload"]["data"],
        json!({"m":{"s":s1,"channel":"doc:g1","__typename":"Message","data":{"text":"one"}}})
    );
    // The first next carries the charge (§12's runtime signal): messages,
    // seq, channel and data at 1 each, __typename free.
    let rate = &m["payload"]["extensions"]["rateLimit"];
    assert_eq!(rate["cost"], 4, "{m}");
    // A mutation over the socket: next, complete, and the subscriber gets
    // the message (before or after the mutation's answer).
    subscribe(
        &mut c,
        "pub",
        "mutation($d: JSON!) { publish(channel: \"doc:g1\", data: $d) { seq } }",
        json!({"d": {"text":"two"}}),
    )
    .await;
    let (mut s2, mut delivered, mut completed) = (None, None, false);
    while s2.is_none() || delivered.is_none() || !completed {
        let m = c.next_json().await;
        match (m["id"].as_str(), m["type"].as_str()) {
            (Some("pub"), Some("next")) => {
                assert!(m["payload"]["extensions"]["rateLimit"]["cost"].as_u64() > Some(0));
                s2 = m["payload"]["data"]["publish"]["seq"].as_u64();
            }
            (Some("pub"), Some("complete")) => completed = true,
            (Some("live"), Some("next")) => {
                assert!(
                    m["payload"].get("extensions").is_none(),
                    "only the first carries it"
                );
                delivered = m["payload"]["data"]["m"]["s"].as_u64();
            }
            _ => panic!("unexpected {m}"),
        }
    }
    assert_eq!(s2, delivered);
    let s2 = s2.unwrap();
    let s3 = publish(&b, "doc:g1", json!(3)).await;
    // Complete stops it: a new subscriber with since recovers all three in
    // order, then live ones, each once.
    c.send(json!({"type":"complete","id":"live"})).await;
    subscribe(&mut c, "again", SUB, json!({"c":"doc:g1","s": s1 - 1})).await;
    let first = next_for(&mut c, "again").await;
    assert_eq!(first["payload"]["extensions"]["recovered"], true, "{first}");
    assert_eq!(first["payload"]["data"]["messages"]["seq"], s1);
    assert_eq!(seqs(&mut c, "again", 2).await, vec![s2, s3]);
    let s4 = publish(&b, "doc:g1", json!(4)).await;
    assert_eq!(seqs(&mut c, "again", 1).await, vec![s4]);
    // The one that completed sent nothing more: the next message of any
    // operation after s4 is the new subscriber's s5.
    let s5 = publish(&b, "doc:g1", json!(5)).await;
    let m = c.next_json().await;
    assert_eq!(
        (
            m["id"].clone(),
            m["payload"]["data"]["messages"]["seq"].clone()
        ),
        (json!("again"), json!(s5))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_on_the_upgrade_or_in_connection_init_names_the_account() {
    let b = Broker::start("");
    let token = b.token_with("acme", &["doc:*"], &[], None);
    // The upgrade's Authorization, with an empty connection_init.
    let mut c = open(&b, Some(&token)).await;
    c.send(json!({"type":"connection_init"})).await;
    assert_eq!(c.next_json().await["type"], "connection_ack");
    subscribe(&mut c, "1", SUB, json!({"c":"doc:t"})).await;
    live(&b, "doc:t", 1).await;
    let s = publish(&b, "doc:t", json!(1)).await;
    assert_eq!(seqs(&mut c, "1", 1).await, vec![s]);
    let handle = b.node.sockets.iter().next().map(|h| h.account.to_string());
    assert_eq!(handle.as_deref(), Some("acme"));
    // Its globs: a channel outside sub_channels is refused, one operation.
    subscribe(&mut c, "2", SUB, json!({"c":"chat:1"})).await;
    let e = next_for(&mut c, "2").await;
    assert_eq!(e["type"], "error", "{e}");
    assert_eq!(e["payload"][0]["extensions"]["code"], "FORBIDDEN");
    let s = publish(&b, "doc:t", json!(2)).await;
    assert_eq!(seqs(&mut c, "1", 1).await, vec![s], "the socket stays open");
}

/// Opens a socket and sends `frames`; the close code that follows.
async fn closed_after(b: &Broker, frames: &[Value]) -> Option<u16> {
    let mut c = open(b, None).await;
    for f in frames {
        c.send(f.clone()).await;
    }
    close_code(&mut c).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_protocol_error_closes_with_its_code() {
    let b = Broker::start("");
    let init = init(API_KEY);
    let sub = json!({"type":"subscribe","id":"1","payload":{"query":"{ budget { capacity } }"}});
    // 4400: not a protocol message.
    assert_eq!(
        closed_after(&b, &[json!({"type":"hello"})]).await,
        Some(4400)
    );
    let mut c = open(&b, None).await;
    c.send_raw(tokio_tungstenite::tungstenite::Message::binary(vec![1, 2]))
        .await;
    assert_eq!(close_code(&mut c).await, Some(4400), "binary");
    // 4401: subscribe before the ack.
    assert_eq!(
        closed_after(&b, std::slice::from_ref(&sub)).await,
        Some(4401)
    );
    // 4403: a refused credential, or none.
    let bad = json!({"type":"connection_init","payload":{"authorization":"Bearer nope"}});
    assert_eq!(closed_after(&b, &[bad]).await, Some(4403));
    assert_eq!(
        closed_after(&b, &[json!({"type":"connection_init"})]).await,
        Some(4403)
    );
    // 4429: a second connection_init.
    assert_eq!(
        closed_after(&b, &[init.clone(), init.clone()]).await,
        Some(4429)
    );
    // 4409: an id still running (a subscription never completes).
    let live =
        json!({"type":"subscribe","id":"x","payload":{"query": SUB, "variables":{"c":"doc:1"}}});
    let mut c = open(&b, None).await;
    c.send(init.clone()).await;
    assert_eq!(c.next_json().await["type"], "connection_ack");
    c.send(live.clone()).await;
    c.send(live).await;
    assert_eq!(close_code(&mut c).await, Some(4409));
    // 4408: no connection_init within 3 s.
    let started = Instant::now();
    let mut c = open(&b, None).await;
    assert_eq!(close_code(&mut c).await, Some(4408));
    assert!(started.elapsed() >= Duration::from_millis(2900));
    let m = b.metrics().await;
    for reason in [
        "bad_request",
        "subscribe_before_ack",
        "init_timeout",
        "duplicate_id",
        "too_many_inits",
    ] {
        assert!(
            m.contains(&format!(
                "tidegate_rejections_total{{layer=\"graphql\",reason=\"{reason}\"}}"
            )),
            "{reason} counted: {m}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_concern_one_operation_and_the_socket_stays_open() {
    let b = Broker::start(
        "[plans.free]\nmessages_per_sec = 0.001\nburst = 4\nmax_subscriptions = 2\n\
         [plans.free.costs]\ngraphql_max_single = 60\nmax_single = 4\n",
    );
    let mut c = connected(&b, API_KEY).await;
    // Too expensive: 1 + 50 × (1 + 1) = 101 > 60.
    subscribe(
        &mut c,
        "big",
        "{ channels(prefix: \"doc\") { name seq } }",
        json!({}),
    )
    .await;
    let e = next_for(&mut c, "big").await;
    assert_eq!(e["type"], "error", "{e}");
    assert_eq!(e["payload"][0]["extensions"]["code"], "QUERY_TOO_EXPENSIVE");
    assert_eq!(e["payload"][0]["extensions"]["max"], 60);
    // The cap on running operations: two subscriptions, the third refused.
    subscribe(&mut c, "a", SUB, json!({"c":"doc:1"})).await;
    subscribe(&mut c, "b", SUB, json!({"c":"doc:2"})).await;
    live(&b, "doc:2", 1).await;
    subscribe(&mut c, "c", SUB, json!({"c":"doc:3"})).await;
    let e = next_for(&mut c, "c").await;
    assert_eq!(
        e["payload"][0]["extensions"]["code"], "TOO_MANY_SUBSCRIPTIONS",
        "{e}"
    );
    // The frame bucket (burst 4, all spent): rate limited with the wait.
    subscribe(&mut c, "d", SUB, json!({"c":"doc:4"})).await;
    let e = next_for(&mut c, "d").await;
    let x = &e["payload"][0]["extensions"];
    assert_eq!(x["code"], "RATE_LIMITED", "{e}");
    assert!(x["retryAfterMs"].as_u64().unwrap() > 1000, "{e}");
    // Still open: the live subscriptions deliver.
    let s = publish(&b, "doc:2", json!(1)).await;
    assert_eq!(seqs(&mut c, "b", 1).await, vec![s]);
    let m = b.metrics().await;
    for reason in ["query_too_expensive", "too_many_subscriptions"] {
        assert!(
            m.contains(&format!(
                "tidegate_rejections_total{{layer=\"graphql\",reason=\"{reason}\"}}"
            )),
            "{reason}: {m}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_keys_empty_bucket_refuses_operations_one_by_one() {
    let b = Broker::start(
        "[plans.free]\naccount_burst = 12\naccount_messages_per_sec = 0.01\naccount_sample_every = 1\n",
    );
    let mut c = connected(&b, API_KEY).await;
    // `{ seq data }` under messages costs 3: four fit in 12, the fifth not
    // (the operations run at once: whichever is charged last).
    for id in 1..=5 {
        subscribe(
            &mut c,
            &id.to_string(),
            SUB,
            json!({"c": format!("doc:{id}")}),
        )
        .await;
    }
    let e = first_error(&mut c).await;
    let x = &e["payload"][0]["extensions"];
    assert_eq!(x["code"], "RATE_LIMITED", "{e}");
    assert_eq!(x["cost"], 3);
    assert!(x["retryAfterMs"].as_u64().unwrap() > 1000);
    let refused: u64 = e["id"].as_str().unwrap().parse().unwrap();
    let other = if refused == 4 { 3 } else { 4 };
    let channel = format!("doc:{other}");
    live(&b, &channel, 1).await;
    // HTTP publish spends the same bucket (empty now): publish through the
    // node itself to see the socket and its subscriptions live.
    let s = b.node.publish(&channel, "1", "test", None).await.seq;
    assert_eq!(seqs(&mut c, &other.to_string(), 1).await, vec![s]);
    assert_eq!(
        b.publish_http(&channel, json!(2)).await.status(),
        429,
        "one bucket"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tokens_account_budget_exhausted_closes_with_1008() {
    let b = Broker::start(
        "[plans.free]\naccount_burst = 9\naccount_messages_per_sec = 0.01\naccount_sample_every = 1\n",
    );
    let token = b.token("acme");
    let mut c = connected(&b, &token).await;
    let mut other = b.client("acme").await;
    for id in ["1", "2", "3", "4"] {
        subscribe(&mut c, id, SUB, json!({"c": format!("doc:{id}")})).await;
    }
    let e = first_error(&mut c).await;
    assert_eq!(e["payload"][0]["extensions"]["code"], "RATE_LIMITED", "{e}");
    assert_eq!(close_code(&mut c).await, Some(1008));
    assert_eq!(
        other.closed().await,
        Some(1008),
        "every socket of the account"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operators_drain_and_token_expiry_close_graphql_sockets_too() {
    let mut b = Broker::start("[admin]\nkey = \"an-admin-key-0123456789\"\n");
    let mut c = connected(&b, API_KEY).await;
    let r = reqwest::Client::new()
        .post(b.url("/v1/admin/disconnect"))
        .bearer_auth("an-admin-key-0123456789")
        .json(&json!({"account":"acme"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(close_code(&mut c).await, Some(4003));
    // A token about to expire: 4001.
    let token = b.mint(tidegate::auth::Claims {
        sub: "acme".into(),
        exp: tidegate::auth::unix_now() + 2,
        plan: None,
        role: None,
        sub_channels: vec!["doc:*".into()],
        pub_channels: vec![],
        info: None,
    });
    let mut c = connected(&b, &token).await;
    assert_eq!(close_code(&mut c).await, Some(4001));
    // The drain: 1012.
    let mut c = connected(&b, API_KEY).await;
    b.begin_shutdown();
    assert_eq!(close_code(&mut c).await, Some(1012));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_without_the_subprotocol_is_refused_before_the_socket() {
    let b = Broker::start("");
    let req = format!("ws://{}/v1/graphql", b.addr)
        .into_client_request()
        .unwrap();
    match tokio_tungstenite::connect_async(req).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
            assert_eq!(resp.status(), 400);
            let body: Value = serde_json::from_slice(resp.body().as_deref().unwrap()).unwrap();
            assert_eq!(body["errors"][0]["extensions"]["code"], "BAD_REQUEST");
        }
        other => panic!("expected a 400, got {:?}", other.map(|_| ())),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_ends_with_slow_consumer_and_resumes_from_last_seq_losing_nothing() {
    let b = Broker::start(
        "[plans.free]\naccount_burst = 100000\naccount_messages_per_sec = 100000\n\
         outbound_high_water_bytes = 65536\noutbound_grace_ms = 60000\n\
         [socket]\nsend_buffer_bytes = 4096\n[history]\nsize = 4000\n",
    );
    let sub =
        json!({"type":"subscribe","id":"s","payload":{"query": SUB, "variables":{"c":"doc:slow"}}});
    let s = never_reading(&b, &[init(API_KEY), sub]).await;
    live(&b, "doc:slow", 1).await;
    // Not reading: 2,000 messages of 1 KiB are far past the 64 KiB mark.
    let data = format!("\"{}\"", "x".repeat(1024));
    let mut published = Vec::new();
    for _ in 0..2000 {
        published.push(b.node.publish("doc:slow", &data, "test", None).await.seq);
    }
    let dropped = b
        .metric("tidegate_rejections_total{layer=\"outbound\",reason=\"slow_consumer\"}")
        .await;
    assert!(dropped > 0.0, "the mark held: messages were dropped");
    // Now read: every next in order, then the subscription's end.
    let mut c = crate::bounds_memory::reading(s).await;
    let (got, end) = nexts_then_end(&mut c).await;
    let x = &end["payload"][0]["extensions"];
    assert_eq!(
        (end["type"].clone(), end["id"].clone()),
        (json!("error"), json!("s")),
        "{end}"
    );
    assert_eq!(x["code"], "SLOW_CONSUMER", "{end}");
    let last = x["lastSeq"].as_u64().unwrap();
    assert!(x["dropped"].as_u64().unwrap() > 0, "{end}");
    assert_eq!(
        got,
        published[..got.len()].to_vec(),
        "in order, no gap before the hole"
    );
    assert_eq!(got.last().copied().unwrap_or(published[0] - 1), last);
    // Resume with since: lastSeq: the rest, each once, in order.
    subscribe(&mut c, "again", SUB, json!({"c":"doc:slow","s": last})).await;
    let rest = seqs(&mut c, "again", published.len() - got.len()).await;
    assert_eq!(rest, published[got.len()..].to_vec());
}
