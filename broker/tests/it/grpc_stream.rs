//! `PublishStream` (§8): per-message charging, in-order replies, per-message
//! refusals that keep the stream, `RESOURCE_EXHAUSTED` at an empty budget,
//! bounded memory for a sender that does not read its replies, and the
//! per-connection cap on open calls (`grpc.max_concurrent_streams`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tidegate::grpc::proto::PublishRequest;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;

use crate::common::{API_KEY, Broker, PATIENCE};
use crate::grpc::{assert_rate_limited, authed, connect, connect_with, md, msg, reason};

#[actix_rt::test]
async fn a_stream_answers_each_message_in_order_and_ends_with_its_trailers() {
    let b = Broker::start("");
    let mut c = connect(&b).await;
    let reqs = vec![
        msg("doc:1", "1", "a"),
        msg("doc 1", "2", "b"),
        msg("doc:1", "not json", "c"),
        msg("doc:1", "3", "d"),
    ];
    let (got, mut replies) = crate::grpc::stream_all(&mut c, reqs).await;
    let ids: Vec<&str> = got.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["a", "b", "c", "d"]);
    assert!(got[0].seq > 0 && got[3].seq > got[0].seq);
    for r in &got[1..3] {
        let e = r.error.as_ref().expect("refused");
        assert_eq!(e.code, "bad_request");
        assert_eq!(r.seq, 0);
    }
    let trailers = replies.trailers().await.unwrap().expect("trailers");
    // Two publishes and two refusals at the malformed price (issue 26).
    assert_eq!(md(&trailers, "tidegate-cost"), 4);
    assert_eq!(md(&trailers, "ratelimit-limit"), 200);
    assert!(md(&trailers, "ratelimit-remaining") <= 196);
    assert!(trailers.get("ratelimit-reset").is_some());
}

#[actix_rt::test]
async fn a_flood_gets_in_order_replies_then_resource_exhausted() {
    let b = Broker::start(
        "[plans.free]\naccount_burst = 10\naccount_messages_per_sec = 0.01\naccount_sample_every = 1\n",
    );
    let mut c = connect(&b).await;
    // 30 messages, one of them refused on its own (forbidden channel
    // grammar), which costs the malformed price and keeps the stream.
    let reqs: Vec<PublishRequest> = (0..30)
        .map(|i| {
            let channel = if i == 3 { "bad channel" } else { "doc:flood" };
            msg(channel, &i.to_string(), &i.to_string())
        })
        .collect();
    let mut replies = c
        .publish_stream(authed(tokio_stream::iter(reqs), API_KEY))
        .await
        .unwrap()
        .into_inner();
    let mut ids = Vec::new();
    let status = loop {
        match tokio::time::timeout(PATIENCE, replies.message())
            .await
            .unwrap()
        {
            Ok(Some(r)) => ids.push((r.id, r.error.map(|e| e.code))),
            Ok(None) => panic!("the stream ended without RESOURCE_EXHAUSTED"),
            Err(s) => break s,
        }
    };
    // Nine charged messages and the refused one (charged the malformed
    // price, issue 26), in request order.
    let expected: Vec<(String, Option<String>)> = (0..10)
        .map(|i| (i.to_string(), (i == 3).then(|| "bad_request".to_string())))
        .collect();
    assert_eq!(ids, expected);
    assert_rate_limited(&status);
    assert_eq!(md(status.metadata(), "tidegate-cost"), 10);
    assert_eq!(md(status.metadata(), "ratelimit-remaining"), 0);
    assert_eq!(
        b.metric("tidegate_rejections_total{layer=\"grpc\",reason=\"rate_limited\"}")
            .await,
        1.0
    );
}

#[actix_rt::test]
async fn a_sender_that_does_not_read_its_replies_is_held_back() {
    let b = Broker::start(
        "[grpc]\nreply_buffer = 4\n\
         [plans.free]\naccount_burst = 100000\naccount_messages_per_sec = 100000\n",
    );
    // A small stream window: unread replies stop the server quickly. The
    // connection window stays large: h2 (0.4.20+) budgets the unread small
    // DATA frames a connection holds by half its connection window, and a
    // window full of tiny replies would exceed a budget that small (the
    // client itself would end the connection with ENHANCE_YOUR_CALM).
    let mut c = connect_with(&b, |e| {
        e.initial_stream_window_size(Some(4096))
            .initial_connection_window_size(Some(1 << 20))
    })
    .await;
    const TOTAL: usize = 20_000;
    let data = format!("\"{}\"", "x".repeat(500));
    let sent = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = tokio::sync::mpsc::channel::<PublishRequest>(1);
    let feeder = {
        let sent = sent.clone();
        tokio::spawn(async move {
            for i in 0..TOTAL {
                if tx
                    .send(msg("doc:fast", &data, &i.to_string()))
                    .await
                    .is_err()
                {
                    return;
                }
                sent.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let mut replies = c
        .publish_stream(authed(ReceiverStream::new(rx), API_KEY))
        .await
        .unwrap()
        .into_inner();
    // Not reading: the broker stops reading the stream, so the sender
    // cannot get everything out (10 MB against windows of about 1 MB).
    let finished = tokio::time::timeout(Duration::from_millis(500), async {
        while sent.load(Ordering::Relaxed) < TOTAL {
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert!(finished.is_err(), "all {TOTAL} messages went out unread");
    let held = sent.load(Ordering::Relaxed);
    assert!(held < TOTAL, "{held}");
    // Reading again: every message gets its reply, in order.
    let mut next = 0usize;
    while next < TOTAL {
        let r = tokio::time::timeout(PATIENCE, replies.next())
            .await
            .unwrap()
            .expect("a reply")
            .unwrap_or_else(|s| panic!("{s:?} after {next} replies"));
        assert_eq!(r.id, next.to_string());
        assert!(r.error.is_none(), "{r:?}");
        next += 1;
    }
    feeder.await.unwrap();
}

#[actix_rt::test]
async fn a_stream_without_a_key_is_refused_at_once() {
    let b = Broker::start("");
    let mut c = connect(&b).await;
    let s = c
        .publish_stream(tokio_stream::iter(vec![msg("doc:1", "1", "")]))
        .await
        .unwrap_err();
    assert_eq!(s.code(), Code::Unauthenticated);
    assert_eq!(reason(&s), "unauthorized");
}

/// Opens a `PublishStream` and waits for the reply to its first message,
/// so the call surely holds one of the connection's stream slots.
async fn open_stream(
    c: &mut tidegate::grpc::proto::broker_client::BrokerClient<tonic::transport::Channel>,
) -> (
    tokio::sync::mpsc::Sender<PublishRequest>,
    tonic::Streaming<tidegate::grpc::proto::PublishReply>,
) {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(msg("doc:1", "1", "open")).await.unwrap();
    let mut replies = c
        .publish_stream(authed(ReceiverStream::new(rx), API_KEY))
        .await
        .unwrap()
        .into_inner();
    let r = tokio::time::timeout(PATIENCE, replies.message())
        .await
        .unwrap()
        .unwrap()
        .expect("a reply");
    assert!(r.error.is_none(), "{r:?}");
    (tx, replies)
}

#[actix_rt::test]
async fn a_connection_gets_max_concurrent_streams_calls_at_once_and_the_next_waits() {
    let b = Broker::start("[grpc]\nmax_concurrent_streams = 2\n");
    let mut c = connect(&b).await;
    let (first_tx, mut first) = open_stream(&mut c).await;
    let _second = open_stream(&mut c).await;

    // A third call on the same connection waits for a slot (HTTP/2
    // SETTINGS_MAX_CONCURRENT_STREAMS) instead of being served or failed.
    let mut third = {
        let mut c = c.clone();
        tokio::spawn(async move { c.publish(authed(msg("doc:1", "3", "third"), API_KEY)).await })
    };
    assert!(
        tokio::time::timeout(Duration::from_millis(500), &mut third)
            .await
            .is_err(),
        "a third call ran beside two open streams"
    );
    // Another connection is not held up by this one's cap.
    let mut other = connect(&b).await;
    let r = other
        .publish(authed(msg("doc:1", "4", "other"), API_KEY))
        .await
        .unwrap();
    assert!(r.into_inner().seq > 0);

    // The first stream ends: its slot goes to the waiting call.
    drop(first_tx);
    while tokio::time::timeout(PATIENCE, first.message())
        .await
        .unwrap()
        .unwrap()
        .is_some()
    {}
    let r = tokio::time::timeout(PATIENCE, third)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(r.into_inner().seq > 0);
}

#[actix_rt::test]
async fn a_request_past_max_message_bytes_ends_only_its_own_call() {
    let b = Broker::start("[grpc]\nmax_message_bytes = 4096\n");
    let mut c = connect(&b).await;
    let huge = format!("\"{}\"", "x".repeat(8_000));
    let s = c
        .publish(authed(msg("doc:1", &huge, "huge"), API_KEY))
        .await
        .unwrap_err();
    // tonic's own bound, before the broker sees the request, answered with
    // §8's code for "too large" and tonic's message giving the sizes.
    assert_eq!(s.code(), Code::InvalidArgument, "{s:?}");
    assert!(s.message().contains("too large"), "{s:?}");

    // On a stream too; the connection goes on serving other calls.
    let mut replies = c
        .publish_stream(authed(
            tokio_stream::iter(vec![msg("doc:1", "1", "a"), msg("doc:1", &huge, "b")]),
            API_KEY,
        ))
        .await
        .unwrap()
        .into_inner();
    let first = tokio::time::timeout(PATIENCE, replies.message())
        .await
        .unwrap()
        .unwrap()
        .expect("the first reply");
    assert_eq!((first.id.as_str(), first.error), ("a", None));
    let end = tokio::time::timeout(PATIENCE, replies.message())
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(end.code(), Code::InvalidArgument, "{end:?}");
    assert!(end.message().contains("too large"), "{end:?}");
    let ok = c
        .publish(authed(msg("doc:1", "1", "after"), API_KEY))
        .await
        .unwrap();
    assert!(ok.into_inner().seq > 0);
}
