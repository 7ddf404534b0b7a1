//! Issue 26, part B: memory a client can make the broker hold is paid for
//! by the client's own socket. Frames priced 0 (`budget`) have their own
//! bucket; every answer counts toward the outbound mark, so a client that
//! keeps asking and never reads ends with 4008.

use std::time::Instant;

use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::protocol::Role;

use crate::common::{Broker, Client, PATIENCE, masked_text, small_window, upgrade_on};
use crate::process::Proc;

/// The broker process's resident memory, in bytes (`VmRSS`).
pub(crate) fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/<pid>/status");
    kib * 1024
}

/// Sends `n` copies of one masked text frame, in batches, never reading.
pub(crate) async fn send_many(s: &mut TcpStream, payload: &[u8], n: usize) {
    let batch = masked_text(payload).repeat(1000);
    for _ in 0..n / 1000 {
        s.write_all(&batch).await.unwrap();
    }
}

/// The raw stream as a client that now reads (positioned after the 101).
pub(crate) async fn reading(s: TcpStream) -> Client {
    let s = tokio_tungstenite::MaybeTlsStream::Plain(s);
    let ws = tokio_tungstenite::WebSocketStream::from_raw_socket(s, Role::Client, None).await;
    let mut c = Client::new(ws, None);
    c.skip_unsolicited = false;
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budget_frames_past_their_own_bucket_are_refused_and_the_broker_stays_small() {
    let p = Proc::start(tidegate::config::DEFAULT_TOML).await;
    let token = p.token("acme");
    let mut observer = Client::connect(&p.ws(), &token).await.unwrap();
    assert_eq!(observer.next_json().await["type"], "welcome");
    observer
        .call(
            serde_json::json!({"type":"subscribe","channel":"doc:done"}),
            1,
        )
        .await;
    let mut flooder = upgrade_on(small_window(p.addr()).await, p.addr(), &token).await;
    let before = rss(p.pid());

    // 400,000 `budget` frames (no id: each would be answered with a
    // budget frame of about 150 bytes), and never a read.
    let n = 400_000;
    tokio::time::timeout(
        PATIENCE * 3,
        send_many(&mut flooder, br#"{"type":"budget"}"#, n),
    )
    .await
    .expect("the broker kept reading the flood");
    // A publish behind them: once the observer has it, the socket has
    // handled every frame before it.
    flooder
        .write_all(&masked_text(
            br#"{"type":"publish","channel":"doc:done","data":1}"#,
        ))
        .await
        .unwrap();
    observer.until(|v| v["type"] == "message").await;
    let grown = rss(p.pid()).saturating_sub(before);
    assert!(
        grown < 32 << 20,
        "the broker grew by {} KiB for one socket's budget frames",
        grown >> 10
    );

    // Now read: the welcome, a few answers (the bucket's burst and
    // refill), and the refusal of the rest in the documented words.
    let mut c = reading(flooder).await;
    assert_eq!(c.next_json().await["type"], "welcome");
    let mut answered = 0;
    let refused: Value = loop {
        let v = c.next_json().await;
        match v["type"].as_str() {
            Some("budget") => answered += 1,
            Some("error") => break v,
            _ => panic!("unexpected {v}"),
        }
    };
    assert_eq!(refused["code"], "rate_limited", "{refused}");
    assert!(refused["dropped"].as_u64().unwrap() > 0, "{refused}");
    assert!(
        answered < n / 100,
        "{answered} of {n} budget frames were answered"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_count_toward_the_mark_and_a_client_that_never_reads_them_gets_4008() {
    // A bucket large enough to let every budget frame through: only the
    // outbound mark stands between their answers and the broker's memory.
    let broker = Broker::start(
        "[plans.free]\nfree_frames_per_sec = 5000\nfree_frame_burst = 5000\n\
         outbound_high_water_bytes = 4096\noutbound_grace_ms = 200\n\
         [socket]\nsend_buffer_bytes = 4096\nclose_timeout_ms = 60000\n",
    );
    let token = broker.token("acme");
    let mut flooder = upgrade_on(small_window(broker.addr).await, broker.addr, &token).await;
    // 3,000 answers of about 150 bytes: a hundred times the mark.
    send_many(&mut flooder, br#"{"type":"budget"}"#, 3_000).await;
    // What it holds for that socket, whenever looked at until the close,
    // is the mark plus what was in flight, not 3,000 answers: reading
    // stops over the mark, so the rest wait in TCP's buffers.
    let worst = worst_until_slow_consumer_closed(&broker).await;
    assert!(worst < 64 << 10, "a socket holds {worst} unsent bytes");
    let mut c = reading(flooder).await;
    assert_eq!(c.closed().await, Some(4008));
}

/// History for recovery tests: `per` messages of `size` bytes on each of
/// `channels` channels `doc:h0`…; returns the `seq` before each one's first.
pub(crate) async fn history(broker: &Broker, channels: usize, per: usize, size: usize) -> Vec<u64> {
    let data = format!("\"{}\"", "x".repeat(size));
    let mut since = Vec::new();
    for c in 0..channels {
        let name = format!("doc:h{c}");
        let first = broker.node.publish(&name, &data, "test", None).await.seq;
        since.push(first - 1);
        for _ in 1..per {
            broker.node.publish(&name, &data, "test", None).await;
        }
    }
    since
}

/// Budgets that never stand in the way: a recovery's history reaches the
/// account budget (`recovery_per_kib`, issue 42), and these tests recover
/// up to 192 MiB (196,608 units) to watch memory, not prices.
pub(crate) const RECOVERY: &str = "[history]\nsize = 200\n[plans.free]\nmessages_per_sec = 100000\nburst = 100000\n\
    account_messages_per_sec = 100000\naccount_burst = 10000000\noutbound_high_water_bytes = 65536\n";

/// [`RECOVERY`] with a short grace and a small send buffer, for a socket
/// that never reads.
pub(crate) fn never_reads() -> String {
    format!(
        "{RECOVERY}outbound_grace_ms = 300\n[socket]\nsend_buffer_bytes = 4096\nclose_timeout_ms = 60000\n"
    )
}

/// While a socket waits for its grace to pass, the most the broker held
/// for any socket whenever it was looked at, until one was closed as a
/// slow consumer.
pub(crate) async fn worst_until_slow_consumer_closed(broker: &Broker) -> usize {
    let series = "tidegate_rejections_total{layer=\"outbound\",reason=\"slow_consumer_closed\"}";
    let deadline = Instant::now() + PATIENCE;
    let mut worst = 0;
    while broker.metric(series).await <= 0.0 {
        assert!(Instant::now() < deadline, "{series} never rose");
        for sock in broker.node.sockets.iter() {
            worst = worst.max(sock.gauge.pending());
        }
        tokio::task::yield_now().await;
    }
    worst
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_recovers_history_and_never_reads_holds_only_its_mark_then_gets_4008() {
    let broker = Broker::start(&never_reads());
    // 10 channels × 100 messages × 32 KiB: 32 MiB of history, 500 times
    // the socket's mark.
    let since = history(&broker, 10, 100, 32 << 10).await;
    let token = broker.token("acme");
    let mut s = upgrade_on(small_window(broker.addr).await, broker.addr, &token).await;
    for (c, since) in since.iter().enumerate() {
        s.write_all(&recover(c, *since)).await.unwrap();
    }
    held_to_the_mark_then_4008(&broker, s).await;
}

/// A masked `subscribe` to `doc:h{c}` from `since` ([`history`]'s channels).
fn recover(c: usize, since: u64) -> Vec<u8> {
    let frame = format!(r#"{{"type":"subscribe","channel":"doc:h{c}","since":{since}}}"#);
    masked_text(frame.as_bytes())
}

/// A socket that recovers history and never reads (`s`, its 64 KiB mark
/// and 4 KiB send buffer): the broker held about its mark at most, until
/// the grace closed it with 4008, which it reads once it reads.
pub(crate) async fn held_to_the_mark_then_4008(broker: &Broker, s: TcpStream) {
    let worst = worst_until_slow_consumer_closed(broker).await;
    assert!(worst > 0, "nothing was ever queued");
    assert!(
        worst <= 65536 + (33 << 10) + 4096,
        "a socket held {worst} unsent bytes of recovered history"
    );
    let mut c = reading(s).await;
    assert_eq!(c.closed().await, Some(4008));
}

/// Publishes `rounds` small live messages on each of `doc:h0`… (`channels`
/// of them), in the background.
pub(crate) fn live_rounds(
    broker: &Broker,
    channels: usize,
    rounds: usize,
) -> tokio::task::JoinHandle<()> {
    let node = broker.node.clone();
    tokio::spawn(async move {
        for round in 0..rounds {
            for ch in 0..channels {
                node.publish(&format!("doc:h{ch}"), &round.to_string(), "test", None)
                    .await;
            }
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reading_client_recovers_every_channel_in_order_without_gap_then_live_messages() {
    let broker = Broker::start(&RECOVERY.replace("65536", "262144"));
    recovers_every_channel_in_order_then_live(&broker).await;
}

/// A client that reads subscribes with `since` to 5 channels of 100
/// messages of 8 KiB while 20 rounds of live messages are published: each
/// channel's ack first (recovered, its position at least the last
/// recovered), then every `seq` once and in order, recovered then live.
pub(crate) async fn recovers_every_channel_in_order_then_live(broker: &Broker) {
    let since = history(broker, 5, 100, 8 << 10).await;
    let mut c = broker.client("acme").await;
    for (i, since) in since.iter().enumerate() {
        c.send(serde_json::json!({
            "type": "subscribe", "channel": format!("doc:h{i}"), "since": since, "id": i
        }))
        .await;
    }
    // Live messages published while the backlogs are being delivered.
    let live = live_rounds(broker, 5, 20);
    let mut last: Vec<u64> = since.clone();
    let mut acked = [false; 5];
    let end: Vec<u64> = since.iter().map(|s| s + 120).collect();
    while last.iter().zip(&end).any(|(l, e)| l < e) {
        let v = c.next_json().await;
        match v["type"].as_str() {
            Some("ack") => {
                let i = v["id"].as_u64().unwrap() as usize;
                assert_eq!(v["recovered"], true, "{v}");
                // The position: the last recovered, or past it when live
                // messages were published before the join.
                assert!(v["seq"].as_u64().unwrap() >= since[i] + 100, "{v}");
                acked[i] = true;
            }
            Some("message") => {
                let ch: usize = v["channel"].as_str().unwrap()[5..].parse().unwrap();
                let seq = v["seq"].as_u64().unwrap();
                assert!(acked[ch], "doc:h{ch}: a message before its ack");
                assert_eq!(seq, last[ch] + 1, "doc:h{ch}: a gap or a duplicate");
                last[ch] = seq;
            }
            _ => panic!("unexpected {v}"),
        }
    }
    live.await.unwrap();
}

#[tokio::test]
async fn recovered_history_is_paid_for_by_the_connection() {
    let broker = Broker::start("[history]\nsize = 100\n");
    // 50 messages of 2 KiB: at 1 unit per started KiB, about 100 units,
    // five times the free plan's burst of 20.
    let since = history(&broker, 1, 50, 2 << 10).await;
    let mut c = broker.client("acme").await;
    let ack = c
        .call(
            serde_json::json!({"type":"subscribe","channel":"doc:h0","since":since[0]}),
            1,
        )
        .await;
    assert_eq!(ack["recovered"], true, "{ack}");
    for _ in 0..50 {
        c.until(|v| v["type"] == "message").await;
    }
    c.send(serde_json::json!({"type":"publish","channel":"doc:h0","data":1,"id":2}))
        .await;
    let answer = c.until(|v| v["type"] == "error" || v["id"] == 2).await;
    assert_eq!(answer["code"], "rate_limited", "{answer}");
    assert_eq!(answer["ids"], serde_json::json!([2]), "{answer}");
}

/// Recovery's one meaning (issue 42, `charge::recovery`): the history is
/// paid for before anything is sent, owed by the key even below zero and
/// never refused (the call ended `RESOURCE_EXHAUSTED`, so a history larger
/// than the bucket could never be recovered over gRPC).
#[actix_rt::test]
async fn a_grpc_subscribe_owes_the_history_it_recovers_before_anything_is_sent() {
    use crate::grpc::{authed, connect, subscribe_req};
    use crate::grpc_subscribe::{next, next_message};
    use tidegate::grpc::proto::subscribe_event::Event;
    let broker = Broker::start("[history]\nsize = 100\n");
    // Four channels of 50 messages of 8 KiB: about 1,650 units at one per
    // started KiB, eight times the key's bucket of 200.
    let since = history(&broker, 4, 50, 8 << 10).await;
    let names: Vec<String> = (0..4).map(|c| format!("doc:h{c}")).collect();
    let req: Vec<(&str, Option<u64>)> = names
        .iter()
        .zip(&since)
        .map(|(n, s)| (n.as_str(), Some(*s)))
        .collect();
    let mut c = connect(&broker).await;
    let mut s = c
        .subscribe(authed(subscribe_req(&req), crate::common::API_KEY))
        .await
        .expect("owed, not refused")
        .into_inner();
    // Charged before the call answered: the key is in debt, and its next
    // operation waits for the refill.
    let r = broker.publish_http("doc:other", serde_json::json!(1)).await;
    assert_eq!(r.status(), 429);
    // Then delivered: the first channel's ack and its history, in order.
    assert!(matches!(next(&mut s).await, Ok(Some(Event::Ack(_)))));
    for seq in since[0] + 1..=since[0] + 50 {
        let m = next_message(&mut s).await;
        assert_eq!((m.channel.as_str(), m.seq), ("doc:h0", seq));
    }
}

/// A socket that never reads stalls a recovery (its grace starts), leaves
/// that channel in time (the grace ends: nothing is stuck), and later
/// stalls a second recovery: that stall starts a grace of its own and
/// ends with 4008. Leaving a stalled recovery once cleared the stall
/// without ending the grace, so the first timer found nothing stuck and
/// the second stall started no timer: the socket was never closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stall_after_leaving_a_stalled_recovery_gets_its_own_grace_and_4008() {
    let broker = Broker::start(&never_reads());
    let since = history(&broker, 2, 20, 32 << 10).await;
    let token = broker.token("acme");
    let mut s = upgrade_on(small_window(broker.addr).await, broker.addr, &token).await;
    s.write_all(&recover(0, since[0])).await.unwrap();
    // Half the 64 KiB mark is queued: the backlog has no room left.
    let deadline = Instant::now() + PATIENCE;
    while !broker
        .node
        .sockets
        .iter()
        .any(|sock| sock.gauge.pending() >= 32 << 10)
    {
        assert!(
            Instant::now() < deadline,
            "the recovery never filled its room"
        );
        tokio::task::yield_now().await;
    }
    let leave = masked_text(br#"{"type":"unsubscribe","channel":"doc:h0"}"#);
    s.write_all(&leave).await.unwrap();
    // Not a wait for an event: the first grace (300 ms) must be over, so
    // that only a grace of the second stall's own can close the socket.
    tokio::time::sleep(std::time::Duration::from_millis(900)).await;
    s.write_all(&recover(1, since[1])).await.unwrap();
    held_to_the_mark_then_4008(&broker, s).await;
}
