//! The account budget, measured from outside, on one node and on three
//! (issue 15): an abuser is closed no earlier than its budget allows and no
//! later than the documented overshoot; an account within its budget is
//! never closed, also right after it connects.
//!
//! Bounds come from what the client can see: a frame is admitted after it
//! was sent and before its ack arrived, so the server's window between the
//! first and the last admission lies between (last acked send − first ack)
//! and (last ack − first send). Counts are asserted against those bounds,
//! never against a wall-clock threshold.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::cluster::{node, prefix};
use crate::common::{Broker, Got};
use crate::redis_server::RedisServer;

/// Budget of the tests: the contract's default account budget.
const BURST: f64 = 200.0;
const RATE: f64 = 100.0;
const SAMPLE: f64 = 25.0;
const PLAN: &str = "[plans.free]\naccount_messages_per_sec = 100.0\naccount_burst = 200\naccount_sample_every = 25\nmax_connections = 8\n";

/// What one paced socket saw.
#[derive(Debug, Default)]
struct Run {
    /// (sent, acked) for every admitted frame.
    acked: Vec<(Instant, Instant)>,
    first_send: Option<Instant>,
    notified: bool,
    close: Option<Option<u16>>,
}

/// Sends one publish every `period` (no catch-up bursts) until the socket
/// is closed or `stop` passes.
async fn paced(mut c: crate::common::Client, period: Duration, stop: Instant) -> Run {
    let mut run = Run::default();
    let mut sent: HashMap<u64, Instant> = HashMap::new();
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut id = 0u64;
    loop {
        tokio::select! {
            _ = tick.tick() => {
                if Instant::now() >= stop {
                    return run;
                }
                id += 1;
                let now = Instant::now();
                run.first_send.get_or_insert(now);
                sent.insert(id, now);
                let frame = json!({"type":"publish","channel":"doc:paced","data":id,"id":id});
                if futures_util::SinkExt::send(
                    &mut c.ws,
                    tokio_tungstenite::tungstenite::Message::text(frame.to_string()),
                )
                .await
                .is_err()
                {
                    run.close = Some(None);
                    return run;
                }
            }
            got = c.next() => match got {
                Got::Json(v) if v["type"] == "ack" => {
                    let at = sent[&v["id"].as_u64().unwrap()];
                    run.acked.push((at, Instant::now()));
                }
                Got::Json(v) if v["code"] == "account_rate_limited" => run.notified = true,
                Got::Json(v) => panic!("unexpected frame {v}"),
                Got::Close(code) => {
                    run.close = Some(code);
                    return run;
                }
                Got::Gone => {
                    run.close = Some(None);
                    return run;
                }
            },
        }
    }
}

/// `per_node[i]` sockets of one account on `brokers[i]`, each paced at
/// `per_sec`, until closed or `for_at_most` passes.
async fn account_at(
    brokers: &[Broker],
    per_node: &[usize],
    per_sec: f64,
    for_at_most: Duration,
) -> Vec<Run> {
    let token = brokers[0].token("paced");
    let mut clients = Vec::new();
    for (b, n) in brokers.iter().zip(per_node) {
        for _ in 0..*n {
            let mut c = b.try_connect(&token).await.expect("under the cap");
            assert_eq!(c.next_json().await["type"], "welcome");
            clients.push(c);
        }
    }
    let stop = Instant::now() + for_at_most;
    let period = Duration::from_secs_f64(1.0 / per_sec);
    let tasks: Vec<_> = clients
        .into_iter()
        .map(|c| tokio::spawn(paced(c, period, stop)))
        .collect();
    let mut runs = Vec::new();
    for t in tasks {
        runs.push(t.await.unwrap());
    }
    runs
}

/// The admitted count against the budget of the server's window, within
/// the sampling bound both ways.
fn assert_closed_within_bounds(runs: &[Run]) {
    let sockets = runs.len() as f64;
    for r in runs {
        assert!(r.notified, "every socket is told account_rate_limited");
        assert_eq!(r.close, Some(Some(1008)), "every socket is closed 1008");
    }
    let acked: Vec<_> = runs.iter().flat_map(|r| r.acked.iter().copied()).collect();
    let admitted = acked.len() as f64;
    let first_send = runs.iter().filter_map(|r| r.first_send).min().unwrap();
    let first_ack = acked.iter().map(|a| a.1).min().unwrap();
    let last_acked_send = acked.iter().map(|a| a.0).max().unwrap();
    let last_ack = acked.iter().map(|a| a.1).max().unwrap();
    let shortest = last_acked_send.saturating_duration_since(first_ack);
    let longest = last_ack - first_send;
    let allowed_at_least = BURST + RATE * shortest.as_secs_f64();
    let allowed_at_most = BURST + RATE * longest.as_secs_f64();
    // Frames in flight when the breach was seen: a few per socket.
    let in_flight = 2.0 * sockets;
    let overshoot = sockets * (SAMPLE - 1.0) + SAMPLE;
    eprintln!(
        "account of {sockets} sockets: {admitted} admitted in {:.3}..{:.3} s; budget {allowed_at_least:.0}..{allowed_at_most:.0}",
        shortest.as_secs_f64(),
        longest.as_secs_f64()
    );
    assert!(
        admitted + in_flight >= allowed_at_least,
        "closed early: {admitted} admitted, the budget allowed at least {allowed_at_least:.0}"
    );
    assert!(
        admitted <= allowed_at_most + overshoot + in_flight,
        "closed late: {admitted} admitted, budget {allowed_at_most:.0} + overshoot {overshoot}"
    );
}

/// Issue 15's shape: 8 sockets at 19/s each (152/s against 100/s, burst
/// 200). Before the fix the account was closed after about 397 admitted
/// messages when its budget allowed 461.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abuser_on_one_node_is_closed_within_the_sampling_bound_both_ways() {
    let broker = Broker::start(PLAN);
    let runs = account_at(
        std::slice::from_ref(&broker),
        &[8],
        19.0,
        Duration::from_secs(20),
    )
    .await;
    assert_closed_within_bounds(&runs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abuser_on_three_nodes_is_closed_within_the_sampling_bound_both_ways() {
    let redis = RedisServer::start();
    let p = prefix();
    let brokers: Vec<_> = ["a", "b", "c"]
        .into_iter()
        .map(|id| node(&redis, id, &p, PLAN))
        .collect();
    // The same 8 sockets at 19/s, spread over the nodes.
    let runs = account_at(&brokers, &[3, 3, 2], 19.0, Duration::from_secs(20)).await;
    assert_closed_within_bounds(&runs);
}

/// 8 sockets that open with a burst close to the account's and then stay
/// under its rate are never closed, although their first charges all come
/// while the account's bucket is still fresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn account_within_budget_is_never_closed_from_its_first_message() {
    // A connection burst of 30, so each socket's opening 20 leave room.
    let broker = Broker::start(&format!("{PLAN}burst = 30\n"));
    let token = broker.token("paced");
    let mut runs = Vec::new();
    let mut clients = Vec::new();
    for _ in 0..8 {
        let mut c = broker.try_connect(&token).await.expect("under the cap");
        assert_eq!(c.next_json().await["type"], "welcome");
        // 20 at once each (160 of the burst of 200).
        for i in 0..20u64 {
            c.send(json!({"type":"publish","channel":"doc:paced","data":i}))
                .await;
        }
        clients.push(c);
    }
    let stop = Instant::now() + Duration::from_secs(3);
    // Then 11/s each: 88/s against 100/s.
    let tasks: Vec<_> = clients
        .into_iter()
        .map(|c| tokio::spawn(paced(c, Duration::from_secs_f64(1.0 / 11.0), stop)))
        .collect();
    for t in tasks {
        runs.push(t.await.unwrap());
    }
    for r in &runs {
        assert_eq!(r.close, None, "an account within budget was closed");
        assert!(!r.notified);
        assert!(!r.acked.is_empty());
    }
}
