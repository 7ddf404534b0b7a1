//! `storm`: N connected, subscribed clients lose their connections at
//! once and reconnect, once with a fixed delay (every client at once, then
//! a fixed retry interval) and once with full jitter (seed 002); the
//! broker's accepts per 100 ms, refusals by status, and the time until
//! every client is back.
//!
//! Tidegate keeps its node accept budget at the default (2,000
//! handshakes/s) unless `--node-accepts` says otherwise, so the accept rate
//! should plateau at the budget while the rest are told to retry (503
//! `node_overloaded` with `Retry-After`). Per-IP limits are raised: every
//! client comes from 127.0.0.1. Clients are spread 4 to an account so the
//! reconnect stays inside the per-identity burst (10).
//!
//! Beside the storm, `bystanders` sockets connected before it and not part
//! of it report their heartbeats, ping round trips and deliveries during
//! it (`bystanders.rs`), and the broker's own accept counter
//! (`tidegate_connections_opened_total`) is sampled on a kept-alive
//! connection: accepts per second as the broker counts them. The node's
//! heartbeat interval is set to `heartbeat_ms` (1 s by default, shipped
//! 15 s) so that a storm of a few seconds spans several heartbeats; every
//! socket, storm clients included, is pinged that often.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::Result;
use serde::Serialize;
use serde_json::json;

use super::bystanders::{self, Watch};
use super::keepalive::{self, BrokerAccepts, Publisher};
use super::{Accounts, Env, Tally, open_many, refusal_key};
use crate::report;
use crate::target::{Kind, Target, Who};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Everyone at once, then retries every `fixed_retry_ms`.
    Fixed,
    /// First attempt uniform in [0, jitter_ms), then full-jitter
    /// exponential backoff (base 250 ms, cap 5 s).
    Jitter,
}

#[derive(Debug, Clone, Serialize)]
pub struct Params {
    pub clients: usize,
    pub clients_per_account: usize,
    pub modes: Vec<Mode>,
    pub jitter_ms: u64,
    pub fixed_retry_ms: u64,
    pub patience_secs: f64,
    /// Tidegate's node accept budget; None keeps the default.
    pub node_accepts_per_sec: Option<f64>,
    /// Sockets outside the storm that report what they saw during it.
    pub bystanders: usize,
    /// The node's `socket.heartbeat_interval_ms` for the run.
    pub heartbeat_ms: u64,
    /// How often the broker's accept counter is sampled.
    pub metrics_ms: u64,
}

pub const BIN_MS: u64 = 100;

#[derive(Debug, Clone, Serialize)]
pub struct StormRun {
    pub broker: &'static str,
    pub mode: Mode,
    pub clients: usize,
    pub reconnected: usize,
    pub all_back_secs: Option<f64>,
    pub attempts: u64,
    pub peak_accepts_per_sec: u64,
    pub mean_accepts_per_sec: f64,
    pub refusals: Tally,
    pub errors: Tally,
    /// Accepted handshakes per 100 ms bin from the drop.
    pub accepts_per_bin: Vec<u64>,
    pub refusals_per_bin: Vec<u64>,
    /// Accepts per second as the broker counted them.
    pub broker_accepts: BrokerAccepts,
    /// What the sockets outside the storm saw during it.
    pub bystanders: Option<bystanders::Report>,
}

#[derive(Default)]
struct Log {
    accepts: Vec<f64>,
    refusals: Vec<f64>,
    by_status: Tally,
    errors: Tally,
    attempts: u64,
}

struct Rng(u64);

impl Rng {
    fn next_f64(&mut self) -> f64 {
        // SplitMix64.
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[allow(clippy::too_many_arguments)]
async fn reconnect(
    target: Target,
    account: String,
    topic: String,
    i: usize,
    mode: Mode,
    p: Rc<Params>,
    t0: Instant,
    log: Rc<RefCell<Log>>,
) -> Option<crate::target::Conn> {
    let mut rng = Rng(i as u64 * 7919 + 17);
    let deadline = t0 + Duration::from_secs_f64(p.patience_secs);
    if mode == Mode::Jitter {
        let first = rng.next_f64() * p.jitter_ms as f64;
        tokio::time::sleep(Duration::from_secs_f64(first / 1000.0)).await;
    }
    let mut attempt = 0u32;
    while Instant::now() < deadline {
        log.borrow_mut().attempts += 1;
        let who = Who {
            account: &account,
            plan: None,
            token: None,
        };
        let outcome = target
            .connect(&who, i as u64 * 31 + u64::from(attempt), 4096, 0)
            .await;
        let at = t0.elapsed().as_secs_f64();
        match outcome {
            Ok(Ok(mut conn)) => {
                if conn.subscribe(&topic).await.is_ok() {
                    log.borrow_mut().accepts.push(at);
                    return Some(conn);
                }
                log.borrow_mut().errors.add("subscribe failed", 1);
            }
            Ok(Err(r)) => {
                let mut l = log.borrow_mut();
                l.refusals.push(at);
                l.by_status.add(refusal_key(&r), 1);
            }
            Err(e) => {
                let kind = e
                    .downcast_ref::<std::io::Error>()
                    .map(|io| format!("{:?}", io.kind()))
                    .unwrap_or_else(|| e.to_string());
                log.borrow_mut().errors.add(kind, 1);
            }
        }
        attempt += 1;
        let wait_ms = match mode {
            Mode::Fixed => p.fixed_retry_ms as f64,
            Mode::Jitter => {
                let ceiling = (250.0 * 2f64.powi(attempt.min(16) as i32)).min(5000.0);
                rng.next_f64() * ceiling
            }
        };
        tokio::time::sleep(Duration::from_secs_f64(wait_ms / 1000.0)).await;
    }
    None
}

pub async fn run_one(env: &Env, kind: Kind, mode: Mode, p: &Params) -> Result<StormRun> {
    let budget = p
        .node_accepts_per_sec
        .map(|r| format!("[handshake]\nnode_accepts_per_sec = {r:?}\n"))
        .unwrap_or_default();
    let heartbeat = format!("[socket]\nheartbeat_interval_ms = {}\n", p.heartbeat_ms);
    let running = env.start(kind, &[budget.as_str(), heartbeat.as_str()])?;
    let target = running.target.clone();
    let mut watchers = match p.bystanders {
        0 => None,
        n => {
            let topic = target.topic("bystanders");
            let config = &running.config;
            Some(Watch::spawn(&target, config, n, &topic, p.heartbeat_ms).await?)
        }
    };
    let accounts = Accounts::new("storm", p.clients_per_account);
    let topic_of = |i: usize| target.topic(&format!("storm-{}", i % 100));
    let conns = open_many(&target, &accounts, p.clients, 100, 2048, |i| {
        Some(topic_of(i))
    })
    .await?;
    let sampling = Rc::new(std::cell::Cell::new(false));
    let sampler = {
        let conn = Publisher::connect(&target).await?;
        let every = Duration::from_millis(p.metrics_ms);
        tokio::task::spawn_local(keepalive::sample_accepts(conn, every, sampling.clone()))
    };
    // Let the initial connects leave the node budget's window.
    tokio::time::sleep(Duration::from_secs(2)).await;

    // The drop: every connection ends at once (as a node restart or a
    // network blip looks from the clients).
    drop(conns);
    let t0 = Instant::now();
    if let Some(w) = watchers.as_mut() {
        w.storm_starts(t0);
    }
    let log = Rc::new(RefCell::new(Log::default()));
    let shared = Rc::new(p.clone());
    let mut tasks = Vec::with_capacity(p.clients);
    for i in 0..p.clients {
        tasks.push(tokio::task::spawn_local(reconnect(
            target.clone(),
            accounts.account(i),
            topic_of(i),
            i,
            mode,
            shared.clone(),
            t0,
            log.clone(),
        )));
    }
    let mut back = Vec::with_capacity(p.clients);
    for t in tasks {
        if let Ok(Some(c)) = t.await {
            back.push(c);
        }
    }
    let reconnected = back.len();
    // One more second of samples and of the bystanders' watch: the
    // counter's last rise is seen, and the node's state right after.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let watched = t0.elapsed().as_secs_f64();
    sampling.set(true);
    let samples: Vec<(f64, f64)> = sampler
        .await
        .unwrap_or_default()
        .into_iter()
        .map(|(at, c)| (secs_from(t0, at), c))
        .collect();
    let broker_accepts = keepalive::broker_accepts(&samples, p.metrics_ms);
    let bystanders = match watchers {
        Some(w) => Some(w.finish(watched).await?),
        None => None,
    };
    drop(back);
    drop(running);

    let log = log.borrow();
    let last = log
        .accepts
        .iter()
        .chain(log.refusals.iter())
        .fold(0.0f64, |a, &b| a.max(b));
    let bins = ((last * 1000.0) as u64 / BIN_MS + 1) as usize;
    let mut accepts_per_bin = vec![0u64; bins];
    let mut refusals_per_bin = vec![0u64; bins];
    for &a in &log.accepts {
        accepts_per_bin[((a * 1000.0) as u64 / BIN_MS) as usize] += 1;
    }
    for &r in &log.refusals {
        refusals_per_bin[((r * 1000.0) as u64 / BIN_MS) as usize] += 1;
    }
    let per_sec = (1000 / BIN_MS) as usize;
    let peak = accepts_per_bin
        .windows(per_sec.min(accepts_per_bin.len()).max(1))
        .map(|w| w.iter().sum::<u64>())
        .max()
        .unwrap_or(0);
    let all_back = (reconnected == p.clients)
        .then(|| log.accepts.iter().fold(0.0f64, |a, &b| a.max(b)))
        .map(report::round2);
    Ok(StormRun {
        broker: kind.name(),
        mode,
        clients: p.clients,
        reconnected,
        all_back_secs: all_back,
        attempts: log.attempts,
        peak_accepts_per_sec: peak,
        mean_accepts_per_sec: all_back
            .map(|s| (p.clients as f64 / s.max(1e-3)).round())
            .unwrap_or(0.0),
        refusals: log.by_status.clone(),
        errors: log.errors.clone(),
        accepts_per_bin,
        refusals_per_bin,
        broker_accepts,
        bystanders,
    })
}

/// Seconds from `t0` to `at` (negative before it).
fn secs_from(t0: Instant, at: Instant) -> f64 {
    if at >= t0 {
        (at - t0).as_secs_f64()
    } else {
        -(t0 - at).as_secs_f64()
    }
}

pub async fn run(env: &Env, p: &Params) -> Result<serde_json::Value> {
    let mut runs = Vec::new();
    for &mode in &p.modes {
        eprintln!("storm: tidegate clients={} mode={mode:?}", p.clients);
        let r = run_one(env, Kind::Tidegate, mode, p).await?;
        eprintln!(
            "  all back in {:?} s, peak {} accepts/s, refusals {:?}, errors {:?}",
            r.all_back_secs, r.peak_accepts_per_sec, r.refusals.0, r.errors.0
        );
        let b = &r.broker_accepts;
        eprintln!(
            "  broker counted {} accepts: peak {}/s, mean {}/s",
            b.accepted, b.peak_per_sec, b.mean_per_sec
        );
        if let Some(w) = &r.bystanders {
            eprintln!(
                "  bystanders {}: heartbeats {} missed {} (max gap {} ms), pong p99 {} max {} ms, delivered {}/{} (max {} ms), closed {}",
                w.bystanders,
                w.heartbeats,
                w.missed_heartbeats,
                w.max_heartbeat_gap_ms,
                w.p99_pong_rtt_ms,
                w.max_pong_rtt_ms,
                w.delivered,
                w.deliveries_due,
                w.max_delivery_ms,
                w.closed
            );
        }
        runs.push(r);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    if let Some(path) = &env.chart {
        chart(path, &runs)?;
    }
    Ok(json!({ "bin_ms": BIN_MS, "runs": runs }))
}

/// Accepted handshakes/s after the drop, as the clients and as the broker
/// counted them, against the default node accept budget.
fn chart(path: &std::path::Path, runs: &[StormRun]) -> Result<()> {
    use crate::chart::{FOURTH, Legend, Line, Lines, NATS, Panel, THIRD, TIDEGATE, draw, faded};
    let per_sec = (1000 / BIN_MS) as f64;
    let x_max = runs
        .iter()
        .map(|r| r.accepts_per_bin.len() as f64 * BIN_MS as f64 / 1000.0)
        .fold(1.0f64, f64::max);
    let y_max = runs
        .iter()
        .flat_map(|r| r.accepts_per_bin.iter())
        .map(|&v| v as f64 * per_sec)
        .fold(2500.0f64, f64::max)
        * 1.1;
    let mut lines = Vec::new();
    for (r, color) in runs.iter().zip([TIDEGATE, NATS, THIRD, FOURTH]) {
        let points = r
            .accepts_per_bin
            .iter()
            .enumerate()
            .map(|(i, &v)| (i as f64 * BIN_MS as f64 / 1000.0, v as f64 * per_sec))
            .collect();
        let label = match r.all_back_secs {
            Some(s) => format!("{:?}: all back in {s} s", r.mode).to_lowercase(),
            None => format!("{:?}: not all back", r.mode).to_lowercase(),
        };
        lines.push(Line::new(label, color, points));
        // The broker's own count, per sampling interval.
        let b = &r.broker_accepts;
        let scale = 1000.0 / b.sample_ms.max(1) as f64;
        let broker = b
            .series
            .iter()
            .filter(|&&(t, _)| (0.0..=x_max).contains(&t))
            .map(|&(t, n)| (t, n * scale))
            .collect();
        let label = format!("{:?}: as the broker counted (/metrics)", r.mode).to_lowercase();
        lines.push(Line {
            width: 1,
            ..Line::new(label, faded(color), broker)
        });
    }
    let chart = Lines {
        title: format!(
            "Reconnect storm: {} clients dropped at t=0 (accepts/s per 100 ms bin)",
            runs.first().map_or(0, |r| r.clients)
        ),
        x_desc: "seconds after the drop".into(),
        y_desc: "accepted handshakes/s".into(),
        x_max,
        y_max,
        lines,
        hlines: vec![(2000.0, "default node accept budget (2,000/s)".into())],
        legend: Legend::UpperRight,
    };
    draw(path, (1000, 460), &[(1000, Panel::Lines(chart))])
}
