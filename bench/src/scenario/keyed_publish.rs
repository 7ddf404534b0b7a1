//! `keyed-publish`: what an idempotency key (§17) costs the publish path.
//! HTTP publish (`POST /v1/publish`, keep-alive connections) and the socket
//! publish (one publisher socket, a window of frames ahead of their acks),
//! each without a key and with a fresh key per message, in ONE run against
//! one broker, to S WebSocket subscribers of one channel. The four phases
//! alternate round by round (http, http keyed, ws, ws keyed; then keyed
//! first: http keyed, http, ws keyed, ws), so drift on a shared machine
//! spreads over all of them and favours neither side of a pair; the
//! key's cost is read per round pair and reported as their median too
//! (`key_cost_pct_median`, beside the whole run's `key_cost_pct`). Each mode
//! (`memory`: one node; `redis`: one node through its own `redis-server`)
//! is a fresh broker.
//!
//! Every keyed message carries a key never used before, so every one is a
//! first publish: the phase measures what recording a key costs (the
//! node's table, and on Redis the key read and set in the publish
//! script), not the cheaper duplicates.

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::grpc_publish::{counting_subscribers, data, http_loop, read_response};
use super::{Accounts, CpuMeter, Env, open_one};
use crate::procs::{self, Spawned};
use crate::report::round2;
use crate::target::{self, Event, Kind, PUBLISHER_PLAN};
use crate::ws::{Flow, OP_TEXT};

/// The API key the backend publishes with.
const BACKEND_KEY: &str = "tidegate-bench-keyed-backend";

#[derive(Debug, Clone, Serialize, clap::Args)]
pub struct Params {
    #[arg(long, default_value_t = 100)]
    pub subscribers: usize,
    /// Seconds per phase per round.
    #[arg(long = "duration", default_value_t = 2.0)]
    pub duration_secs: f64,
    /// Rounds of the four phases (http, http keyed, ws, ws keyed).
    #[arg(long, default_value_t = 3, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub rounds: usize,
    /// Bytes of each publish's data (a JSON string, at least 2).
    #[arg(long = "payload", default_value_t = 64, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(2..))]
    pub payload_bytes: usize,
    /// HTTP connections, and socket frames ahead of their acks.
    #[arg(long, default_value_t = 16, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub in_flight: usize,
    /// Comma-separated: `memory` (one node), `redis` (through its own
    /// redis-server).
    #[arg(long, default_value = "memory,redis", value_delimiter = ',')]
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
    /// The same, one value per round.
    cpu_us_per_round: Vec<f64>,
    /// `redis-server`'s CPU µs per acknowledged publish (mode `redis`).
    #[serde(skip_serializing_if = "Option::is_none")]
    redis_cpu_us_per_publish: Option<f64>,
}

const PHASES: [&str; 4] = ["http", "http_keyed", "ws", "ws_keyed"];

fn layer(extra: &str) -> String {
    format!(
        "[[api_keys]]\nkey = \"{BACKEND_KEY}\"\naccount = \"bench_backend\"\npub_channels = [\"doc:*\"]\n\
         [accounts.bench_backend]\nplan = \"{PUBLISHER_PLAN}\"\n{extra}"
    )
}

pub async fn run(env: &Env, p: &Params) -> Result<Value> {
    let mut out = serde_json::Map::new();
    for mode in &p.modes {
        let r = match mode.as_str() {
            "memory" => run_mode(env, p, None).await?,
            "redis" => {
                // On the load generator's core, off the broker's.
                let redis = procs::start_redis(env.pinning.loadgen_core)?;
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

async fn run_mode(env: &Env, p: &Params, redis: Option<&(Spawned, SocketAddr)>) -> Result<Value> {
    let cluster = redis.map_or(String::new(), |r| {
        format!(
            "[cluster]\nmode = \"redis\"\nredis_url = \"redis://127.0.0.1:{}/\"\nkey_prefix = \"bench:\"\nsecret = \"bench-cluster-secret-0123456789\"\n",
            r.1.port()
        )
    });
    let extra = layer(&cluster);
    let running = env.start(Kind::Tidegate, &[target::RAISED_ACCEPT_BUDGET, &extra])?;
    let target = running.target.clone();
    ready(target.addr).await?;
    let topic = target.topic("keyed");
    let accounts = Accounts::new("sub", 8);
    let (delivered, readers) = counting_subscribers(&target, &accounts, p.subscribers, &topic)
        .await
        .context("subscribers")?;
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
    let redis_pid = redis.map(|r| r.0.pid);
    let mut redis_used = [Duration::ZERO; 4];
    // Unique across phases and rounds: every key is new.
    let next_key = Rc::new(Cell::new(0u64));
    for round in 0..p.rounds.max(1) {
        for i in order(round) {
            let phase = PHASES[i];
            let cpu = CpuMeter::start(running.process.pid);
            let cpu0 = super::cpu_time(running.process.pid);
            let redis0 = redis_pid.map(super::cpu_time);
            let before = delivered.get();
            let start = Instant::now();
            let end = start + duration;
            let load = Load {
                topic: &topic,
                data: &body,
                keyed: phase.ends_with("_keyed"),
                in_flight: p.in_flight,
                end,
                next_key: &next_key,
            };
            let (published, errors) = if phase.starts_with("http") {
                http_phase(target.addr, &load).await
            } else {
                ws_phase(&mut publisher, &load).await?
            };
            let secs = start.elapsed().as_secs_f64();
            let ph = &mut phases[i];
            ph.per_round.push(round2(published as f64 / secs));
            ph.errors += errors;
            let t = &mut totals[i];
            t.0 += published;
            t.1 += secs;
            t.2 += delivered.get() - before;
            if let (Some(pid), Some(r0)) = (redis_pid, redis0) {
                redis_used[i] += super::cpu_time(pid).saturating_sub(r0);
            }
            let used = super::cpu_time(running.process.pid).saturating_sub(cpu0);
            t.3 += used;
            ph.cpu_us_per_round
                .push(round2(used.as_secs_f64() * 1e6 / published.max(1) as f64));
            ph.broker_cpu_cores = round2(cpu.cores());
        }
    }
    for ((ph, (published, secs, got, cpu)), redis_cpu) in
        phases.iter_mut().zip(totals).zip(redis_used)
    {
        ph.redis_cpu_us_per_publish =
            redis_pid.map(|_| round2(redis_cpu.as_secs_f64() * 1e6 / published.max(1) as f64));
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
    let per_round = |plain: usize, keyed: usize| {
        let pairs = phases[plain].per_round.iter().zip(&phases[keyed].per_round);
        pairs
            .map(|(p, k)| round2((1.0 - k / p.max(f64::MIN_POSITIVE)) * 100.0))
            .collect::<Vec<f64>>()
    };
    // The broker's CPU a publish, keyed over plain, per round pair: what
    // the key costs the broker itself, which a machine busy with other
    // work disturbs far less than the throughput of a closed loop.
    let cpu_round = |plain: usize, keyed: usize| {
        let pairs = phases[plain].cpu_us_per_round.iter();
        pairs
            .zip(&phases[keyed].cpu_us_per_round)
            .map(|(p, k)| round2((k / p.max(f64::MIN_POSITIVE) - 1.0) * 100.0))
            .collect::<Vec<f64>>()
    };
    let (http, ws) = (per_round(0, 1), per_round(2, 3));
    let (http_cpu, ws_cpu) = (cpu_round(0, 1), cpu_round(2, 3));
    Ok(json!({
        "phases": phases,
        "key_cost_pct": { "http": cost(0, 1), "ws": cost(2, 3) },
        "key_cost_pct_median": { "http": median(&http), "ws": median(&ws) },
        "key_cost_pct_by_round": { "http": http, "ws": ws },
        "key_cpu_pct_median": { "http": median(&http_cpu), "ws": median(&ws_cpu) },
        "key_cpu_pct_by_round": { "http": http_cpu, "ws": ws_cpu },
    }))
}

/// The phases of round `round`, as indexes into [`PHASES`]: each API's
/// plain and keyed phases side by side, the plain one first in even
/// rounds and second in odd ones, so a machine that drifts over the run
/// favours neither (the costs are read per round pair, then their median).
fn order(round: usize) -> [usize; 4] {
    if round.is_multiple_of(2) {
        [0, 1, 2, 3]
    } else {
        [1, 0, 3, 2]
    }
}

/// The median of `v` (the mean of the middle two for an even count).
fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => round2((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
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

/// What one phase sends, until when.
struct Load<'a> {
    topic: &'a str,
    /// Each publish's data (JSON).
    data: &'a str,
    /// A fresh key on every publish.
    keyed: bool,
    /// HTTP connections, or socket frames ahead of their acks.
    in_flight: usize,
    end: Instant,
    /// The next key's number (unique over the run).
    next_key: &'a Rc<Cell<u64>>,
}

/// `in_flight` keep-alive connections, each a loop of request → response;
/// keyed, each request carries a fresh `Idempotency-Key`.
async fn http_phase(addr: SocketAddr, load: &Load<'_>) -> (u64, u64) {
    let Load {
        topic,
        data,
        keyed,
        in_flight,
        end,
        next_key,
    } = *load;
    let body = format!(r#"{{"channel":"{topic}","data":{data}}}"#);
    let head = format!(
        "POST /v1/publish HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {BACKEND_KEY}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        body.len()
    );
    let plain = format!("{head}\r\n{body}");
    let next_key = next_key.clone();
    let next = move |out: &mut Vec<u8>| {
        if keyed {
            let n = next_key.get();
            next_key.set(n + 1);
            use std::io::Write;
            let _ = write!(out, "{head}idempotency-key: bench-{n}\r\n\r\n{body}");
        } else {
            out.extend_from_slice(plain.as_bytes());
        }
    };
    http_loop(addr, in_flight, end, Rc::new(next)).await
}

/// One publisher socket, `in_flight` frames ahead of their acks; keyed,
/// each frame carries a fresh `"key"`.
async fn ws_phase(conn: &mut target::Conn, load: &Load<'_>) -> Result<(u64, u64)> {
    let Load {
        topic,
        data,
        keyed,
        in_flight: window,
        end,
        next_key,
    } = *load;
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
