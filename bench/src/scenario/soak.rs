//! `soak`: minutes of churn on one node (issue 15), sampling the broker
//! every few seconds to show that memory, descriptors, sockets and the
//! channel registry stay flat after warm-up, or that something leaks.
//!
//! Load, all at once for the whole run:
//! - churners: each opens a socket as a fresh account (so account state
//!   churns too), subscribes, publishes twice and unsubscribes on three
//!   random channels of 1,000, closes, and starts again;
//! - HTTP publishes to random channels (the shipped sample key, paced
//!   under its account budget);
//! - seed 000's typist (8/s, a 30/s burst), buggy loop (400/s) and abuser
//!   (20 sockets of one account at 30/s each: past its cap and its budget),
//!   in rounds of `round_secs` (each round opens their sockets afresh);
//! - slow readers: sockets with a small receive window subscribed to a
//!   busy channel (2 KiB messages) that never read, replaced every round.
//!
//! Every `sample_secs`: RSS and open descriptors from `/proc`, and from
//! `/metrics` `tidegate_connections` (open sockets), `tidegate_channels`,
//! the tokio tasks alive (`tidegate_runtime_alive_tasks`, every runtime)
//! and the actors alive (`tidegate_actors`: sockets and account
//! supervisors); one CSV line each, written as it is taken.

use std::cell::RefCell;
use std::io::Write;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::behaviours::{client, steady_schedule, typist_schedule};
use super::{Env, Tally, mib, refusal_key, tidegate_metric};
use crate::procs;
use crate::target::{Kind, PATIENCE, PUBLISHER_PLAN, RAISED_ACCEPT_BUDGET, Target, Who, payload};
use crate::ws::Flow;

#[derive(Debug, Clone, Serialize)]
pub struct Params {
    pub duration_secs: f64,
    pub sample_secs: f64,
    pub churners: usize,
    pub http_per_sec: f64,
    pub slow_readers: usize,
    pub round_secs: f64,
    /// Where the samples go as CSV (also in the JSON result).
    pub csv: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Sample {
    pub t_secs: f64,
    pub rss_bytes: u64,
    pub open_fds: u64,
    pub connections: f64,
    pub channels: f64,
    /// Tokio tasks alive over the broker's runtimes.
    pub tasks: f64,
    /// Socket actors alive (created and not yet dropped).
    pub socket_actors: f64,
    /// Account supervisor actors alive.
    pub supervisors: f64,
}

const CSV_HEAD: &str =
    "t_secs,rss_bytes,open_fds,connections,channels,tasks,socket_actors,supervisors";

/// The sample key of the shipped config (account `acme`, 100 msg/s).
const SAMPLE_KEY: &str = "tidegate-sample-publish-key";

/// A tiny xorshift: reproducible channel picks without a dependency.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn open_fds(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64)
}

async fn churner(target: Target, i: usize, end: Instant, tally: Rc<RefCell<Tally>>) {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (i as u64 + 1));
    let mut cycle = 0u64;
    let mut out = Vec::new();
    while Instant::now() < end {
        cycle += 1;
        let account = format!("churn{i}x{cycle}");
        let who = Who {
            account: &account,
            plan: None,
            token: None,
        };
        let mut conn = match target.connect(&who, cycle, 4096, 0).await {
            Ok(Ok(c)) => c,
            Ok(Err(r)) => {
                tally
                    .borrow_mut()
                    .add(format!("refused {}", refusal_key(&r)), 1);
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            Err(_) => {
                tally.borrow_mut().add("connect errors", 1);
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        for round in 0..3u64 {
            let topic = target.topic(&format!("soak-{}", rng.below(1000)));
            if conn.subscribe(&topic).await.is_err() {
                tally.borrow_mut().add("subscribe failed", 1);
                break;
            }
            out.clear();
            conn.publish_frame(&topic, b"{\"churn\":1}", round * 2 + 1, &mut out);
            conn.publish_frame(&topic, b"{\"churn\":2}", round * 2 + 2, &mut out);
            let unsub = format!(r#"{{"type":"unsubscribe","channel":"{topic}","id":99}}"#);
            let ok = conn.ws.write_raw(&out).await.is_ok()
                && conn.send_raw_payload(unsub.as_bytes()).await.is_ok();
            if !ok {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        conn.ws.close_and_wait(1000, PATIENCE).await;
        tally.borrow_mut().add("churn cycles", 1);
    }
}

/// HTTP publishes, one connection each (so HTTP connections churn too).
async fn http_publisher(target: Target, rate: f64, end: Instant, tally: Rc<RefCell<Tally>>) {
    let mut rng = Rng(0xDEAD_BEEF);
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate.max(0.1)));
    while Instant::now() < end {
        tick.tick().await;
        let body = json!({"channel": format!("doc:soak-{}", rng.below(1000)), "data": {"http": 1}})
            .to_string();
        let req = format!(
            "POST /v1/publish HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {SAMPLE_KEY}\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        let answered = async {
            let mut s = tokio::net::TcpStream::connect(target.addr).await.ok()?;
            s.write_all(req.as_bytes()).await.ok()?;
            let mut answer = Vec::new();
            s.read_to_end(&mut answer).await.ok()?;
            answer
                .get(9..12)
                .map(|status| String::from_utf8_lossy(status).into_owned())
        };
        match tokio::time::timeout(PATIENCE, answered).await {
            Ok(Some(status)) => tally.borrow_mut().add(format!("http {status}"), 1),
            _ => tally.borrow_mut().add("http errors", 1),
        }
    }
}

/// Publishes 2 KiB messages to `topic` at `rate`, reading its acks.
async fn feeder(target: Target, topic: String, rate: f64, end: Instant) -> Result<()> {
    let who = Who {
        account: "soak-feeder",
        plan: Some(PUBLISHER_PLAN),
        token: None,
    };
    let mut conn = target
        .connect(&who, 7, 64 * 1024, 0)
        .await?
        .map_err(|r| anyhow::anyhow!("feeder refused: {r:?}"))?;
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    let (mut out, mut data) = (Vec::new(), Vec::new());
    let mut n = 0u64;
    while Instant::now() < end {
        tokio::select! {
            _ = tick.tick() => {
                n += 1;
                payload(2048, n, 0, &mut data);
                out.clear();
                conn.publish_frame(&topic, &data, n, &mut out);
                conn.ws.write_raw(&out).await?;
            }
            r = conn.recv(|_| Flow::Continue) => r?,
        }
    }
    Ok(())
}

/// Sockets that subscribe to `topic` and never read, for `hold` each.
async fn slow_readers(target: Target, topic: String, n: usize, hold: Duration, end: Instant) {
    let mut round = 0u64;
    while Instant::now() < end {
        round += 1;
        let mut held = Vec::new();
        for i in 0..n {
            let account = format!("slow{round}x{i}");
            let who = Who {
                account: &account,
                plan: None,
                token: None,
            };
            if let Ok(Ok(mut c)) = target.connect(&who, round, 4096, 4096).await
                && c.subscribe(&topic).await.is_ok()
            {
                held.push(c);
            }
        }
        tokio::time::sleep(hold).await;
        drop(held);
    }
}

/// Seed 000's clients, a round at a time, until `end`.
async fn behaviour_rounds(
    target: Target,
    round: Duration,
    end: Instant,
    tally: Rc<RefCell<Tally>>,
) {
    let d = round.as_secs_f64();
    while Instant::now() < end {
        let (typist, buggy, abuser) = tokio::join!(
            client(&target, "typist", 1, typist_schedule(d), round),
            client(&target, "buggy", 1, steady_schedule(400.0, d), round),
            client(&target, "abuser", 20, steady_schedule(30.0, d), round),
        );
        let mut t = tally.borrow_mut();
        for (name, o) in [("typist", typist), ("buggy", buggy), ("abuser", abuser)] {
            match o {
                Ok(o) => {
                    t.add(format!("{name} sent"), o.sent);
                    t.add(format!("{name} acked"), o.acked);
                    t.add(format!("{name} closes"), o.closes.total());
                    t.add(format!("{name} refusals"), o.handshake_refusals.total());
                }
                Err(_) => t.add(format!("{name} errors"), 1),
            }
        }
    }
}

async fn sample(target: &Target, pid: u32, t0: Instant) -> Sample {
    Sample {
        t_secs: (t0.elapsed().as_secs_f64() * 10.0).round() / 10.0,
        rss_bytes: procs::rss_bytes(pid).unwrap_or(0),
        open_fds: open_fds(pid),
        connections: tidegate_metric(target.addr, "tidegate_connections", &[])
            .await
            .unwrap_or(-1.0),
        channels: tidegate_metric(target.addr, "tidegate_channels", &[])
            .await
            .unwrap_or(-1.0),
        tasks: tidegate_metric(target.addr, "tidegate_runtime_alive_tasks", &[])
            .await
            .unwrap_or(-1.0),
        socket_actors: tidegate_metric(target.addr, "tidegate_actors", &["\"socket\""])
            .await
            .unwrap_or(-1.0),
        supervisors: tidegate_metric(target.addr, "tidegate_actors", &["account_supervisor"])
            .await
            .unwrap_or(-1.0),
    }
}

pub async fn run(env: &Env, p: &Params) -> Result<serde_json::Value> {
    eprintln!(
        "soak: tidegate, {} s, a sample every {} s",
        p.duration_secs, p.sample_secs
    );
    let running = env.start(Kind::Tidegate, &[RAISED_ACCEPT_BUDGET])?;
    let target = running.target.clone();
    let pid = running.process.pid;
    let mut csv = match &p.csv {
        Some(path) => {
            let mut f = std::fs::File::create(path)
                .with_context(|| format!("cannot write {}", path.display()))?;
            writeln!(f, "{CSV_HEAD}")?;
            Some(f)
        }
        None => None,
    };
    let t0 = Instant::now();
    let end = t0 + Duration::from_secs_f64(p.duration_secs);
    let round = Duration::from_secs_f64(p.round_secs);
    let tally = Rc::new(RefCell::new(Tally::default()));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..p.churners {
        tasks.spawn_local(churner(target.clone(), i, end, tally.clone()));
    }
    tasks.spawn_local(http_publisher(
        target.clone(),
        p.http_per_sec,
        end,
        tally.clone(),
    ));
    tasks.spawn_local(behaviour_rounds(target.clone(), round, end, tally.clone()));
    let busy = target.topic("soak-busy");
    tasks.spawn_local(slow_readers(
        target.clone(),
        busy.clone(),
        p.slow_readers,
        round,
        end,
    ));
    {
        let (target, tally) = (target.clone(), tally.clone());
        tasks.spawn_local(async move {
            if let Err(e) = feeder(target, busy, 50.0, end).await {
                tally.borrow_mut().add(format!("feeder ended: {e}"), 1);
            }
        });
    }

    let mut samples = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_secs_f64(p.sample_secs));
    while Instant::now() < end {
        tick.tick().await;
        let s = sample(&target, pid, t0).await;
        eprintln!(
            "  {:>7.1} s  rss {:>6.1} MiB  fds {:>5}  sockets {:>5}  channels {:>5}  tasks {:>5}  actors {:>5}+{:>5}",
            s.t_secs,
            mib(s.rss_bytes),
            s.open_fds,
            s.connections,
            s.channels,
            s.tasks,
            s.socket_actors,
            s.supervisors
        );
        if let Some(f) = csv.as_mut() {
            writeln!(
                f,
                "{},{},{},{},{},{},{},{}",
                s.t_secs,
                s.rss_bytes,
                s.open_fds,
                s.connections,
                s.channels,
                s.tasks,
                s.socket_actors,
                s.supervisors
            )?;
            f.flush()?;
        }
        samples.push(s);
    }
    // Every load task ends by itself at `end` (or within its patience).
    while tasks.join_next().await.is_some() {}
    // After the load: what the node gives back once idle channels are swept.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let after = sample(&target, pid, t0).await;
    drop(running);

    // Flat after warm-up: compare the first sample past a fifth of the run
    // with the last one under load.
    let warm = samples
        .iter()
        .find(|s| s.t_secs >= p.duration_secs / 5.0)
        .or(samples.first())
        .copied();
    let last = samples.last().copied();
    let results = json!({
        "samples": samples,
        "after_load": after,
        "warm": warm,
        "last": last,
        "rss_growth_mib_after_warmup": warm.zip(last).map(|(w, l)| mib(l.rss_bytes) - mib(w.rss_bytes)),
        "fds_growth_after_warmup": warm.zip(last).map(|(w, l)| l.open_fds as i64 - w.open_fds as i64),
        "peak_rss_mib": samples.iter().map(|s| mib(s.rss_bytes)).fold(0.0, f64::max),
        "load": &*tally.borrow(),
    });
    if let Some(path) = &env.chart {
        chart(path, &samples)?;
    }
    Ok(results)
}

/// The soak: memory on the left; descriptors, sockets and channels in the
/// middle; tasks and actors on the right, over the run.
fn chart(path: &std::path::Path, samples: &[Sample]) -> Result<()> {
    use crate::chart::{FOURTH, Line, Lines, Panel, THIRD, TIDEGATE, draw};
    let pts = |f: fn(&Sample) -> f64| samples.iter().map(|s| (s.t_secs, f(s))).collect();
    let memory = Lines::over_time(
        "Broker RSS under churn",
        "MiB",
        vec![Line::new(
            "RSS",
            TIDEGATE,
            pts(|s| s.rss_bytes as f64 / 1048576.0),
        )],
    );
    let counts = Lines::over_time(
        "Descriptors, sockets, channels",
        "count",
        vec![
            Line::new("open fds", TIDEGATE, pts(|s| s.open_fds as f64)),
            Line::new("sockets", THIRD, pts(|s| s.connections)),
            Line::new("channels", FOURTH, pts(|s| s.channels)),
        ],
    );
    let alive = Lines::over_time(
        "Tasks and actors alive",
        "count",
        vec![
            Line::new("tokio tasks", TIDEGATE, pts(|s| s.tasks)),
            Line::new("socket actors", THIRD, pts(|s| s.socket_actors)),
            Line::new("account supervisors", FOURTH, pts(|s| s.supervisors)),
        ],
    );
    let panels = [
        (600, Panel::Lines(memory)),
        (600, Panel::Lines(counts)),
        (600, Panel::Lines(alive)),
    ];
    draw(path, (1800, 420), &panels)
}
