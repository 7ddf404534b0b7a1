//! Issue 38's GraphQL classes over `graphql-transport-ws`: a subscription
//! renders each field once per message (aliases of `data` are not a way to
//! multiply what one publish delivers), a document refused before it runs
//! costs `malformed` here too, and an id used again after `complete` runs
//! afresh instead of inheriting the first run's answer.

use futures_util::SinkExt;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::common::{API_KEY, Broker};
use crate::graphql::query;
use crate::graphql_bounds::chain;
use crate::graphql_budget::slow;
use crate::graphql_ws::{connected, live, next_for, subscribe};

fn code(e: &Value) -> &Value {
    &e["payload"][0]["extensions"]["code"]
}

/// The key's bucket as a `{ __typename }` sees it, after that one's unit.
async fn left(b: &Broker) -> u64 {
    query(b, "{ __typename }", json!({})).await.rate()["remaining"]
        .as_u64()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_that_would_render_a_field_twice_is_refused_and_charged() {
    let b = Broker::start(&slow(100));
    let mut c = connected(&b, API_KEY).await;
    let refused = [
        r#"subscription { messages(channel: "doc:a") { a: data b: data c: data } }"#,
        r#"subscription { messages(channel: "doc:a") { ...F ...G } }
           fragment F on Message { x: data } fragment G on Message { y: data seq }"#,
        r#"subscription { a: messages(channel: "doc:a") { data } b: messages(channel: "doc:a") { data } }"#,
        r#"subscription { messages(channel: "doc:a") { seq s2: seq } }"#,
    ];
    for (i, q) in refused.iter().enumerate() {
        subscribe(&mut c, &format!("r{i}"), q, json!({})).await;
    }
    // Were any of them running, this publish would reach it.
    assert_eq!(b.publish_http("doc:a", json!({"x": 1})).await.status(), 200);
    // They run at once: their answers come in any order (and nothing
    // else is sent: none of them is running).
    let mut errors = std::collections::BTreeMap::new();
    while errors.len() < refused.len() {
        let e = c.next_json().await;
        errors.insert(e["id"].as_str().unwrap().to_owned(), e);
    }
    for e in errors.values() {
        assert_eq!(e["type"], "error", "{e}");
        assert_eq!(code(e), "BAD_REQUEST", "{e}");
        let message = e["payload"][0]["message"].as_str().unwrap();
        assert!(message.contains("a subscription"), "{message}");
    }
    assert_eq!(b.node.hub.subscriber_count("doc:a"), 0);
    // 100 − 1 publish − 4 refused documents − this read's own unit.
    assert_eq!(left(&b).await, 94);
    // The same field twice under one key is one render: it runs.
    let q = r#"subscription { messages(channel: "doc:a") { data data seq ...F } }
               fragment F on Message { data }"#;
    subscribe(&mut c, "ok", q, json!({})).await;
    live(&b, "doc:a", 1).await;
    assert_eq!(b.publish_http("doc:a", json!("one")).await.status(), 200);
    let m = next_for(&mut c, "ok").await;
    assert_eq!(m["type"], "next", "{m}");
    let data = &m["payload"]["data"]["messages"];
    assert_eq!(data["data"], "one");
    assert_eq!(data.as_object().unwrap().len(), 2, "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documents_refused_over_the_socket_cost_malformed_and_leave_it_open() {
    let b = Broker::start(&slow(50));
    let mut c = connected(&b, API_KEY).await;
    for (id, q, want) in [
        ("parse", "{".to_owned(), "BAD_REQUEST"),
        ("complex", chain(30, 2, "__typename"), "QUERY_TOO_COMPLEX"),
        (
            "deep",
            format!(
                "{{ __type(name: \"Channel\") {{ {} name {} }} }}",
                "ofType { ".repeat(12),
                "}".repeat(12)
            ),
            "QUERY_TOO_DEEP",
        ),
    ] {
        subscribe(&mut c, id, &q, json!({})).await;
        let e = next_for(&mut c, id).await;
        assert_eq!(e["type"], "error", "{e}");
        assert_eq!(code(&e), want, "{e}");
    }
    assert_eq!(left(&b).await, 50 - 3 - 1);
    // Still open.
    subscribe(&mut c, "q", "{ __typename }", json!({})).await;
    let m = next_for(&mut c, "q").await;
    assert_eq!(m["payload"]["data"]["__typename"], "Query", "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_used_again_after_complete_gets_its_own_answer() {
    let b = Broker::start("");
    let mut c = connected(&b, API_KEY).await;
    // Start, complete and start again under the same id, in one write: the
    // first run is still running when the second starts.
    for round in 0..5 {
        let first =
            json!({"type":"subscribe","id":"x","payload":{"query":"{ first: __typename }"}});
        let stop = json!({"type":"complete","id":"x"});
        let second = json!({"type":"subscribe","id":"x","payload":{"query": format!("{{ second{round}: __typename }}")}});
        for f in [first, stop, second] {
            c.ws.feed(Message::text(f.to_string())).await.unwrap();
        }
        c.ws.flush().await.unwrap();
        // The first run may have answered before its `complete` was read
        // (then it ended, and said so); what comes after is the second's.
        let second = json!({ format!("second{round}"): "Query" });
        loop {
            let m = next_for(&mut c, "x").await;
            assert_eq!(m["type"], "next", "{m}");
            if m["payload"]["data"] == second {
                break;
            }
            assert_eq!(m["payload"]["data"], json!({"first": "Query"}), "{m}");
            let end = next_for(&mut c, "x").await;
            assert_eq!(
                end["type"], "complete",
                "the first run's answer ends it: {end}"
            );
        }
        assert_eq!(next_for(&mut c, "x").await["type"], "complete");
    }
}
