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

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::Result;
use hdrhistogram::Histogram;
use serde::Serialize;
use serde_json::json;
use tokio::sync::Notify;

pub use super::rate::Rate;
use super::{Accounts, CpuMeter, Env, Running, Tally, mib, open_many};
use crate::report::{self, Latency};
use crate::target::{self, Conn, Event, Kind, PUBLISHER_PLAN};
use crate::ws::Flow;

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
}

/// One (broker, subscribers, payload) measurement.
#[derive(Debug, Clone, Serialize)]
pub struct FanoutCell {
    pub broker: &'static str,
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

pub(super) struct Shared {
    pub(super) base: Instant,
    pub(super) subscribers: u64,
    pub(super) received: Cell<u64>,
    pub(super) in_window: Cell<u64>,
    pub(super) measuring: Cell<bool>,
    pub(super) published: Cell<u64>,
    pub(super) published_in_window: Cell<u64>,
    /// Deliveries written off by a stalled gate (a message that will
    /// never arrive must not hold the publisher forever).
    pub(super) forgiven: Cell<u64>,
    pub(super) wake_at: Cell<u64>,
    pub(super) wake: Notify,
    pub(super) acks: Cell<u64>,
    pub(super) closes: Cell<u64>,
    pub(super) stalls: Cell<u64>,
    pub(super) stop: Cell<bool>,
    pub(super) hist: RefCell<Histogram<u64>>,
    pub(super) errors: RefCell<Tally>,
}

impl Shared {
    pub(super) fn new(base: Instant, subscribers: usize) -> Rc<Shared> {
        Rc::new(Shared {
            base,
            subscribers: subscribers.max(1) as u64,
            received: Cell::new(0),
            in_window: Cell::new(0),
            measuring: Cell::new(false),
            published: Cell::new(0),
            published_in_window: Cell::new(0),
            forgiven: Cell::new(0),
            wake_at: Cell::new(u64::MAX),
            wake: Notify::new(),
            acks: Cell::new(0),
            closes: Cell::new(0),
            stalls: Cell::new(0),
            stop: Cell::new(false),
            hist: RefCell::new(report::histogram()),
            errors: RefCell::new(Tally::default()),
        })
    }

    fn now_ns(&self) -> u64 {
        self.base.elapsed().as_nanos() as u64
    }

    /// Messages every subscriber has, on average.
    fn delivered_msgs(&self) -> u64 {
        (self.received.get() + self.forgiven.get()) / self.subscribers
    }
}

pub(super) async fn subscriber(mut conn: Conn, sh: Rc<Shared>) {
    loop {
        let mut now_ns = 0u64;
        let mut closed = false;
        let r = conn
            .recv(|e| {
                match e {
                    Event::Message { data } => {
                        if now_ns == 0 {
                            now_ns = sh.now_ns();
                        }
                        sh.received.set(sh.received.get() + 1);
                        if sh.measuring.get() {
                            sh.in_window.set(sh.in_window.get() + 1);
                            if let Some((_, sent)) = target::parse_payload(data) {
                                let us = now_ns.saturating_sub(sent) / 1000;
                                let _ = sh.hist.borrow_mut().record(us.max(1));
                            }
                        }
                    }
                    Event::Closed { code } => {
                        sh.errors
                            .borrow_mut()
                            .add(format!("close {}", code.unwrap_or(0)), 1);
                        closed = true;
                    }
                    Event::Error { code, .. } => sh.errors.borrow_mut().add(code, 1),
                    _ => {}
                }
                Flow::Continue
            })
            .await;
        if sh.received.get() >= sh.wake_at.get() {
            sh.wake_at.set(u64::MAX);
            // Single-threaded: every waiting publisher is registered.
            sh.wake.notify_waiters();
        }
        if r.is_err() || closed {
            sh.closes.set(sh.closes.get() + 1);
            return;
        }
    }
}

/// What the publisher loop waits for next.
enum Next {
    Acks(Result<()>),
    Send(u64),
}

pub(super) async fn publisher(
    mut conn: Conn,
    sh: Rc<Shared>,
    topic: String,
    payload_bytes: usize,
    rate: Rate,
    window: u64,
    per_publisher_rate: f64,
) -> Result<()> {
    let mut out = Vec::with_capacity(64 * 1024);
    let mut data = Vec::with_capacity(payload_bytes);
    let start = Instant::now();
    let mut sent_here = 0u64;
    while !sh.stop.get() {
        let next = {
            let gate = async {
                match rate {
                    Rate::Max => loop {
                        let published = sh.published.get();
                        let delivered = sh.delivered_msgs();
                        if published < delivered + window {
                            return (delivered + window - published).min(32);
                        }
                        // Wake when the oldest in-flight message is in.
                        let need = (published + 1 - window) * sh.subscribers;
                        let at = need.saturating_sub(sh.forgiven.get());
                        sh.wake_at.set(sh.wake_at.get().min(at));
                        if tokio::time::timeout(Duration::from_millis(500), sh.wake.notified())
                            .await
                            .is_err()
                        {
                            // Something was lost: write it off so the
                            // publisher goes on (the loss is still counted).
                            sh.stalls.set(sh.stalls.get() + 1);
                            let got = sh.received.get() + sh.forgiven.get();
                            sh.forgiven
                                .set(sh.forgiven.get() + need.saturating_sub(got));
                        }
                    },
                    Rate::PerSec(_) => {
                        let period = Duration::from_secs_f64(1.0 / per_publisher_rate);
                        let due = start + period.mul_f64(sent_here as f64);
                        tokio::time::sleep_until(due.into()).await;
                        // Everything due by now goes out (catch-up).
                        let elapsed = start.elapsed().as_secs_f64();
                        let due_total = (elapsed * per_publisher_rate) as u64 + 1;
                        due_total.saturating_sub(sent_here).clamp(1, 64)
                    }
                }
            };
            tokio::select! {
                biased;
                r = conn.recv(|e| {
                    if let Event::Ack = e {
                        sh.acks.set(sh.acks.get() + 1);
                    }
                    Flow::Continue
                }) => Next::Acks(r),
                n = gate => Next::Send(n),
            }
        };
        match next {
            Next::Acks(r) => r?,
            Next::Send(n) => {
                out.clear();
                for _ in 0..n {
                    let index = sh.published.get();
                    sh.published.set(index + 1);
                    if sh.measuring.get() {
                        sh.published_in_window.set(sh.published_in_window.get() + 1);
                    }
                    let sent_ns = match rate {
                        // The time the message was due, not when it left.
                        Rate::PerSec(_) => {
                            let due = start
                                + Duration::from_secs_f64(sent_here as f64 / per_publisher_rate);
                            due.saturating_duration_since(sh.base).as_nanos() as u64
                        }
                        Rate::Max => sh.now_ns(),
                    };
                    sent_here += 1;
                    target::payload(payload_bytes, index, sent_ns, &mut data);
                    conn.publish_frame(&topic, &data, index, &mut out);
                }
                conn.ws.write_raw(&out).await?;
            }
        }
    }
    Ok(())
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

    let connect_start = Instant::now();
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
    let mut pub_accounts = Accounts::new("publisher", 64);
    pub_accounts.plan = Some(PUBLISHER_PLAN.to_string());
    let pubs = open_many(&target, &pub_accounts, p.publishers, 8, 16 * 1024, |_| None).await?;
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

/// Every (subscribers, payload) cell for each broker, Tidegate first.
pub async fn run(env: &Env, kinds: &[Kind], p: &Params) -> Result<serde_json::Value> {
    let mut cells = Vec::new();
    for &subs in &p.subscribers {
        for &bytes in &p.payloads {
            for &kind in kinds {
                eprintln!(
                    "fanout: {} subscribers={subs} payload={bytes} rate={:?}",
                    kind.name(),
                    p.rate
                );
                let cell = run_cell(env, kind, subs, bytes.max(target::MIN_PAYLOAD), p).await?;
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
    if let Some(path) = &env.chart {
        chart(path, &cells)?;
    }
    Ok(json!({
        "tidegate_vs_nats": compare(&cells, "nats"),
        "tidegate_vs_relay": compare(&cells, "relay"),
        "cells": cells,
    }))
}

/// Tidegate over `peer`, cell by cell (empty when `peer` did not run).
fn compare(cells: &[FanoutCell], peer: &str) -> Vec<serde_json::Value> {
    let mut comparisons = Vec::new();
    for t in cells.iter().filter(|c| c.broker == "tidegate") {
        if let Some(n) = cells.iter().find(|c| {
            c.broker == peer && c.subscribers == t.subscribers && c.payload_bytes == t.payload_bytes
        }) {
            comparisons.push(json!({
                "subscribers": t.subscribers,
                "payload_bytes": t.payload_bytes,
                "delivered_per_sec_ratio": report::ratio(t.delivered_per_sec, n.delivered_per_sec),
                "p99_ratio": report::ratio(t.latency.p99_us as f64, n.latency.p99_us as f64),
                "tidegate_lost": t.lost,
                format!("{peer}_lost"): n.lost,
            }));
        }
    }
    comparisons
}

/// Delivered messages/s and p99 per cell, one bar per broker.
fn chart(path: &std::path::Path, cells: &[FanoutCell]) -> Result<()> {
    use crate::chart::{Bars, Panel, Series, color_of, draw};
    let mut keys: Vec<(usize, usize)> = Vec::new();
    for c in cells {
        if !keys.contains(&(c.subscribers, c.payload_bytes)) {
            keys.push((c.subscribers, c.payload_bytes));
        }
    }
    let labels: Vec<String> = keys
        .iter()
        .map(|(s, b)| format!("{s} subs, {b} B"))
        .collect();
    let brokers = ["tidegate", "nats", "relay"]
        .into_iter()
        .filter(|b| cells.iter().any(|c| c.broker == *b));
    let panel = |title: &str, y: &str, f: &dyn Fn(&FanoutCell) -> f64| {
        let series = brokers.clone().map(|b| {
            let at = |&(s, n): &(usize, usize)| {
                let cell = cells
                    .iter()
                    .find(|c| c.broker == b && c.subscribers == s && c.payload_bytes == n);
                cell.map_or(0.0, f)
            };
            Series::new(b, color_of(b), keys.iter().map(at).collect())
        });
        let (title, y_desc) = (title.into(), y.into());
        Panel::Bars(Bars {
            title,
            y_desc,
            categories: labels.clone(),
            series: series.collect(),
            hline: None,
        })
    };
    let rate = panel("Fan-out: delivered messages/s", "million msgs/s", &|c| {
        c.delivered_per_sec / 1e6
    });
    let p99 = panel("Fan-out: p99 publish→receive", "ms", &|c| {
        c.latency.p99_us as f64 / 1000.0
    });
    draw(path, (1200, 480), &[(600, rate), (600, p99)])
}
