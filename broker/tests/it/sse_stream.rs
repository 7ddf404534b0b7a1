//! `GET /v1/sse` (§14): the stream's head and welcome, messages with
//! positions, resume from `Last-Event-ID` (or `lastEventId`) with no gap
//! and no duplicate, `recovered:false` when history lost the position,
//! and the requests refused before the stream starts.

use serde_json::{Value, json};

use crate::common::Broker;
use crate::sse_client::{Sse, open};

/// Opens `doc` channels with the token in the query string (as a
/// browser's `EventSource`) and reads the welcome.
pub async fn stream(broker: &Broker, account: &str, query: &str, headers: &[(&str, &str)]) -> Sse {
    let path = format!("/v1/sse?token={}&{query}", broker.token(account));
    let mut s = open(broker.addr, &path, headers)
        .await
        .expect("stream opened");
    let retry = s.next().await.unwrap();
    let ms = retry.retry.expect("retry first");
    assert!((1_000..=5_000).contains(&ms), "{ms}");
    let welcome = s.event().await;
    assert!(welcome.is("welcome"), "{welcome:?}");
    assert!(welcome.id.is_some(), "the welcome carries an id");
    assert_eq!(welcome.json()["type"], "welcome");
    s
}

pub async fn publish(broker: &Broker, channel: &str, n: u64) -> u64 {
    broker.published(channel, json!({"n": n})).await
}

#[actix_rt::test]
async fn head_welcome_and_messages_with_positions() {
    let broker = Broker::start("");
    let mut s = stream(&broker, "acme", "channel=doc:1&channel=doc:2", &[]).await;
    assert_eq!(
        s.header("content-type").as_deref(),
        Some("text/event-stream")
    );
    assert_eq!(s.header("cache-control").as_deref(), Some("no-cache"));
    assert_eq!(s.header("x-accel-buffering").as_deref(), Some("no"));
    let welcome_id = s.last_id.clone();
    // Two channels starting live: their positions arrive as ids alone.
    broker.wait_sockets(1).await;
    let seq1 = publish(&broker, "doc:1", 1).await;
    let seq2 = publish(&broker, "doc:2", 2).await;
    let m1 = s.message().await;
    assert_eq!(m1, json!({"channel":"doc:1","seq":seq1,"data":{"n":1}}));
    let id1 = s.last_id.clone();
    let m2 = s.message().await;
    assert_eq!(m2, json!({"channel":"doc:2","seq":seq2,"data":{"n":2}}));
    assert_ne!(s.last_id, id1, "each message moves the position");
    assert_ne!(s.last_id, welcome_id);
    assert_eq!(
        broker
            .metric("tidegate_connections{transport=\"sse\"}")
            .await,
        1.0
    );
    drop(s);
    broker.wait_sockets(0).await;
    assert_eq!(
        broker
            .metric("tidegate_connections{transport=\"sse\"}")
            .await,
        0.0
    );
}

#[actix_rt::test]
async fn resume_continues_with_no_gap_and_no_duplicate() {
    let broker = Broker::start("");
    let mut s = stream(&broker, "acme", "channel=doc:r&channel=doc:q", &[]).await;
    broker.wait_sockets(1).await;
    let mut seqs = Vec::new();
    for n in 0..3 {
        seqs.push(publish(&broker, "doc:r", n).await);
    }
    s.message().await;
    s.message().await;
    // Cut after the second message: the third was sent but is not taken.
    let position = s.last_id.clone().unwrap();
    drop(s);
    broker.wait_sockets(0).await;
    for n in 3..5 {
        seqs.push(publish(&broker, "doc:r", n).await);
    }
    let mut s = stream(
        &broker,
        "acme",
        "channel=doc:r&channel=doc:q",
        &[("Last-Event-ID", &position)],
    )
    .await;
    let recovered = s.event().await;
    assert!(recovered.is("recovered"), "{recovered:?}");
    assert_eq!(
        recovered.json(),
        json!({"channel":"doc:r","recovered":true})
    );
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(s.message().await["seq"].as_u64().unwrap());
    }
    assert_eq!(got, seqs[2..], "held messages after the position, in order");
    // doc:q had no message, but its position came as an id when it went
    // live: it resumes too.
    let q = s.event().await;
    assert_eq!(
        q.json(),
        json!({"channel":"doc:q","recovered":true}),
        "{q:?}"
    );
    // Then live, once.
    let live = publish(&broker, "doc:r", 5).await;
    assert_eq!(s.message().await["seq"], live);
}

#[actix_rt::test]
async fn the_query_parameter_resumes_and_the_header_wins() {
    let broker = Broker::start("");
    let mut s = stream(&broker, "acme", "channel=doc:h", &[]).await;
    broker.wait_sockets(1).await;
    publish(&broker, "doc:h", 0).await;
    s.message().await;
    let position = s.last_id.clone().unwrap();
    drop(s);
    let second = publish(&broker, "doc:h", 1).await;
    let mut s = stream(
        &broker,
        "acme",
        &format!("channel=doc:h&lastEventId={position}"),
        &[],
    )
    .await;
    assert!(s.event().await.is("recovered"));
    assert_eq!(s.message().await["seq"], second);
    drop(s);
    // A header naming an older position wins over the parameter.
    let mut older = crate::sse_client::open(
        broker.addr,
        &format!(
            "/v1/sse?token={}&channel=doc:h&lastEventId=garbage*",
            broker.token("acme")
        ),
        &[("Last-Event-ID", &position)],
    )
    .await
    .expect("the header's position is used");
    loop {
        let e = older.event().await;
        if e.is("message") {
            assert_eq!(e.json()["seq"], second);
            break;
        }
    }
}

#[actix_rt::test]
async fn recovered_false_when_history_no_longer_holds_the_position() {
    let broker = Broker::start("[history]\nsize = 2\n");
    let mut s = stream(&broker, "acme", "channel=doc:l", &[]).await;
    broker.wait_sockets(1).await;
    publish(&broker, "doc:l", 0).await;
    s.message().await;
    let position = s.last_id.clone().unwrap();
    drop(s);
    let mut later = Vec::new();
    for n in 1..6 {
        later.push(publish(&broker, "doc:l", n).await);
    }
    let mut s = stream(
        &broker,
        "acme",
        "channel=doc:l",
        &[("Last-Event-ID", &position)],
    )
    .await;
    let e = s.event().await;
    assert_eq!(
        e.json(),
        json!({"channel":"doc:l","recovered":false}),
        "{e:?}"
    );
    // The client resynchronises from its own source; live messages follow.
    let live = publish(&broker, "doc:l", 6).await;
    assert!(live > later[4]);
    assert_eq!(s.message().await["seq"], live);
}

#[actix_rt::test]
async fn refusals_before_the_stream_starts() {
    let broker = Broker::start("");
    let token = broker.token("acme");
    let refused = |path: String| {
        let addr = broker.addr;
        async move { open(addr, &path, &[]).await.err().expect("refused") }
    };
    let (status, body, _) = refused("/v1/sse?channel=doc:1".to_string()).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (401, Some("unauthorized"))
    );
    let (status, body, _) = refused(format!("/v1/sse?token={token}&channel=secret:1")).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (403, Some("forbidden")),
        "{body}"
    );
    let (status, body, _) = refused(format!("/v1/sse?token={token}&channel=doc/1")).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("bad_request")),
        "{body}"
    );
    let (status, body, _) = refused(format!(
        "/v1/sse?token={token}&channel=doc:1&lastEventId=not*base64"
    ))
    .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("bad_request")),
        "{body}"
    );
    let many: String = (0..101).map(|i| format!("&channel=doc:{i}")).collect();
    let (status, body, _) = refused(format!("/v1/sse?token={token}{many}")).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("too_many_subscriptions")),
        "{body}"
    );
    assert_eq!(body["retryAfterMs"], 0);
    // The Authorization header works as well as the query string.
    let mut s = open(
        broker.addr,
        "/v1/sse?channel=doc:1",
        &[("Authorization", &format!("Bearer {token}"))],
    )
    .await
    .expect("opened with the header");
    assert!(s.event().await.is("welcome"));
    assert_eq!(broker.node.sockets.len(), 1);
}

#[actix_rt::test]
async fn heartbeats_are_comments() {
    let broker = Broker::start("[socket]\nheartbeat_interval_ms = 100\nclient_timeout_ms = 150\n");
    let mut s = stream(&broker, "acme", "channel=doc:1", &[]).await;
    // Past the client timeout a WebSocket that never answered is dropped.
    let mut pings = 0;
    while pings < 4 {
        let e = s.next().await.unwrap();
        assert!(e.event.is_none(), "{e:?}");
        if e.comment.is_some() {
            assert_eq!(e.comment.as_deref(), Some("ping"));
            pings += 1;
        }
    }
    // Still open: a reader that never answers pings is not dropped for it.
    let seq = publish(&broker, "doc:1", 1).await;
    assert_eq!(s.message().await["seq"], seq);
}

#[actix_rt::test]
async fn conflated_namespaces_conflate_for_a_paused_reader() {
    // `cursor:` conflates by `/user` (config.toml).
    let broker = Broker::start(
        "[plans.free]\nmessages_per_sec = 100000\nburst = 100000\naccount_messages_per_sec = 100000\n\
         account_burst = 100000\noutbound_high_water_bytes = 65536\noutbound_grace_ms = 60000\n\
         [socket]\nsend_buffer_bytes = 4096\n",
    );
    let token = broker.token_with("acme", &["cursor:*"], &["cursor:*"], None);
    let tcp = crate::common::small_window(broker.addr).await;
    let path = format!("/v1/sse?token={token}&channel=cursor:1");
    let mut s = crate::sse_client::open_on(tcp, broker.addr, &path, &[])
        .await
        .unwrap();
    assert!(s.event().await.is("welcome"));
    broker.wait_sockets(1).await;
    // Far more than the mark while the reader reads nothing, two keys.
    let pad = "x".repeat(1024);
    let mut last = std::collections::HashMap::new();
    for i in 0..250u64 {
        let user = if i % 2 == 0 { "ann" } else { "bob" };
        let resp = broker
            .publish_http("cursor:1", json!({"user": user, "i": i, "pad": pad}))
            .await;
        last.insert(
            user,
            resp.json::<Value>().await.unwrap()["seq"].as_u64().unwrap(),
        );
    }
    assert!(broker.metric("tidegate_messages_superseded_total").await > 0.0);
    // Reading: fewer messages than published, each user's latest last.
    let mut seen = std::collections::HashMap::new();
    let mut count = 0;
    while seen.get("ann") != last.get("ann") || seen.get("bob") != last.get("bob") {
        let m = s.message().await;
        count += 1;
        let user = m["data"]["user"].as_str().unwrap().to_owned();
        let seq = m["seq"].as_u64().unwrap();
        seen.insert(if user == "ann" { "ann" } else { "bob" }, seq);
    }
    assert!(count < 250, "{count} messages: nothing was conflated");
}
