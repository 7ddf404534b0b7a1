//! An SSE stream's position (§14, issue 42): any stream the plan allows
//! fits its 4 KiB (the compact form does not repeat the request's
//! channel names, and holds each `seq` as a 48-bit residue: the `pro`
//! plan's 500 channels take 4,009 bytes), resumes every channel with no
//! gap and no duplicate,
//! the named form of earlier builds still resumes, and a position that is
//! not this stream's is 400 `bad_request`, after the subscription cap.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::json;
use tidegate::protocol::position::{MAX_POSITION_BYTES, Position};

use crate::common::Broker;
use crate::sse_client::open;
use crate::sse_stream::{publish, stream};

/// The `pro` plan (500 subscriptions, the shipped plans' most) for
/// `reader`, and for `acme` (the sample API key's account, which
/// publishes), with budgets that 1,000 publishes and a 500-channel stream
/// do not reach.
const ROOMY: &str = "[accounts.reader]\nplan = \"pro\"\n\
     [accounts.acme]\nplan = \"pro\"\n\
     [plans.pro]\nmessages_per_sec = 100000\nburst = 100000\n\
     account_messages_per_sec = 100000\naccount_burst = 100000\n";

/// `n` channels of `len` bytes (`doc:` and digits).
fn named(n: usize, len: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("doc:{i:0>width$}", width = len - 4))
        .collect()
}

/// The longest names `n` channels can have in one request: a request's
/// URI is at most 65,534 bytes (the `http` crate's `Uri`; a longer one is
/// 400 before the broker sees it), and each channel costs its name and
/// `&channel=`; the token and the path take under 1 KiB.
fn longest_in_a_request(n: usize) -> usize {
    ((65_534 - 1024) / n - "&channel=".len()).min(128)
}

fn query(channels: &[String]) -> String {
    let pairs: Vec<String> = channels.iter().map(|c| format!("channel={c}")).collect();
    pairs.join("&")
}

#[actix_rt::test]
async fn the_plans_most_channels_of_the_longest_names_open_and_resume() {
    let broker = Broker::start(ROOMY);
    let max = broker
        .node
        .config
        .load()
        .account_limits("reader")
        .max_subscriptions as usize;
    assert_eq!(max, 500, "the pro plan");
    // The position does not depend on the names' length (the unit tests
    // fill it with 510 of 128 bytes); the request does: 500 channels of
    // 128 bytes are a 68 KiB URI, which no HTTP stack here takes.
    let len = longest_in_a_request(max);
    assert!(len >= 100, "{len}");
    let channels = named(max, len);
    let mut s = stream(&broker, "reader", &query(&channels), &[]).await;
    broker.wait_sockets(1).await;
    // One message on every channel, each with its id within 4 KiB (new
    // channels' seqs are clock-based: several channels may share one).
    let mut first = BTreeMap::new();
    for (n, c) in channels.iter().enumerate() {
        first.insert(c.clone(), publish(&broker, c, n as u64).await);
    }
    let mut got = BTreeMap::new();
    while got.len() < first.len() {
        let e = s.event().await;
        assert!(e.is("message"), "{e:?}");
        let id = e.id.clone().expect("every message carries an id");
        assert!(id.len() <= MAX_POSITION_BYTES, "{} bytes", id.len());
        let m = e.json();
        let seq = m["seq"].as_u64().unwrap();
        let channel = m["channel"].as_str().unwrap().to_owned();
        assert!(got.insert(channel, seq).is_none(), "no duplicate: {m}");
    }
    assert_eq!(got, first);
    let position = s.last_id.clone().unwrap();
    assert_eq!(position.len(), 9 + 8 * max, "the compact form");
    assert!(position.len() <= MAX_POSITION_BYTES, "{}", position.len());
    let resumed = Position::resume(&channels, &position).unwrap();
    for (c, seq) in &first {
        let now = tidegate::hub::seq_floor();
        assert_eq!(resumed.get(c, now), Some(*seq), "the position names {c}");
    }
    drop(s);
    broker.wait_sockets(0).await;
    // Missed while away: one more on every channel.
    let mut missed = BTreeSet::new();
    for (n, c) in channels.iter().enumerate() {
        missed.insert((c.clone(), publish(&broker, c, 1000 + n as u64).await));
    }
    let mut s = stream(
        &broker,
        "reader",
        &query(&channels),
        &[("Last-Event-ID", &position)],
    )
    .await;
    let (mut recovered, mut held) = (BTreeSet::new(), BTreeSet::new());
    while recovered.len() < channels.len() || held.len() < missed.len() {
        let e = s.event().await;
        let data = e.json();
        let channel = data["channel"].as_str().unwrap().to_owned();
        if e.is("recovered") {
            assert_eq!(data["recovered"], true, "{data}");
            assert!(recovered.insert(channel), "one recovered event each");
        } else {
            assert!(e.is("message"), "{e:?}");
            let seq = data["seq"].as_u64().unwrap();
            assert!(recovered.contains(&channel), "held after its recovered");
            assert!(held.insert((channel, seq)), "no duplicate: {data}");
        }
    }
    assert_eq!(
        held, missed,
        "every missed message, none before the position"
    );
    // Then live, once.
    let live = publish(&broker, &channels[0], 2000).await;
    assert_eq!(s.message().await["seq"], live);
}

#[actix_rt::test]
async fn a_position_of_the_named_form_still_resumes() {
    let broker = Broker::start("");
    let channels = ["doc:n1", "doc:n2", "doc:n3"];
    let a = publish(&broker, "doc:n1", 0).await;
    let b = publish(&broker, "doc:n2", 0).await;
    let after_a = publish(&broker, "doc:n1", 1).await;
    let after_b = publish(&broker, "doc:n2", 1).await;
    // As an earlier build wrote it, naming a channel this stream lacks;
    // doc:n3 is not named and starts live.
    let named = Position::named_token([("doc:n2", b), ("doc:gone", 1), ("doc:n1", a)]);
    let query = "channel=doc:n1&channel=doc:n2&channel=doc:n3";
    let mut s = stream(&broker, "acme", query, &[("Last-Event-ID", &named)]).await;
    let mut seen = BTreeMap::new();
    let mut recovered = BTreeSet::new();
    while recovered.len() < 2 || seen.len() < 2 {
        let e = s.event().await;
        let data = e.json();
        let channel = data["channel"].as_str().unwrap().to_owned();
        if e.is("recovered") {
            assert_eq!(data["recovered"], true);
            recovered.insert(channel);
        } else {
            assert!(
                seen.insert(channel, data["seq"].clone()).is_none(),
                "{data}"
            );
        }
    }
    assert_eq!(
        seen,
        BTreeMap::from([
            ("doc:n1".to_owned(), json!(after_a)),
            ("doc:n2".to_owned(), json!(after_b))
        ])
    );
    let live = publish(&broker, "doc:n3", 0).await;
    assert_eq!(s.message().await["seq"], live, "doc:n3 started live");
    // What the stream writes from there is the compact form.
    let id = s.last_id.clone().unwrap();
    assert!(id.starts_with("~2."), "{id}");
    let p = Position::resume(&channels, &id).unwrap();
    assert_eq!(p.get("doc:n3", tidegate::hub::seq_floor()), Some(live));
}

#[actix_rt::test]
async fn a_position_not_of_this_stream_is_a_bad_request_after_the_cap() {
    let broker = Broker::start("");
    let token = broker.token("acme");
    let mut s = stream(&broker, "acme", "channel=doc:a&channel=doc:b", &[]).await;
    broker.wait_sockets(1).await;
    publish(&broker, "doc:a", 0).await;
    s.message().await;
    let position = s.last_id.clone().unwrap();
    drop(s);
    let refused = |query: String, position: String| {
        let addr = broker.addr;
        let path = format!("/v1/sse?token={token}&{query}");
        async move {
            let headers = [("Last-Event-ID", position.as_str())];
            open(addr, &path, &headers).await.err().expect("refused")
        }
    };
    // Another order, another list, a truncated or unknown-version token.
    for (query, token) in [
        ("channel=doc:b&channel=doc:a", position.clone()),
        ("channel=doc:a", position.clone()),
        (
            "channel=doc:a&channel=doc:b",
            position[..position.len() - 1].to_owned(),
        ),
        (
            "channel=doc:a&channel=doc:b",
            position.replacen("~2.", "~9.", 1),
        ),
    ] {
        let (status, body, _) = refused(query.to_owned(), token.clone()).await;
        assert_eq!(
            (status, body["error"].as_str()),
            (400, Some("bad_request")),
            "{query} {token}: {body}"
        );
    }
    let (_, body, _) = refused("channel=doc:b&channel=doc:a".into(), position.clone()).await;
    assert!(
        body["message"].as_str().unwrap().contains("another list"),
        "{body}"
    );
    // The subscription cap comes first, whatever the position: the
    // issue's 101 channels of 14 bytes.
    let many: Vec<String> = (0..101).map(|i| format!("doc:{i:0>10}")).collect();
    let (status, body, _) = refused(query(&many), "~2.garbage".into()).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("too_many_subscriptions")),
        "{body}"
    );
    // And 100 of them open.
    let s = stream(&broker, "acme", &query(&many[..100]), &[]).await;
    assert!(s.last_id.as_ref().unwrap().len() <= MAX_POSITION_BYTES);
}
