//! `handshakes`: C clients each looping open → authenticated → close for a
//! fixed time; completed handshakes per second, their latency, and
//! refusals by status.
//!
//! What "authenticated" means differs by broker and is reported as such:
//! Tidegate verifies an HS256 JWT from `Sec-WebSocket-Protocol` (signature,
//! expiry, claims, channel globs) before the upgrade and then sends
//! `welcome`; NATS upgrades, sends `INFO`, and checks the token in the
//! client's `CONNECT` (a string comparison), confirmed by `PONG`. Each
//! Tidegate handshake uses a token minted beforehand for an account of its
//! own, so the per-identity bucket (burst 10) does not refuse the
//! benchmark itself; the node accept budget and per-IP limits are raised
//! (all load comes from one address).

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::Result;
use hdrhistogram::Histogram;
use serde::Serialize;
use serde_json::json;

use super::{CpuMeter, Env, Tally, refusal_key};
use crate::report::{self, Latency};
use crate::target::{Kind, Target, Who};

#[derive(Debug, Clone, Serialize)]
pub struct Params {
    pub concurrency: usize,
    pub duration_secs: f64,
    /// Distinct pre-minted tokens (Tidegate), used in turn.
    pub tokens: usize,
    /// Close as RFC 6455 §7.1.1 has it: send a close frame, then wait for
    /// the server to end the TCP connection (a handshake counts once it
    /// has). Otherwise the client stops at the server's close frame.
    pub polite: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct HandshakeRun {
    pub broker: &'static str,
    pub auth: &'static str,
    pub completed: u64,
    pub handshakes_per_sec: f64,
    pub latency: Latency,
    pub refusals: Tally,
    pub errors: Tally,
    pub broker_cpu_cores: f64,
    pub loadgen_cpu_cores: f64,
    pub background_cpu_cores: f64,
}

struct Shared {
    deadline: Instant,
    next: Cell<usize>,
    completed: Cell<u64>,
    hist: RefCell<Histogram<u64>>,
    refusals: RefCell<Tally>,
    errors: RefCell<Tally>,
}

async fn worker(target: Target, tokens: Rc<Vec<(String, String)>>, sh: Rc<Shared>, polite: bool) {
    while Instant::now() < sh.deadline {
        let n = sh.next.get();
        sh.next.set(n + 1);
        let (account, token) = if tokens.is_empty() {
            ("nats", None)
        } else {
            let (a, t) = &tokens[n % tokens.len()];
            (a.as_str(), Some(t.as_str()))
        };
        let who = Who {
            account,
            plan: None,
            token,
        };
        let t0 = Instant::now();
        match target.connect(&who, n as u64 + 7, 2048, 0).await {
            Ok(Ok(conn)) => {
                let us = report::micros(t0.elapsed());
                let _ = sh.hist.borrow_mut().record(us);
                if polite {
                    if !conn.ws.close_politely(1000, crate::target::PATIENCE).await {
                        sh.errors
                            .borrow_mut()
                            .add("no end of stream after close", 1);
                        continue;
                    }
                } else {
                    conn.ws.close_and_wait(1000, Duration::from_secs(1)).await;
                }
                sh.completed.set(sh.completed.get() + 1);
            }
            Ok(Err(r)) => sh.refusals.borrow_mut().add(refusal_key(&r), 1),
            Err(e) => {
                let kind = e
                    .downcast_ref::<std::io::Error>()
                    .map(|io| format!("{:?}", io.kind()))
                    .unwrap_or_else(|| e.to_string());
                sh.errors.borrow_mut().add(kind, 1);
                // Out of ports or file descriptors: back off a little.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

pub async fn run_one(env: &Env, kind: Kind, p: &Params) -> Result<HandshakeRun> {
    let layers = [crate::target::RAISED_ACCEPT_BUDGET];
    let running = env.start(kind, &layers)?;
    let target = running.target.clone();
    let tokens: Vec<(String, String)> = match kind {
        Kind::Tidegate | Kind::Graphql | Kind::Sse => (0..p.tokens.max(1))
            .map(|i| {
                let account = format!("hs{i}");
                let who = Who {
                    account: &account,
                    plan: None,
                    token: None,
                };
                let token = target.token(&who).unwrap_or_default();
                (account, token)
            })
            .collect(),
        Kind::Nats | Kind::Relay | Kind::Pusher | Kind::Sockudo => Vec::new(),
    };
    let tokens = Rc::new(tokens);
    let sh = Rc::new(Shared {
        deadline: Instant::now() + Duration::from_secs_f64(p.duration_secs),
        next: Cell::new(0),
        completed: Cell::new(0),
        hist: RefCell::new(report::histogram()),
        refusals: RefCell::new(Tally::default()),
        errors: RefCell::new(Tally::default()),
    });
    let broker_cpu = CpuMeter::start(running.process.pid);
    let own_cpu = CpuMeter::start(std::process::id());
    let background = super::Background::start(&[running.process.pid, std::process::id()]);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..p.concurrency.max(1) {
        tasks.push(tokio::task::spawn_local(worker(
            target.clone(),
            tokens.clone(),
            sh.clone(),
            p.polite,
        )));
    }
    for t in tasks {
        let _ = t.await;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let broker_cpu_cores = broker_cpu.cores();
    let loadgen_cpu_cores = own_cpu.cores();
    let background_cpu_cores = background.cores();
    let hist = sh.hist.borrow();
    Ok(HandshakeRun {
        broker: kind.name(),
        auth: match kind {
            Kind::Tidegate => "HS256 JWT in Sec-WebSocket-Protocol, verified before the upgrade",
            Kind::Nats => "token in CONNECT (authorization { token }), confirmed by PONG",
            Kind::Relay => "none: the relay reads no token",
            Kind::Graphql => "HS256 JWT in connection_init, after the upgrade",
            Kind::Sse => "not measured: SSE streams open in fanout and idle only",
            Kind::Pusher | Kind::Sockudo => {
                "not measured: the Pusher wire opens in fanout and idle only"
            }
        },
        completed: sh.completed.get(),
        handshakes_per_sec: (sh.completed.get() as f64 / elapsed).round(),
        latency: Latency::of(&hist),
        refusals: sh.refusals.borrow().clone(),
        errors: sh.errors.borrow().clone(),
        broker_cpu_cores,
        loadgen_cpu_cores,
        background_cpu_cores,
    })
}

pub async fn run(env: &Env, kinds: &[Kind], p: &Params) -> Result<serde_json::Value> {
    let mut runs = Vec::new();
    for &kind in kinds {
        eprintln!("handshakes: {} concurrency={}", kind.name(), p.concurrency);
        let r = run_one(env, kind, p).await?;
        eprintln!(
            "  {} handshakes/s, p99 {} us, refusals {:?}, errors {:?}",
            r.handshakes_per_sec, r.latency.p99_us, r.refusals.0, r.errors.0
        );
        runs.push(r);
        // Let TIME_WAIT sockets of this run age a little before the next.
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let t = runs.iter().find(|r| r.broker == "tidegate");
    let n = runs.iter().find(|r| r.broker == "nats");
    let comparison = match (t, n) {
        (Some(t), Some(n)) => json!({
            "handshakes_per_sec_ratio": report::ratio(t.handshakes_per_sec, n.handshakes_per_sec),
            "p99_ratio": report::ratio(t.latency.p99_us as f64, n.latency.p99_us as f64),
        }),
        _ => json!(null),
    };
    if let Some(path) = &env.chart {
        chart(path, &runs)?;
    }
    Ok(json!({ "runs": runs, "tidegate_vs_nats": comparison }))
}

/// Handshakes/s and their p99, one bar per broker.
fn chart(path: &std::path::Path, runs: &[HandshakeRun]) -> Result<()> {
    use crate::chart::{Bars, Panel, draw};
    let what = "open + authenticate + close";
    let each = || runs.iter().map(|r| (r.broker, r));
    let rate = Bars::per_broker("Handshakes/s", "handshakes/s", what, each(), |r| {
        r.handshakes_per_sec
    });
    let title = "Handshake p99 (open → authenticated)";
    let p99 = Bars::per_broker(title, "ms", what, each(), |r| {
        r.latency.p99_us as f64 / 1000.0
    });
    draw(
        path,
        (1000, 420),
        &[(500, Panel::Bars(rate)), (500, Panel::Bars(p99))],
    )
}
