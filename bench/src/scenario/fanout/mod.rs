//! `fanout`: S subscribers on one channel, P publishers sending B-byte
//! payloads, either paced at a fixed rate or as fast as the subscribers
//! keep up; delivered messages per second, loss, and publish→receive
//! latency (HDR histogram).
//!
//! "As fast as the subscribers keep up" (`--rate max`) is a closed loop:
//! a publisher keeps at most `window` messages in flight, a message being
//! in flight from its publish until every subscriber has received it (on
//! average over subscribers; each publish is also acknowledged: Tidegate's
//! `ack`, NATS's `PONG` to a `PING` sent after each `PUB`). It measures the
//! delivery rate a broker sustains without dropping, the same way for both
//! brokers. A paced run (`--rate N`) stamps each message with the time it
//! was due, not the time it went out, so a stall shows as latency
//! (no coordinated omission).
//!
//! `--peer graphql` adds a Tidegate cell whose subscribers are GraphQL
//! `messages` subscriptions over `graphql-transport-ws` (§12) instead of
//! `/v1/ws` sockets, publishers and payloads unchanged: the report's
//! `graphql_vs_ws` is that cell's delivered/s over the `/v1/ws` cell's.
//! `--peer sse` likewise: subscribers on `GET /v1/sse` streams (§14),
//! `sse_vs_ws`. `--peer pusher` runs every client on the Pusher wire
//! (`pusher_vs_ws`), and `--peer sockudo` the same Pusher clients against
//! Sockudo (issue 40): `pusher_vs_sockudo` is Tidegate's Pusher cell over
//! Sockudo's (at least 1 is the goal), `sockudo_vs_ws` Sockudo's over
//! `/v1/ws`.

mod chart;
mod flow;

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;
use serde_json::json;

pub(super) use self::flow::{Shared, publisher, subscriber};
pub use super::rate::Rate;
use super::{Accounts, CpuMeter, Env, Running, Tally, mib, open_many};
use crate::report::{self, Latency};
use crate::target::{self, Kind, PUBLISHER_PLAN, Target};

#[derive(Debug, Clone, Serialize)]
pub struct Params {
    pub subscribers: Vec<usize>,
    pub payloads: Vec<usize>,
    pub publishers: usize,
    pub rate: Rate,
    pub window: usize,
    pub warmup_secs: f64,
    pub duration_secs: f64,
    pub connect_concurrency: usize,
    pub subscribers_per_account: usize,
    /// Seconds the broker's CPU is measured with every subscriber connected
    /// and nothing published, before the publishers start (0: not measured).
    pub idle_secs: f64,
    /// Times every cell runs, interleaved: round 1's cells in order, then
    /// round 2's, and so on.
    pub rounds: usize,
}

/// One (broker, subscribers, payload) measurement.
#[derive(Debug, Clone, Serialize)]
pub struct FanoutCell {
    pub broker: &'static str,
    /// Which round (from 1) measured it: comparisons pair cells of one
    /// round.
    pub round: usize,
    pub subscribers: usize,
    pub payload_bytes: usize,
    pub published: u64,
    pub publish_rate: f64,
    pub delivered: u64,
    pub delivered_per_sec: f64,
    pub delivered_mib_per_sec: f64,
    pub expected: u64,
    pub lost: u64,
    pub loss_ratio: f64,
    pub latency: Latency,
    pub acks: u64,
    pub gate_stalls: u64,
    pub subscriber_closes: u64,
    pub errors: Tally,
    pub broker_cpu_cores: f64,
    /// Broker CPU time in the window (to the nanosecond, from schedstat)
    /// over the publishes in it: what one publish costs at this rate,
    /// fan-out included.
    pub broker_cpu_us_per_publish: f64,
    /// Broker CPU with the subscribers connected and nothing published
    /// (`idle_secs`; 0 when not measured): heartbeats and timers.
    pub broker_idle_cpu_cores: f64,
    /// `broker_cpu_us_per_publish` less the idle CPU's share per publish.
    pub broker_cpu_us_per_publish_net: f64,
    pub loadgen_cpu_cores: f64,
    /// CPU used by everything else on the machine meanwhile.
    pub background_cpu_cores: f64,
    pub broker_rss_mib_before: f64,
    pub broker_rss_mib_max: f64,
    pub connect_secs: f64,
    #[serde(skip)]
    pub curve: Vec<(f64, u64)>,
}

/// Measures one cell on a fresh broker.
pub async fn run_cell(
    env: &Env,
    kind: Kind,
    subscribers: usize,
    payload_bytes: usize,
    p: &Params,
) -> Result<FanoutCell> {
    let layers = [target::RAISED_ACCEPT_BUDGET];
    let Running {
        process, target, ..
    } = env.start(kind, &layers)?;
    let topic = target.topic("fanout");
    let base = Instant::now();
    // Publishers speak `/v1/ws` whatever the subscribers speak.
    let pub_target = match kind {
        Kind::Graphql | Kind::Sse => Target {
            kind: Kind::Tidegate,
            ..target.clone()
        },
        _ => target.clone(),
    };
    let mut pub_accounts = Accounts::new("publisher", 64);
    pub_accounts.plan = Some(PUBLISHER_PLAN.to_string());

    let connect_start = Instant::now();
    let mut target = target;
    if kind == Kind::Graphql {
        // One held message, so each GraphQL subscription (from just
        // before it) gets a `next` that says it is live (the protocol has
        // no ack).
        target.since = first_message(&pub_target, &pub_accounts, &topic).await? - 1;
    }
    let subs_accounts = Accounts::new("sub", p.subscribers_per_account);
    let conns = open_many(
        &target,
        &subs_accounts,
        subscribers,
        p.connect_concurrency,
        16 * 1024,
        |_| Some(topic.clone()),
    )
    .await?;
    // A Pusher client sends client events on a channel it is subscribed to.
    let pub_topic = kind.pusher_wire().then(|| topic.clone());
    let pubs = open_many(
        &pub_target,
        &pub_accounts,
        p.publishers,
        8,
        16 * 1024,
        |_| pub_topic.clone(),
    )
    .await?;
    let connect_secs = connect_start.elapsed().as_secs_f64();

    let sh = Shared::new(base, subscribers);
    let rss_before = process.rss_bytes();
    let sampler = super::RssSampler::start(process.pid, Duration::from_millis(250), base);
    let mut tasks = Vec::new();
    for c in conns {
        tasks.push(tokio::task::spawn_local(subscriber(c, sh.clone())));
    }
    let broker_idle_cpu_cores = if p.idle_secs > 0.0 {
        let idle = CpuMeter::start(process.pid);
        let t0 = Instant::now();
        tokio::time::sleep(Duration::from_secs_f64(p.idle_secs)).await;
        idle.precise_secs() / t0.elapsed().as_secs_f64()
    } else {
        0.0
    };
    let per_pub_rate = match p.rate {
        Rate::PerSec(r) => r / p.publishers as f64,
        Rate::Max => 0.0,
    };
    let mut pub_tasks = Vec::new();
    for c in pubs {
        pub_tasks.push(tokio::task::spawn_local(publisher(
            c,
            sh.clone(),
            topic.clone(),
            payload_bytes,
            p.rate,
            p.window as u64,
            per_pub_rate,
        )));
    }

    tokio::time::sleep(Duration::from_secs_f64(p.warmup_secs)).await;
    let broker_cpu = CpuMeter::start(process.pid);
    let own_cpu = CpuMeter::start(std::process::id());
    let background = super::Background::start(&[process.pid, std::process::id()]);
    sh.measuring.set(true);
    let window_start = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(p.duration_secs)).await;
    sh.measuring.set(false);
    let window = window_start.elapsed().as_secs_f64();
    let broker_cpu_cores = broker_cpu.cores();
    let broker_cpu_secs = broker_cpu.precise_secs();
    let loadgen_cpu_cores = own_cpu.cores();
    let background_cpu_cores = background.cores();
    sh.stop.set(true);
    for t in pub_tasks {
        // A publisher blocked in its gate notices `stop` within 500 ms.
        match tokio::time::timeout(Duration::from_secs(3), t).await {
            Ok(Ok(Err(e))) => sh.errors.borrow_mut().add(format!("publisher: {e}"), 1),
            Ok(_) => {}
            Err(_) => sh.errors.borrow_mut().add("publisher did not stop", 1),
        }
    }
    // Let what is in flight arrive (or be counted lost).
    let expected = sh.published.get() * subscribers as u64;
    let mut last = (sh.received.get(), Instant::now());
    while sh.received.get() < expected && last.1.elapsed() < Duration::from_secs(2) {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if sh.received.get() != last.0 {
            last = (sh.received.get(), Instant::now());
        }
    }
    let rss_max = sampler.max().max(process.rss_bytes());
    drop(sampler);
    for t in tasks {
        t.abort();
    }
    let received = sh.received.get();
    let lost = expected.saturating_sub(received);
    let in_window = sh.in_window.get();
    let hist = sh.hist.borrow();
    let cell = FanoutCell {
        broker: kind.name(),
        round: 1,
        subscribers,
        payload_bytes,
        published: sh.published.get(),
        publish_rate: report::round2(sh.published_in_window.get() as f64 / window),
        delivered: in_window,
        delivered_per_sec: (in_window as f64 / window).round(),
        delivered_mib_per_sec: report::round2(
            in_window as f64 * payload_bytes as f64 / window / 1024.0 / 1024.0,
        ),
        expected,
        lost,
        loss_ratio: if expected > 0 {
            (lost as f64 / expected as f64 * 1e6).round() / 1e6
        } else {
            0.0
        },
        latency: Latency::of(&hist),
        acks: sh.acks.get(),
        gate_stalls: sh.stalls.get(),
        subscriber_closes: sh.closes.get(),
        errors: sh.errors.borrow().clone(),
        broker_cpu_cores,
        loadgen_cpu_cores,
        background_cpu_cores,
        broker_rss_mib_before: mib(rss_before),
        broker_rss_mib_max: mib(rss_max),
        broker_cpu_us_per_publish: report::per_op_us(broker_cpu_secs, sh.published_in_window.get()),
        broker_idle_cpu_cores: (broker_idle_cpu_cores * 1e4).round() / 1e4,
        broker_cpu_us_per_publish_net: report::per_op_us(
            (broker_cpu_secs - broker_idle_cpu_cores * window).max(0.0),
            sh.published_in_window.get(),
        ),
        connect_secs: report::round2(connect_secs),
        curve: report::percentile_curve(&hist),
    };
    drop(hist);
    drop(process);
    Ok(cell)
}

/// Publishes one message to `topic` and returns its seq (from the ack).
async fn first_message(target: &Target, accounts: &Accounts, topic: &str) -> Result<u64> {
    let mut first = open_many(target, accounts, 1, 1, 16 * 1024, |_| None).await?;
    let conn = &mut first[0];
    let (mut out, mut data) = (Vec::new(), Vec::new());
    target::payload(target::MIN_PAYLOAD, 0, 0, &mut data);
    conn.publish_frame(topic, &data, 0, &mut out);
    conn.ws.write_raw(&out).await?;
    let seq = conn
        .ws
        .wait_for(target::PATIENCE, |op, p| {
            let ack = op == crate::ws::OP_TEXT && p.starts_with(br#"{"type":"ack""#);
            ack.then(|| serde_json::from_slice::<serde_json::Value>(p).ok())
                .flatten()
                .and_then(|v| v["seq"].as_u64())
        })
        .await
        .context("the first message's ack")?;
    Ok(seq)
}

/// Every (subscribers, payload) cell for each broker, Tidegate first.
pub async fn run(env: &Env, kinds: &[Kind], p: &Params) -> Result<serde_json::Value> {
    let mut cells = Vec::new();
    let rounds = p.rounds.max(1);
    for round in 1..=rounds {
        for &subs in &p.subscribers {
            for &bytes in &p.payloads {
                for &kind in kinds {
                    eprintln!(
                        "fanout: {} subscribers={subs} payload={bytes} rate={:?} round={round}/{rounds}",
                        kind.name(),
                        p.rate
                    );
                    let mut cell =
                        run_cell(env, kind, subs, bytes.max(target::MIN_PAYLOAD), p).await?;
                    cell.round = round;
                    eprintln!(
                        "  delivered/s={} publishes/s={} lost={} p99={}us broker_cpu={} cpu_us/publish={} (net {}) loadgen_cpu={} background_cpu={}",
                        cell.delivered_per_sec,
                        cell.publish_rate,
                        cell.lost,
                        cell.latency.p99_us,
                        cell.broker_cpu_cores,
                        cell.broker_cpu_us_per_publish,
                        cell.broker_cpu_us_per_publish_net,
                        cell.loadgen_cpu_cores,
                        cell.background_cpu_cores
                    );
                    cells.push(cell);
                }
            }
        }
    }
    if let Some(path) = &env.chart {
        chart::chart(path, &cells)?;
    }
    let graphql = chart::compare_with_ws(&cells, "graphql");
    let sse = chart::compare_with_ws(&cells, "sse");
    let pusher = chart::compare_with_ws(&cells, "pusher");
    let pusher_vs_sockudo = chart::compare_between(&cells, "pusher", "sockudo");
    let sockudo = chart::compare_with_ws(&cells, "sockudo");
    Ok(json!({
        "tidegate_vs_nats": chart::compare(&cells, "nats"),
        "tidegate_vs_relay": chart::compare(&cells, "relay"),
        "graphql_vs_ws_rounds": chart::over_rounds(&graphql),
        "sse_vs_ws_rounds": chart::over_rounds(&sse),
        "graphql_vs_ws": graphql,
        "sse_vs_ws": sse,
        "pusher_vs_ws_rounds": chart::over_rounds(&pusher),
        "pusher_vs_ws": pusher,
        "pusher_vs_sockudo_rounds": chart::over_rounds(&pusher_vs_sockudo),
        "pusher_vs_sockudo": pusher_vs_sockudo,
        "sockudo_vs_ws_rounds": chart::over_rounds(&sockudo),
        "sockudo_vs_ws": sockudo,
        "cells": cells,
    }))
}
