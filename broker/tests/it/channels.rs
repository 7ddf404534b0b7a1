//! §2–3: subscribe, unsubscribe, publish, acks, permissions, `seq`,
//! recovery with `since`, fan-out.

use serde_json::json;

use crate::common::{Broker, Client};

#[tokio::test]
async fn publish_reaches_every_subscriber_in_seq_order_with_acks() {
    let broker = Broker::start("");
    let mut subs = Vec::new();
    for _ in 0..3 {
        let mut c = broker.client("acme").await;
        let ack = c
            .call(json!({"type":"subscribe","channel":"doc:42"}), 1)
            .await;
        assert_eq!((&ack["type"], &ack["id"]), (&json!("ack"), &json!(1)));
        assert!(ack["seq"].is_u64(), "the channel's position (§11): {ack}");
        subs.push(c);
    }
    let mut publisher = broker.client("acme").await;
    let mut seqs = Vec::new();
    for i in 0..5 {
        let ack = publisher
            .call(
                json!({"type":"publish","channel":"doc:42","data":{"n":i}}),
                10 + i,
            )
            .await;
        assert_eq!(ack["type"], "ack");
        seqs.push(ack["seq"].as_u64().unwrap());
    }
    assert!(
        seqs.windows(2).all(|w| w[1] > w[0]),
        "seq strictly increasing: {seqs:?}"
    );
    for c in &mut subs {
        for (i, seq) in seqs.iter().enumerate() {
            let m = c.next_json().await;
            assert_eq!(
                m,
                json!({"type":"message","channel":"doc:42","seq":seq,"data":{"n":i}})
            );
        }
    }
}

#[tokio::test]
async fn frames_without_id_get_no_ack_but_still_work() {
    let broker = Broker::start("");
    let mut c = broker.client("acme").await;
    c.send(json!({"type":"subscribe","channel":"doc:1"})).await;
    c.send(json!({"type":"publish","channel":"doc:1","data":"hi"}))
        .await;
    let m = c.next_json().await;
    assert_eq!(
        (m["type"].as_str(), m["data"].as_str()),
        (Some("message"), Some("hi"))
    );
}

#[tokio::test]
async fn unsubscribe_stops_delivery() {
    let broker = Broker::start("");
    let mut c = broker.client("acme").await;
    c.call(json!({"type":"subscribe","channel":"doc:1"}), 1)
        .await;
    c.call(json!({"type":"unsubscribe","channel":"doc:1"}), 2)
        .await;
    c.call(json!({"type":"publish","channel":"doc:1","data":1}), 3)
        .await;
    // The next thing this socket sees is the answer to a later frame, not
    // a message from the unsubscribed channel.
    let next = c.call(json!({"type":"budget"}), 4).await;
    assert_eq!(next["type"], "budget");
}

#[tokio::test]
async fn token_globs_decide_permissions() {
    let broker = Broker::start("");
    let token = broker.token_with("acme", &["doc:*"], &["chat:*"], None);
    let mut c = Client::connect(&broker.ws_url(), &token).await.unwrap();
    c.next_json().await;
    let e = c
        .call(json!({"type":"subscribe","channel":"chat:1"}), 1)
        .await;
    assert_eq!(
        (e["type"].as_str(), e["code"].as_str()),
        (Some("error"), Some("forbidden"))
    );
    assert_eq!(e["channel"], "chat:1");
    let e = c
        .call(json!({"type":"publish","channel":"doc:1","data":1}), 2)
        .await;
    assert_eq!(e["code"], "forbidden");
    let ok = c
        .call(json!({"type":"subscribe","channel":"doc:a:b"}), 3)
        .await;
    assert_eq!(ok["type"], "ack", "* crosses colons");
    let ok = c
        .call(json!({"type":"publish","channel":"chat:1","data":1}), 4)
        .await;
    assert_eq!(ok["type"], "ack");
    // A token without claims allows nothing.
    let bare = broker.token_with("acme", &[], &[], None);
    let mut c = Client::connect(&broker.ws_url(), &bare).await.unwrap();
    c.next_json().await;
    assert_eq!(
        c.call(json!({"type":"subscribe","channel":"doc:1"}), 1)
            .await["code"],
        "forbidden"
    );
}

#[tokio::test]
async fn bad_channel_names_are_bad_requests() {
    let broker = Broker::start("");
    let mut c = broker.client("acme").await;
    for (i, name) in ["", "doc 1", "doc/1", &"x".repeat(129)].iter().enumerate() {
        let e = c
            .call(json!({"type":"subscribe","channel":name}), i as u64)
            .await;
        assert_eq!(e["code"], "bad_request", "{name:?}");
    }
}

#[tokio::test]
async fn subscriptions_are_capped_per_connection() {
    let broker = Broker::start("[plans.free]\nmax_subscriptions = 2\n");
    let mut c = broker.client("acme").await;
    assert_eq!(
        c.call(json!({"type":"subscribe","channel":"doc:1"}), 1)
            .await["type"],
        "ack"
    );
    assert_eq!(
        c.call(json!({"type":"subscribe","channel":"doc:2"}), 2)
            .await["type"],
        "ack"
    );
    let e = c
        .call(json!({"type":"subscribe","channel":"doc:3"}), 3)
        .await;
    assert_eq!(e["code"], "too_many_subscriptions");
    assert_eq!(
        c.call(json!({"type":"subscribe","channel":"doc:1"}), 4)
            .await["type"],
        "ack",
        "re-subscribing is not a new one"
    );
    c.call(json!({"type":"unsubscribe","channel":"doc:2"}), 5)
        .await;
    assert_eq!(
        c.call(json!({"type":"subscribe","channel":"doc:3"}), 6)
            .await["type"],
        "ack"
    );
}

/// Publishes data 0..5 on `channel`; returns the first message's seq.
async fn publish_five(p: &mut Client, channel: &str) -> u64 {
    let mut first = 0;
    for i in 0..5u64 {
        let ack = p
            .call(json!({"type":"publish","channel":channel,"data":i}), 1 + i)
            .await;
        if i == 0 {
            first = ack["seq"].as_u64().unwrap();
        }
    }
    first
}

#[tokio::test]
async fn since_recovers_missed_messages_after_the_ack_without_gap_or_duplicate() {
    let broker = Broker::start("[history]\nsize = 10\n");
    let mut p = broker.client("acme").await;
    let first = publish_five(&mut p, "doc:9").await;
    let mut c = broker.client("acme").await;
    let ack = c
        .call(
            json!({"type":"subscribe","channel":"doc:9","since":first + 1}),
            100,
        )
        .await;
    assert_eq!(
        ack,
        json!({"type":"ack","id":100,"recovered":true,"seq":first + 4}),
        "the ack's seq is the last message recovered"
    );
    // Published while the recovered ones are on their way: must follow them.
    p.call(json!({"type":"publish","channel":"doc:9","data":5}), 50)
        .await;
    let mut got = Vec::new();
    for _ in 0..4 {
        let m = c.next_json().await;
        got.push((m["seq"].as_u64().unwrap(), m["data"].as_u64().unwrap()));
    }
    assert_eq!(
        got,
        [
            (first + 2, 2),
            (first + 3, 3),
            (first + 4, 4),
            (first + 5, 5)
        ]
    );
}

#[tokio::test]
async fn since_beyond_history_says_not_recovered() {
    let broker = Broker::start("[history]\nsize = 2\n");
    let mut p = broker.client("acme").await;
    let first = publish_five(&mut p, "doc:9").await;
    let mut c = broker.client("acme").await;
    let ack = c
        .call(
            json!({"type":"subscribe","channel":"doc:9","since":first}),
            7,
        )
        .await;
    assert_eq!(ack["recovered"], false);
    let ack = c
        .call(
            json!({"type":"subscribe","channel":"doc:9","since":first + 4}),
            8,
        )
        .await;
    assert_eq!(ack["recovered"], true, "nothing missed");
    let ack = c
        .call(
            json!({"type":"subscribe","channel":"doc:never","since":5}),
            9,
        )
        .await;
    assert_eq!(ack["recovered"], false, "no state for the channel");
}

#[tokio::test]
async fn budget_frame_on_request() {
    let broker = Broker::start("");
    let mut c = broker.client("acme").await;
    let b = c.call(json!({"type":"budget"}), 4).await;
    assert_eq!(b["type"], "budget");
    assert_eq!(b["connection"]["capacity"], 20);
    assert_eq!(b["connection"]["refillPerSec"], 20.0);
    assert!(b["connection"]["remaining"].as_u64().unwrap() >= 19);
}

#[tokio::test]
async fn string_ids_are_echoed_verbatim() {
    let broker = Broker::start("");
    let mut c = broker.client("acme").await;
    c.send(json!({"type":"subscribe","channel":"doc:1","id":"sub-1"}))
        .await;
    let ack = c.next_json().await;
    assert_eq!((&ack["type"], &ack["id"]), (&json!("ack"), &json!("sub-1")));
}
