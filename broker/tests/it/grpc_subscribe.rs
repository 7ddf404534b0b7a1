//! `Subscribe` (§8 with §2/§3): acks, `since` recovery, `seq` order, the
//! slow-consumer bound, and the drain.

use std::time::Instant;

use serde_json::json;
use tidegate::grpc::proto::subscribe_event::Event;
use tidegate::grpc::proto::{Message, SubscribeEvent};
use tidegate::metrics::Layer;
use tonic::{Code, Status, Streaming};

use crate::common::{API_KEY, Broker, PATIENCE};
use crate::grpc::{authed, connect, connect_with, md, msg, reason, subscribe_req};

pub async fn next(s: &mut Streaming<SubscribeEvent>) -> Result<Option<Event>, Status> {
    tokio::time::timeout(PATIENCE, s.message())
        .await
        .expect("the stream said nothing in time")
        .map(|e| e.and_then(|e| e.event))
}

pub async fn next_message(s: &mut Streaming<SubscribeEvent>) -> Message {
    match next(s).await {
        Ok(Some(Event::Message(m))) => m,
        other => panic!("expected a message, got {other:?}"),
    }
}

/// Polls a counter until it reaches `at_least` (refusals are counted
/// asynchronously).
async fn metric_reaches(b: &Broker, series: &str, at_least: f64) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let v = b.metric(series).await;
        if v >= at_least {
            return;
        }
        assert!(Instant::now() < deadline, "{series} = {v}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[actix_rt::test]
async fn subscribe_recovers_since_then_goes_live_in_seq_order() {
    let b = Broker::start("");
    let mut seqs = Vec::new();
    for i in 0..3 {
        let r = b.publish_http("doc:rec", json!({ "n": i })).await;
        let body: serde_json::Value = r.json().await.unwrap();
        seqs.push(body["seq"].as_u64().unwrap());
    }
    let mut c = connect(&b).await;
    let mut s = c
        .subscribe(authed(
            subscribe_req(&[("doc:rec", Some(seqs[0])), ("doc:live", None)]),
            API_KEY,
        ))
        .await
        .unwrap()
        .into_inner();
    match next(&mut s).await.unwrap() {
        Some(Event::Ack(a)) => {
            assert_eq!(a.channel, "doc:rec");
            assert_eq!(a.recovered, Some(true));
        }
        other => panic!("{other:?}"),
    }
    for (i, seq) in seqs.iter().enumerate().skip(1) {
        let m = next_message(&mut s).await;
        assert_eq!((m.channel.as_str(), m.seq), ("doc:rec", *seq));
        assert_eq!(m.data_json, format!("{{\"n\":{i}}}"));
    }
    match next(&mut s).await.unwrap() {
        Some(Event::Ack(a)) => {
            assert_eq!(a.channel, "doc:live");
            assert_eq!(a.recovered, None);
        }
        other => panic!("{other:?}"),
    }
    // Live, from gRPC and HTTP publishers, in seq order.
    let mut p = connect(&b).await;
    let mut sent = Vec::new();
    for i in 0..5 {
        let r = p
            .publish(authed(msg("doc:rec", &format!("[{i}]"), ""), API_KEY))
            .await
            .unwrap();
        sent.push(r.into_inner().seq);
    }
    for seq in &sent {
        let m = next_message(&mut s).await;
        assert_eq!(m.seq, *seq);
    }
    // Recovery from a seq the history no longer covers is not claimed.
    let mut s2 = c
        .subscribe(authed(subscribe_req(&[("doc:rec", Some(1))]), API_KEY))
        .await
        .unwrap()
        .into_inner();
    match next(&mut s2).await.unwrap() {
        Some(Event::Ack(a)) => assert_eq!(a.recovered, Some(false)),
        other => panic!("{other:?}"),
    }
}

#[actix_rt::test]
async fn a_subscribe_is_charged_and_checked_like_a_socket() {
    let b = Broker::start(
        "[[api_keys]]\nkey = \"tidegate-sample-publish-key\"\naccount = \"acme\"\nsub_channels = [\"doc:*\"]\n\
         [plans.free]\nmax_subscriptions = 2\naccount_messages_per_sec = 0.01\n\
         [plans.free.costs]\nrecovery = 2\n",
    );
    let mut c = connect(&b).await;
    let refusals = [
        (
            subscribe_req(&[("news:1", None)]),
            Code::PermissionDenied,
            "forbidden",
        ),
        (
            subscribe_req(&[("doc 1", None)]),
            Code::InvalidArgument,
            "bad_request",
        ),
        (subscribe_req(&[]), Code::InvalidArgument, "bad_request"),
        (
            subscribe_req(&[("doc:1", None), ("doc:2", None), ("doc:3", None)]),
            Code::InvalidArgument,
            "too_many_subscriptions",
        ),
    ];
    for (req, code, why) in refusals {
        let s = c
            .subscribe(authed(req, API_KEY))
            .await
            .expect_err("refused");
        assert_eq!(s.code(), code, "{s:?}");
        assert_eq!(reason(&s), why);
    }
    // Each refusal costs the malformed price (1, issue 26); subscribe (1)
    // plus subscribe with since (1 + 2) cost 4, from the budget HTTP
    // publish spends too.
    let s = c
        .subscribe(authed(
            subscribe_req(&[("doc:1", None), ("doc:2", Some(5))]),
            API_KEY,
        ))
        .await
        .unwrap();
    let r = b.publish_http("doc:1", json!(1)).await;
    assert_eq!(r.headers()["x-ratelimit-remaining"], "191");
    drop(s);
}

#[actix_rt::test]
async fn a_consumer_that_stops_reading_is_dropped_to_then_told() {
    let b = Broker::start(
        "[plans.free]\noutbound_high_water_bytes = 16384\noutbound_grace_ms = 600000\n\
         account_burst = 100000\naccount_messages_per_sec = 100000\n",
    );
    let mut c = connect_with(&b, |e| {
        e.initial_stream_window_size(Some(8192))
            .initial_connection_window_size(Some(8192))
    })
    .await;
    let mut s = c
        .subscribe(authed(subscribe_req(&[("doc:slow", None)]), API_KEY))
        .await
        .unwrap()
        .into_inner();
    assert!(matches!(next(&mut s).await, Ok(Some(Event::Ack(_)))));
    // 1 MB to a reader that reads nothing: most of it is dropped.
    let data = format!("\"{}\"", "y".repeat(1000));
    let mut p = connect(&b).await;
    const N: u64 = 1000;
    for i in 0..N {
        p.publish(authed(msg("doc:slow", &data, &i.to_string()), API_KEY))
            .await
            .unwrap();
    }
    metric_reaches(
        &b,
        "tidegate_rejections_total{layer=\"outbound\",reason=\"slow_consumer\"}",
        1.0,
    )
    .await;
    // Reading again: what was held (bounded by the mark and the buffers
    // of the transport), the count of what was dropped, the rest of what
    // was held, then live messages again.
    let mut delivered = 0u64;
    let mut dropped = None;
    while delivered + dropped.unwrap_or(0) < N {
        match next(&mut s).await.unwrap() {
            Some(Event::Message(_)) => delivered += 1,
            Some(Event::SlowConsumer(sc)) if dropped.is_none() => dropped = Some(sc.dropped),
            other => panic!("{other:?}"),
        }
    }
    let dropped = dropped.expect("a SlowConsumer item");
    assert!(delivered > 0 && dropped > 0, "{delivered} + {dropped}");
    assert!(
        delivered < N / 2,
        "{delivered} of {N} held for a reader that read nothing"
    );
    let r = p
        .publish(authed(msg("doc:slow", "\"again\"", ""), API_KEY))
        .await
        .unwrap()
        .into_inner();
    let m = next_message(&mut s).await;
    assert_eq!((m.seq, m.data_json.as_str()), (r.seq, "\"again\""));
}

#[actix_rt::test]
async fn a_consumer_past_the_grace_is_ended_with_resource_exhausted() {
    let b = Broker::start(
        "[plans.free]\noutbound_high_water_bytes = 16384\noutbound_grace_ms = 100\n\
         account_burst = 100000\naccount_messages_per_sec = 100000\n",
    );
    let mut c = connect_with(&b, |e| {
        e.initial_stream_window_size(Some(8192))
            .initial_connection_window_size(Some(8192))
    })
    .await;
    let mut s = c
        .subscribe(authed(subscribe_req(&[("doc:dead", None)]), API_KEY))
        .await
        .unwrap()
        .into_inner();
    assert!(matches!(next(&mut s).await, Ok(Some(Event::Ack(_)))));
    // Messages keep coming to a reader that reads nothing, until the
    // grace is over and the broker gives up on it.
    let data = format!("\"{}\"", "z".repeat(1000));
    let deadline = Instant::now() + PATIENCE;
    while b.node.metrics.rejections(Layer::Grpc, "slow_consumer") == 0 {
        assert!(Instant::now() < deadline, "never ended");
        for _ in 0..20 {
            b.node.broker.publish("doc:dead", &data, None).wait().await;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    // It left the channel at once: no more work for it.
    assert_eq!(b.node.hub.subscriber_count("doc:dead"), 0);
    let status = loop {
        match next(&mut s).await {
            Ok(Some(Event::Message(_) | Event::SlowConsumer(_))) => {}
            Ok(other) => panic!("{other:?}"),
            Err(s) => break s,
        }
    };
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert_eq!(reason(&status), "slow_consumer");
    assert!(status.metadata().get("tidegate-cost").is_some());
}

#[actix_rt::test]
async fn the_drain_refuses_new_calls_and_ends_open_streams() {
    let mut b = Broker::start("[cluster]\ndrain_ms = 2000\n");
    let mut c = connect(&b).await;
    let mut s = c
        .subscribe(authed(subscribe_req(&[("doc:d", None)]), API_KEY))
        .await
        .unwrap()
        .into_inner();
    assert!(matches!(next(&mut s).await, Ok(Some(Event::Ack(_)))));
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(msg("doc:d", "1", "before")).await.unwrap();
    let mut p = c
        .publish_stream(authed(
            tokio_stream::wrappers::ReceiverStream::new(rx),
            API_KEY,
        ))
        .await
        .unwrap()
        .into_inner();
    let r = tokio::time::timeout(PATIENCE, p.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(r.id, "before");

    let node = b.node.clone();
    b.begin_shutdown();
    let deadline = Instant::now() + PATIENCE;
    while !node.is_draining() {
        assert!(Instant::now() < deadline);
        tokio::task::yield_now().await;
    }
    let refused = c
        .publish(authed(msg("doc:d", "2", ""), API_KEY))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::Unavailable);
    assert_eq!(reason(&refused), "draining");

    let ended = loop {
        match next(&mut s).await {
            Ok(Some(Event::Message(_))) => {}
            Ok(other) => panic!("{other:?}"),
            Err(s) => break s,
        }
    };
    assert_eq!(ended.code(), Code::Unavailable, "{ended:?}");
    let ended = tokio::time::timeout(PATIENCE, p.message())
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(ended.code(), Code::Unavailable, "{ended:?}");
    assert_eq!(md(ended.metadata(), "tidegate-cost"), 1);
    drop(tx);
}
