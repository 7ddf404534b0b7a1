//! The scenarios, and what they share: starting a broker, opening many
//! connections, sampling a process's memory and CPU.

pub mod behaviours;
pub mod bystanders;
pub mod fanout;
pub mod grpc_publish;
pub mod handshakes;
pub mod idle;
pub mod keepalive;
pub mod keyed_publish;
mod rate;
pub mod slow;
pub mod soak;
pub mod storm;
pub mod webhooks;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use serde::Serialize;
use tokio::task::JoinSet;

use crate::procs::{self, Pinning, Spawned};
use crate::target::{self, Conn, Kind, Target, Who};
use crate::ws::Refused;

/// Where the brokers come from and how they are pinned.
#[derive(Debug, Clone)]
pub struct Env {
    pub tidegate_bin: PathBuf,
    pub nats_bin: Option<PathBuf>,
    /// `tidegate-relay`, built beside the load generator.
    pub relay_bin: PathBuf,
    /// Sockudo's binary (`--sockudo-bin`; only `--peer sockudo` needs it).
    pub sockudo_bin: Option<PathBuf>,
    pub pinning: Pinning,
    /// Where to draw the scenario's chart (SVG), if anywhere.
    pub chart: Option<PathBuf>,
}

/// A broker started for one measurement, killed when dropped.
pub struct Running {
    pub process: Spawned,
    pub target: Target,
    /// The config text Tidegate ran with (empty for NATS).
    pub config: String,
}

/// NATS's token for every run (token auth, see README).
pub const NATS_TOKEN: &str = "tidegate-bench-nats-token";

impl Env {
    /// Starts a fresh broker of `kind`; Tidegate gets the bench base config
    /// plus `layers`.
    pub fn start(&self, kind: Kind, layers: &[&str]) -> Result<Running> {
        match kind {
            Kind::Tidegate | Kind::Graphql | Kind::Sse | Kind::Pusher => {
                let mut all = vec![target::TIDEGATE_BASE];
                if kind == Kind::Pusher {
                    all.push(target::pusher::LAYER);
                }
                all.extend_from_slice(layers);
                let (text, config) = target::tidegate_config(&all)?;
                let (process, addr) =
                    procs::start_tidegate(&self.tidegate_bin, &text, self.pinning.broker_core)?;
                let mut target = Target::tidegate(addr, &config)?;
                target.kind = kind;
                Ok(Running {
                    process,
                    target,
                    config: text,
                })
            }
            Kind::Nats => {
                let bin = self
                    .nats_bin
                    .as_ref()
                    .ok_or_else(|| anyhow!("nats-server not found: install it (`apt-get install nats-server`) or pass --nats-bin, or run with --peer none"))?;
                let (process, addr) = procs::start_nats(bin, NATS_TOKEN, self.pinning.broker_core)?;
                Ok(Running {
                    process,
                    target: Target::nats(addr, NATS_TOKEN),
                    config: String::new(),
                })
            }
            Kind::Sockudo => {
                let bin = self.sockudo_bin.as_ref().ok_or_else(|| {
                    anyhow!("--peer sockudo needs --sockudo-bin (or SOCKUDO_BIN)")
                })?;
                let (process, addr) = procs::start_sockudo(bin, self.pinning.broker_core)?;
                Ok(Running {
                    process,
                    target: Target::sockudo(addr),
                    config: String::new(),
                })
            }
            Kind::Relay => {
                let (process, addr) =
                    procs::start_relay(&self.relay_bin, self.pinning.broker_core)?;
                Ok(Running {
                    process,
                    target: Target::relay(addr),
                    config: String::new(),
                })
            }
        }
    }
}

/// How connections are spread over accounts.
#[derive(Debug, Clone)]
pub struct Accounts {
    pub prefix: String,
    /// Connections per account (Tidegate's `max_connections` is 8).
    pub per_account: usize,
    pub plan: Option<String>,
}

impl Accounts {
    pub fn new(prefix: &str, per_account: usize) -> Accounts {
        Accounts {
            prefix: prefix.to_string(),
            per_account: per_account.max(1),
            plan: None,
        }
    }

    pub fn account(&self, i: usize) -> String {
        format!("{}{}", self.prefix, i / self.per_account)
    }
}

/// Opens one connection, retrying refusals (after `Retry-After`, at least
/// 100 ms) up to `attempts` times; subscribes to `topic` when given.
pub async fn open_one(
    target: &Target,
    accounts: &Accounts,
    i: usize,
    topic: Option<&str>,
    read_chunk: usize,
    attempts: u32,
) -> Result<Conn> {
    let account = accounts.account(i);
    let who = Who {
        account: &account,
        plan: accounts.plan.as_deref(),
        token: None,
    };
    let mut last: Option<Refused> = None;
    for _ in 0..attempts.max(1) {
        let opened = match (target.kind, topic) {
            (Kind::Sse, Some(t)) => target.connect_sse(&who, t, read_chunk, 0).await?,
            _ => target.connect(&who, i as u64 + 1, read_chunk, 0).await?,
        };
        match opened {
            Ok(mut conn) => {
                if let Some(t) = topic {
                    conn.subscribe(t).await.context("subscribe")?;
                }
                return Ok(conn);
            }
            Err(r) => {
                let wait = r.retry_after_secs.map_or(100, |s| s * 1000).max(100);
                last = Some(r);
                tokio::time::sleep(Duration::from_millis(wait)).await;
            }
        }
    }
    Err(anyhow!("connection {i} refused: {last:?}"))
}

/// Opens `n` connections with at most `concurrency` handshakes in flight.
/// `topic(i)` names what connection `i` subscribes to.
pub async fn open_many(
    target: &Target,
    accounts: &Accounts,
    n: usize,
    concurrency: usize,
    read_chunk: usize,
    topic: impl Fn(usize) -> Option<String>,
) -> Result<Vec<Conn>> {
    let mut set = JoinSet::new();
    let mut out = Vec::with_capacity(n);
    let mut next = 0;
    while out.len() < n {
        while next < n && set.len() < concurrency.max(1) {
            let (t, a, topic) = (target.clone(), accounts.clone(), topic(next));
            let i = next;
            set.spawn_local(
                async move { open_one(&t, &a, i, topic.as_deref(), read_chunk, 50).await },
            );
            next += 1;
        }
        match set.join_next().await {
            Some(r) => out.push(r.map_err(|e| anyhow!("connect task: {e}"))??),
            None => break,
        }
    }
    Ok(out)
}

/// A process's CPU time (user + system) from `/proc/<pid>/stat`.
pub fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start after ')'.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0)
        + f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_micros(ticks * 1_000_000 / hz)
}

/// A process's CPU time to the nanosecond: the sum of its threads'
/// on-CPU time from `/proc/<pid>/task/*/schedstat` (`/proc/<pid>/stat`
/// counts whole clock ticks, 10 ms, too coarse for CPU per publish at a
/// paced rate). Threads that exit take their time with them, so this is
/// for spans in which the process keeps its threads (the broker does).
/// Falls back to [`cpu_time`] where schedstat is missing.
pub fn cpu_time_precise(pid: u32) -> Duration {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return cpu_time(pid);
    };
    let mut ns = 0u64;
    let mut any = false;
    for t in tasks.flatten() {
        let stat = std::fs::read_to_string(t.path().join("schedstat")).unwrap_or_default();
        if let Some(v) = stat
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<u64>().ok())
        {
            ns += v;
            any = true;
        }
    }
    if any {
        Duration::from_nanos(ns)
    } else {
        cpu_time(pid)
    }
}

/// CPU used by a process over a wall-clock span, as a fraction of a core.
pub struct CpuMeter {
    pid: u32,
    cpu0: Duration,
    precise0: Duration,
    wall0: Instant,
}

impl CpuMeter {
    pub fn start(pid: u32) -> CpuMeter {
        CpuMeter {
            pid,
            cpu0: cpu_time(pid),
            precise0: cpu_time_precise(pid),
            wall0: Instant::now(),
        }
    }

    pub fn cores(&self) -> f64 {
        let cpu = cpu_time(self.pid).saturating_sub(self.cpu0).as_secs_f64();
        let wall = self.wall0.elapsed().as_secs_f64().max(1e-9);
        crate::report::round2(cpu / wall)
    }

    /// CPU seconds since the start, to the nanosecond (unrounded).
    pub fn precise_secs(&self) -> f64 {
        cpu_time_precise(self.pid)
            .saturating_sub(self.precise0)
            .as_secs_f64()
    }
}

/// Jiffies the whole machine spent busy (all CPUs, from `/proc/stat`).
fn machine_busy() -> Duration {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let f: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    let total: u64 = f.iter().take(8).sum();
    let idle = f.get(3).copied().unwrap_or(0) + f.get(4).copied().unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_micros(total.saturating_sub(idle) * 1_000_000 / hz)
}

/// CPU the rest of the machine used while a measurement ran (another
/// build, another service), in cores: anything well above 0 means the
/// numbers were taken on a busy machine.
pub struct Background {
    pids: Vec<u32>,
    own: Vec<Duration>,
    busy0: Duration,
    wall0: Instant,
}

impl Background {
    pub fn start(pids: &[u32]) -> Background {
        Background {
            pids: pids.to_vec(),
            own: pids.iter().map(|&p| cpu_time(p)).collect(),
            busy0: machine_busy(),
            wall0: Instant::now(),
        }
    }

    pub fn cores(&self) -> f64 {
        let busy = machine_busy().saturating_sub(self.busy0);
        let ours: Duration = self
            .pids
            .iter()
            .zip(&self.own)
            .map(|(&p, &c)| cpu_time(p).saturating_sub(c))
            .sum();
        let wall = self.wall0.elapsed().as_secs_f64().max(1e-9);
        crate::report::round2((busy.saturating_sub(ours).as_secs_f64() / wall).max(0.0))
    }
}

/// Samples a process's RSS every `every` until dropped.
pub struct RssSampler {
    samples: Rc<RefCell<Vec<(f64, u64)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl RssSampler {
    pub fn start(pid: u32, every: Duration, base: Instant) -> RssSampler {
        let samples = Rc::new(RefCell::new(Vec::new()));
        let s = samples.clone();
        let task = tokio::task::spawn_local(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                let rss = procs::rss_bytes(pid).unwrap_or(0);
                s.borrow_mut().push((base.elapsed().as_secs_f64(), rss));
            }
        });
        RssSampler { samples, task }
    }

    /// (seconds since base, RSS bytes) so far.
    pub fn samples(&self) -> Vec<(f64, u64)> {
        self.samples.borrow().clone()
    }

    pub fn max(&self) -> u64 {
        self.samples.borrow().iter().map(|s| s.1).max().unwrap_or(0)
    }
}

impl Drop for RssSampler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Counts by key, serialized as a JSON object.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(transparent)]
pub struct Tally(pub BTreeMap<String, u64>);

impl Tally {
    pub fn add(&mut self, key: impl Into<String>, n: u64) {
        *self.0.entry(key.into()).or_default() += n;
    }

    pub fn total(&self) -> u64 {
        self.0.values().sum()
    }
}

/// `MiB` with one decimal.
pub fn mib(bytes: u64) -> f64 {
    (bytes as f64 / 1024.0 / 1024.0 * 10.0).round() / 10.0
}

/// A refusal as a tally key: `429 too_many_connections`.
pub fn refusal_key(r: &Refused) -> String {
    match &r.code {
        Some(c) => format!("{} {c}", r.status),
        None => r.status.to_string(),
    }
}

/// Reads one counter from Tidegate's `/metrics` (sum over label sets that
/// contain every `labels` fragment).
pub async fn tidegate_metric(
    addr: std::net::SocketAddr,
    name: &str,
    labels: &[&str],
) -> Option<f64> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .ok()?;
    let mut text = String::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut text))
        .await
        .ok()?
        .ok()?;
    let mut sum = None;
    for line in text.lines() {
        if line.starts_with('#') || !line.starts_with(name) {
            continue;
        }
        let (key, value) = line.rsplit_once(' ')?;
        let rest = &key[name.len()..];
        if !(rest.is_empty() || rest.starts_with('{')) {
            continue;
        }
        if labels.iter().all(|l| key.contains(l)) {
            *sum.get_or_insert(0.0) += value.parse::<f64>().unwrap_or(0.0);
        }
    }
    sum
}
