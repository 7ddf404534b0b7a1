//! `keyed-publish`: what an idempotency key (§17) costs the publish path.
//! HTTP publish (`POST /v1/publish`, keep-alive connections) and the socket
//! publish (one publisher socket, a window of frames ahead of their acks),
//! each without a key and with a fresh key per message, in ONE run against
//! one broker, to S WebSocket subscribers of one channel. The four phases
//! alternate round by round (http, http keyed, ws, ws keyed, then again),
//! so drift on a shared machine spreads over all of them; each mode
//! (`memory`: one node; `redis`: one node through its own `redis-server`)
//! is a fresh broker.
//!
//! Every keyed message carries a key never used before, so every one is a
//! first publish: the phase measures what recording a key costs (the
//! node's table, and on Redis the key read and set in the publish
//! script), not the cheaper duplicates.

use std::cell::Cell;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::grpc_publish::{data, free_port, read_response};
use super::{Accounts, CpuMeter, Env, open_many, open_one};
use crate::report::round2;
use crate::target::{self, Event, Kind, PUBLISHER_PLAN};
use crate::ws::{Flow, OP_TEXT};

/// The API key the backend publishes with.
const BACKEND_KEY: &str = "tidegate-bench-keyed-backend";

#[derive(Debug, Clone, Serialize)]
pub struct Params {
    pub subscribers: usize,
    /// Seconds per phase per round.
    pub duration_secs: f64,
    pub rounds: usize,
    pub payload_bytes: usize,
    /// HTTP connections, and socket frames ahead of their acks.
    pub in_flight: usize,
    /// `memory` and/or `redis`.
    pub modes: Vec<String>,
}

#[derive(Debug, Default, Serialize)]
struct Phase {
    phase: &'static str,
    /// Acknowledged publishes per second, one value per round.
    per_round: Vec<f64>,
    publishes_per_sec: f64,
    deliveries_per_sec: f64,
    errors: u64,
    broker_cpu_cores: f64,
    /// Broker CPU µs per acknowledged publish.
    cpu_us_per_publish: f64,
}

const PHASES: [&str; 4] = ["http", "http_keyed", "ws", "ws_keyed"];

fn layer(extra: &str) -> String {
    format!(
        "[[api_keys]]\nkey = \"{BACKEND_KEY}\"\naccount = \"bench_backend\"\npub_channels = [\"doc:*\"]\n\
         [accounts.bench_backend]\nplan = \"{PUBLISHER_PLAN}\"\n{extra}"
    )
}

/// A `redis-server` on a free loopback port, killed when dropped.
struct Redis {
    child: Child,
    port: u16,
}

impl Redis {
    async fn start() -> Result<Redis> {
        let port = free_port()?;
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("redis-server (apt-get install redis-server)")?;
        let redis = Redis { child, port };
        let deadline = Instant::now() + target::PATIENCE;
        while TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            if Instant::now() > deadline {
                bail!("redis-server did not listen on {port}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(redis)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub async fn run(env: &Env, p: &Params) -> Result<Value> {
    let mut out = serde_json::Map::new();
    for mode in &p.modes {
        let r = match mode.as_str() {
            "memory" => run_mode(env, p, None).await?,
            "redis" => {
                let redis = Redis::start().await?;
                let r = run_mode(env, p, Some(&redis)).await?;
                drop(redis);
                r
            }
            other => bail!("unknown mode {other:?}: memory or redis"),
        };
        out.insert(mode.clone(), r);
    }
    Ok(Value::Object(out))
}

async fn run_mode(env: &Env, p: &Params, redis: Option<&Redis>) -> Result<Value> {
    let cluster = redis.map_or(String::new(), |r| {
        format!(
            "[cluster]\nmode = \"redis\"\nredis_url = \"redis://127.0.0.1:{}/\"\nkey_prefix = \"bench:\"\nsecret = \"bench-cluster-secret-0123456789\"\n",
            r.port
        )
    });
    let extra = layer(&cluster);
    let running = env.start(Kind::Tidegate, &[target::RAISED_ACCEPT_BUDGET, &extra])?;
    let target = running.target.clone();
    ready(target.addr).await?;
    let topic = target.topic("keyed");
    let accounts = Accounts::new("sub", 8);
    let subs = open_many(&target, &accounts, p.subscribers, 64, 64 * 1024, |_| {
        Some(topic.clone())
    })
    .await
    .context("subscribers")?;
    let delivered = Rc::new(Cell::new(0u64));
    let mut readers = Vec::with_capacity(subs.len());
    for mut conn in subs {
        let d = delivered.clone();
        readers.push(tokio::task::spawn_local(async move {
            loop {
                let mut closed = false;
                let r = conn
                    .recv(|e| {
                        match e {
                            Event::Message { .. } => d.set(d.get() + 1),
                            Event::Closed { .. } => closed = true,
                            _ => {}
                        }
                        Flow::Continue
                    })
                    .await;
                if r.is_err() || closed {
                    return;
                }
            }
        }));
    }
    let publishers = Accounts {
        plan: Some(PUBLISHER_PLAN.to_string()),
        ..Accounts::new("publisher", 8)
    };
    let mut publisher = open_one(&target, &publishers, 0, None, 64 * 1024, 10)
        .await
        .context("publisher socket")?;
    let body = data(p.payload_bytes);
    let duration = Duration::from_secs_f64(p.duration_secs);
    let mut phases: Vec<Phase> = PHASES
        .iter()
        .map(|&phase| Phase {
            phase,
            ..Phase::default()
        })
        .collect();
    let mut totals = [(0u64, 0f64, 0u64, Duration::ZERO); 4];
    // Unique across phases and rounds: every key is new.
    let next_key = Rc::new(Cell::new(0u64));
    for _ in 0..p.rounds.max(1) {
        for (i, &phase) in PHASES.iter().enumerate() {
            let cpu = CpuMeter::start(running.process.pid);
            let cpu0 = super::cpu_time(running.process.pid);
            let before = delivered.get();
            let start = Instant::now();
            let end = start + duration;
            let keyed = phase.ends_with("_keyed");
            let (published, errors) = if phase.starts_with("http") {
                http_phase(
                    target.addr,
                    &topic,
                    &body,
                    keyed,
                    p.in_flight,
                    end,
                    &next_key,
                )
                .await
            } else {
                ws_phase(
                    &mut publisher,
                    &topic,
                    &body,
                    keyed,
                    p.in_flight,
                    end,
                    &next_key,
                )
                .await?
            };
            let secs = start.elapsed().as_secs_f64();
            let ph = &mut phases[i];
            ph.per_round.push(round2(published as f64 / secs));
            ph.errors += errors;
            let t = &mut totals[i];
            t.0 += published;
            t.1 += secs;
            t.2 += delivered.get() - before;
            t.3 += super::cpu_time(running.process.pid).saturating_sub(cpu0);
            ph.broker_cpu_cores = round2(cpu.cores());
        }
    }
    for (ph, (published, secs, got, cpu)) in phases.iter_mut().zip(totals) {
        ph.publishes_per_sec = round2(published as f64 / secs);
        ph.deliveries_per_sec = round2(got as f64 / secs);
        ph.cpu_us_per_publish = round2(cpu.as_secs_f64() * 1e6 / published.max(1) as f64);
    }
    for r in readers {
        r.abort();
    }
    if phases.iter().any(|ph| ph.publishes_per_sec == 0.0) {
        return Err(anyhow!("a phase published nothing: {phases:?}"));
    }
    let cost = |plain: usize, keyed: usize| {
        round2((1.0 - phases[keyed].publishes_per_sec / phases[plain].publishes_per_sec) * 100.0)
    };
    Ok(json!({
        "phases": phases,
        "key_cost_pct": { "http": cost(0, 1), "ws": cost(2, 3) },
    }))
}

/// Waits for `/readyz` (on Redis: the bridge is up), so no phase measures
/// the node serving alone.
async fn ready(addr: SocketAddr) -> Result<()> {
    let deadline = Instant::now() + target::PATIENCE;
    let mut buf = Vec::new();
    loop {
        if let Ok(mut s) = TcpStream::connect(addr).await {
            let req = "GET /readyz HTTP/1.1\r\nhost: x\r\n\r\n";
            if s.write_all(req.as_bytes()).await.is_ok()
                && read_response(&mut s, &mut buf).await == Some(200)
            {
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            bail!("the broker never became ready");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `in_flight` keep-alive connections, each a loop of request → response;
/// with `keyed`, each request carries a fresh `Idempotency-Key`.
async fn http_phase(
    addr: SocketAddr,
    topic: &str,
    data: &str,
    keyed: bool,
    in_flight: usize,
    end: Instant,
    next_key: &Rc<Cell<u64>>,
) -> (u64, u64) {
    let body = format!(r#"{{"channel":"{topic}","data":{data}}}"#);
    let head = format!(
        "POST /v1/publish HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {BACKEND_KEY}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        body.len()
    );
    let plain = format!("{head}\r\n{body}");
    let ok = Rc::new(Cell::new(0u64));
    let bad = Rc::new(Cell::new(0u64));
    let mut tasks = Vec::new();
    for _ in 0..in_flight.max(1) {
        let (head, body, plain) = (head.clone(), body.clone(), plain.clone());
        let (ok, bad, next_key) = (ok.clone(), bad.clone(), next_key.clone());
        tasks.push(tokio::task::spawn_local(async move {
            let Ok(mut s) = TcpStream::connect(addr).await else {
                bad.set(bad.get() + 1);
                return;
            };
            let _ = s.set_nodelay(true);
            let mut buf = Vec::with_capacity(4096);
            let mut keyed_request = String::with_capacity(plain.len() + 48);
            while Instant::now() < end {
                let request = if keyed {
                    let n = next_key.get();
                    next_key.set(n + 1);
                    keyed_request.clear();
                    use std::fmt::Write;
                    let _ = write!(
                        keyed_request,
                        "{head}idempotency-key: bench-{n}\r\n\r\n{body}"
                    );
                    keyed_request.as_bytes()
                } else {
                    plain.as_bytes()
                };
                if s.write_all(request).await.is_err() {
                    bad.set(bad.get() + 1);
                    return;
                }
                match read_response(&mut s, &mut buf).await {
                    Some(200) => ok.set(ok.get() + 1),
                    _ => {
                        bad.set(bad.get() + 1);
                        return;
                    }
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    (ok.get(), bad.get())
}

/// One publisher socket, `window` frames ahead of their acks; with
/// `keyed`, each frame carries a fresh `"key"`.
async fn ws_phase(
    conn: &mut target::Conn,
    topic: &str,
    data: &str,
    keyed: bool,
    window: usize,
    end: Instant,
    next_key: &Rc<Cell<u64>>,
) -> Result<(u64, u64)> {
    let (mut ok, mut bad, mut outstanding) = (0u64, 0u64, 0usize);
    let mut frame = String::with_capacity(data.len() + 96);
    loop {
        while outstanding < window.max(1) && Instant::now() < end {
            let n = next_key.get();
            next_key.set(n + 1);
            frame.clear();
            use std::fmt::Write;
            let _ = write!(
                frame,
                r#"{{"type":"publish","channel":"{topic}","id":{n},"data":{data}"#
            );
            if keyed {
                let _ = write!(frame, r#","key":"bench-{n}""#);
            }
            frame.push('}');
            conn.ws.send(OP_TEXT, frame.as_bytes()).await?;
            outstanding += 1;
        }
        if outstanding == 0 {
            return Ok((ok, bad));
        }
        conn.recv(|e| {
            match e {
                Event::Ack => {
                    ok += 1;
                    outstanding -= 1;
                }
                Event::Error { .. } => {
                    bad += 1;
                    outstanding = outstanding.saturating_sub(1);
                }
                _ => {}
            }
            Flow::Continue
        })
        .await?;
    }
}
