//! §3 inbound limits and seed 000's client behaviours.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};

use crate::common::{Broker, PATIENCE, raw_upgrade, read_until_eof};

#[tokio::test]
async fn typist_at_8_per_second_then_a_30_per_second_burst_is_never_limited() {
    let broker = Broker::start("");
    let mut c = broker.client("acme").await;
    let mut id = 0u64;
    let mut phase = |per_sec: u64, count: u64| {
        let start = id;
        id += count;
        (start, per_sec, count)
    };
    for (start, per_sec, count) in [phase(8, 16), phase(30, 30), phase(8, 8)] {
        let mut tick = tokio::time::interval(Duration::from_millis(1000 / per_sec));
        // A late tick must not turn into a catch-up burst the typist never typed.
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        for i in start..start + count {
            tick.tick().await;
            c.send(json!({"type":"publish","channel":"doc:notes","data":{"k":i},"id":i}))
                .await;
        }
    }
    for i in 0..id {
        let answer = c.next_json().await;
        assert_eq!(answer["type"], "ack", "the typist was limited: {answer}");
        assert_eq!(answer["id"], i);
    }
    assert_eq!(
        broker
            .metric("tidegate_rejections_total{layer=\"connection\",reason=\"rate_limited\"}")
            .await,
        0.0
    );
}

#[tokio::test]
async fn buggy_loop_is_dropped_to_with_throttled_notices_and_the_socket_survives() {
    let broker = Broker::start("");
    let mut c = broker.client("acme").await;
    const N: u64 = 3000;
    for i in 0..N {
        c.ws.feed(Message::text(
            json!({"type":"publish","channel":"doc:loop","data":i,"id":i}).to_string(),
        ))
        .await
        .unwrap();
    }
    c.ws.flush().await.unwrap();

    // Every id gets exactly one answer: an ack, or a place in `ids`.
    let mut answered = HashSet::new();
    let mut notices: Vec<(Instant, Value)> = Vec::new();
    while answered.len() < N as usize {
        let f = c.next_json().await;
        match f["type"].as_str() {
            Some("ack") => assert!(answered.insert(f["id"].as_u64().unwrap()), "{f}"),
            Some("error") => {
                assert_eq!(f["code"], "rate_limited", "{f}");
                assert!(f["retryAfterMs"].as_u64().unwrap() >= 1);
                let ids = f["ids"].as_array().unwrap();
                assert_eq!(ids.len() as u64, f["dropped"].as_u64().unwrap());
                for id in ids {
                    assert!(
                        answered.insert(id.as_u64().unwrap()),
                        "id answered twice: {id}"
                    );
                }
                notices.push((Instant::now(), f));
            }
            _ => panic!("unexpected {f}"),
        }
    }
    let acks = N as usize
        - notices
            .iter()
            .map(|(_, f)| f["dropped"].as_u64().unwrap() as usize)
            .sum::<usize>();
    assert!(acks >= 20, "at least the burst got through, got {acks}");
    assert!(
        acks < N as usize / 2,
        "most of the flood was dropped, {acks} admitted"
    );
    assert!(notices.len() >= 2, "a first notice and a tail");
    for pair in notices.windows(2) {
        let gap = pair[1].0 - pair[0].0;
        assert!(gap >= Duration::from_millis(800), "notices {gap:?} apart");
    }
    // Still open and working.
    let ack = c
        .call(
            json!({"type":"publish","channel":"doc:loop","data":"after"}),
            N + 1,
        )
        .await;
    assert_eq!(ack["type"], "ack");
}

async fn close_code_after(broker: &Broker, frames: Vec<Frame>) -> Option<u16> {
    let mut c = broker.client("acme").await;
    for f in frames {
        c.send_raw(Message::Frame(f)).await;
    }
    c.closed().await
}

#[tokio::test]
async fn oversized_message_closes_1009_even_when_fragmented() {
    let broker = Broker::start("");
    let big = vec![b'x'; 70_000];
    let single = Frame::message(big, OpCode::Data(Data::Text), true);
    assert_eq!(close_code_after(&broker, vec![single]).await, Some(1009));

    let piece = vec![b'x'; 40_000];
    let frames = vec![
        Frame::message(piece.clone(), OpCode::Data(Data::Text), false),
        Frame::message(piece, OpCode::Data(Data::Continue), true),
    ];
    assert_eq!(
        close_code_after(&broker, frames).await,
        Some(1009),
        "each piece fits, the message does not"
    );
}

#[tokio::test]
async fn fragmented_message_under_the_limit_is_reassembled() {
    let broker = Broker::start("");
    let mut c = broker.client("acme").await;
    let text =
        json!({"type":"publish","channel":"doc:1","data":"x".repeat(1000),"id":5}).to_string();
    let (a, b) = text.as_bytes().split_at(300);
    c.send_raw(Message::Frame(Frame::message(
        a.to_vec(),
        OpCode::Data(Data::Text),
        false,
    )))
    .await;
    c.send_raw(Message::Frame(Frame::message(
        b.to_vec(),
        OpCode::Data(Data::Continue),
        true,
    )))
    .await;
    assert_eq!(c.next_json().await["id"], 5);
}

#[tokio::test]
async fn pings_are_answered_not_charged_and_a_ping_flood_is_bounded() {
    let broker = Broker::start("");
    let mut c = broker.client("acme").await;
    for _ in 0..200 {
        c.ws.feed(Message::Ping(b"p".to_vec().into()))
            .await
            .unwrap();
    }
    // A full burst of publishes after the flood: all admitted, since pings
    // have their own bucket.
    for i in 0..20u64 {
        c.ws.feed(Message::text(
            json!({"type":"publish","channel":"doc:1","data":i,"id":i}).to_string(),
        ))
        .await
        .unwrap();
    }
    c.ws.flush().await.unwrap();
    let mut pongs = 0;
    let mut acks = 0;
    while acks < 20 {
        match tokio::time::timeout(PATIENCE, c.ws.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
        {
            Message::Pong(_) => pongs += 1,
            Message::Text(t) => {
                let v: Value = serde_json::from_str(&t).unwrap();
                if v["type"] == "budget" {
                    continue; // unsolicited: the burst is below half
                }
                assert_eq!(v["type"], "ack", "{v}");
                acks += 1;
            }
            _ => {}
        }
    }
    assert!(pongs >= 20, "the ping burst is answered, got {pongs}");
    assert!(pongs < 200, "the flood is not, got {pongs}");
}

#[tokio::test]
async fn a_client_that_stops_answering_is_closed() {
    let broker = Broker::start("[socket]\nheartbeat_interval_ms = 50\nclient_timeout_ms = 200\n");
    let mut s = raw_upgrade(broker.addr, &broker.token("acme")).await;
    // Read (and so see the pings) but never answer them.
    let read = read_until_eof(&mut s).await;
    assert!(read > 0, "welcome and pings arrived before the close");
    assert_eq!(
        broker
            .metric("tidegate_rejections_total{layer=\"connection\",reason=\"heartbeat_timeout\"}")
            .await,
        1.0
    );
}
