//! `idle`: N connections, each subscribed to its own channel, held open
//! without traffic; the broker's resident memory per connection and the
//! rate at which they were opened (upgrade + welcome + subscribe ack).
//!
//! RSS is read from `/proc/<pid>/status` after the broker started (the
//! baseline), after half the connections and after all of them, each
//! after a short settle. `rss_per_conn` is (all − baseline) / N, which
//! charges the broker's first-use allocations to the connections;
//! `rss_per_conn_marginal` is the slope over the second half.
//!
//! `--peer sse` runs it again with `GET /v1/sse` streams (one channel
//! each) instead of sockets: `sse_vs_ws` is per stream over per socket;
//! `--peer pusher` with Pusher connections (`/app/{key}`, one private
//! channel each): `pusher_vs_ws`; `--peer sockudo` with the same Pusher
//! connections against Sockudo (issue 40): `pusher_vs_sockudo` is
//! Tidegate's RSS per Pusher connection over Sockudo's (below 1 is the
//! goal).

use std::time::{Duration, Instant};

use anyhow::Result;
use serde::Serialize;
use serde_json::json;

use super::{Accounts, Env, mib, open_many};
use crate::report;
use crate::target::Kind;

#[derive(Debug, Clone, Serialize)]
pub struct Params {
    pub connections: usize,
    pub hold_secs: f64,
    pub connect_concurrency: usize,
    pub connections_per_account: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct IdleRun {
    pub broker: &'static str,
    pub connections: usize,
    pub rss_mib_baseline: f64,
    pub rss_mib_half: f64,
    pub rss_mib_all: f64,
    pub rss_per_conn_bytes: u64,
    pub rss_per_conn_kib: f64,
    pub rss_per_conn_marginal_kib: f64,
    pub connect_secs: f64,
    pub connects_per_sec: f64,
    pub still_open: bool,
}

const SETTLE: Duration = Duration::from_millis(500);

pub async fn run_one(env: &Env, kind: Kind, p: &Params) -> Result<IdleRun> {
    let layers = [crate::target::RAISED_ACCEPT_BUDGET];
    let mut running = env.start(kind, &layers)?;
    let target = running.target.clone();
    tokio::time::sleep(SETTLE).await;
    let baseline = running.process.rss_bytes();
    let accounts = Accounts::new("idle", p.connections_per_account);
    let half = p.connections / 2;
    let start = Instant::now();
    let topic = |i: usize| Some(target.topic(&format!("idle-{i}")));
    let mut conns = open_many(&target, &accounts, half, p.connect_concurrency, 512, topic).await?;
    let first_half = start.elapsed();
    tokio::time::sleep(SETTLE).await;
    let rss_half = running.process.rss_bytes();
    let rest_start = Instant::now();
    // The second half on accounts of its own.
    let shifted = Accounts::new("idleb", p.connections_per_account);
    let more = open_many(
        &target,
        &shifted,
        p.connections - half,
        p.connect_concurrency,
        512,
        |i| Some(target.topic(&format!("idle-{}", half + i))),
    )
    .await?;
    let connect = first_half + rest_start.elapsed();
    conns.extend(more);
    for c in &mut conns {
        c.shrink();
    }
    tokio::time::sleep(Duration::from_secs_f64(p.hold_secs)).await;
    let rss_all = running.process.rss_bytes();
    let still_open = running.process.alive();
    drop(conns);
    let n = p.connections.max(1) as f64;
    let per_conn = rss_all.saturating_sub(baseline) as f64 / n;
    let marginal = rss_all.saturating_sub(rss_half) as f64 / (p.connections - half).max(1) as f64;
    Ok(IdleRun {
        broker: kind.name(),
        connections: p.connections,
        rss_mib_baseline: mib(baseline),
        rss_mib_half: mib(rss_half),
        rss_mib_all: mib(rss_all),
        rss_per_conn_bytes: per_conn as u64,
        rss_per_conn_kib: report::round2(per_conn / 1024.0),
        rss_per_conn_marginal_kib: report::round2(marginal / 1024.0),
        connect_secs: report::round2(connect.as_secs_f64()),
        connects_per_sec: (n / connect.as_secs_f64().max(1e-9)).round(),
        still_open,
    })
}

pub async fn run(env: &Env, kinds: &[Kind], p: &Params) -> Result<serde_json::Value> {
    let mut runs = Vec::new();
    for &kind in kinds {
        eprintln!("idle: {} connections={}", kind.name(), p.connections);
        let r = run_one(env, kind, p).await?;
        eprintln!(
            "  {:.2} KiB/conn (marginal {:.2}), {} connects/s",
            r.rss_per_conn_kib, r.rss_per_conn_marginal_kib, r.connects_per_sec
        );
        runs.push(r);
    }
    let t = runs.iter().find(|r| r.broker == "tidegate");
    let n = runs.iter().find(|r| r.broker == "nats");
    let comparison = match (t, n) {
        (Some(t), Some(n)) => json!({
            "rss_per_conn_ratio": report::ratio(t.rss_per_conn_kib, n.rss_per_conn_kib),
            "connects_per_sec_ratio": report::ratio(t.connects_per_sec, n.connects_per_sec),
        }),
        _ => json!(null),
    };
    // `--peer sse` / `--peer pusher`: a stream's or a Pusher connection's
    // RSS beside a socket's (issues 28 and 40).
    let vs_ws = |peer: &str| match (t, runs.iter().find(|r| r.broker == peer)) {
        (Some(t), Some(s)) => json!({
            "rss_per_conn_ratio": report::ratio(s.rss_per_conn_kib, t.rss_per_conn_kib),
            "rss_per_conn_marginal_ratio": report::ratio(s.rss_per_conn_marginal_kib, t.rss_per_conn_marginal_kib),
            "connects_per_sec_ratio": report::ratio(s.connects_per_sec, t.connects_per_sec),
        }),
        _ => json!(null),
    };
    let (sse_vs_ws, pusher_vs_ws) = (vs_ws("sse"), vs_ws("pusher"));
    let find = |b: &str| runs.iter().find(|r| r.broker == b);
    let pusher_vs_sockudo = match (find("pusher"), find("sockudo")) {
        (Some(p), Some(s)) => json!({
            "rss_per_conn_ratio": report::ratio(p.rss_per_conn_kib, s.rss_per_conn_kib),
            "rss_per_conn_marginal_ratio": report::ratio(p.rss_per_conn_marginal_kib, s.rss_per_conn_marginal_kib),
            "connects_per_sec_ratio": report::ratio(p.connects_per_sec, s.connects_per_sec),
        }),
        _ => json!(null),
    };
    if let Some(path) = &env.chart {
        chart(path, &runs)?;
    }
    Ok(json!({
        "runs": runs,
        "tidegate_vs_nats": comparison,
        "sse_vs_ws": sse_vs_ws,
        "pusher_vs_ws": pusher_vs_ws,
        "pusher_vs_sockudo": pusher_vs_sockudo,
    }))
}

/// RSS per idle connection (with the 8 KiB target) and the connect rate.
fn chart(path: &std::path::Path, runs: &[IdleRun]) -> Result<()> {
    use crate::chart::{Bars, Panel, draw};
    let n = runs.first().map_or(0, |r| r.connections);
    let what = format!("{n} idle subscribed connections");
    let each = || runs.iter().map(|r| (r.broker, r));
    let title = "Broker RSS per idle connection";
    let kib = Bars {
        hline: Some((8.0, "target 8 KiB".into())),
        ..Bars::per_broker(title, "KiB", &what, each(), |r| r.rss_per_conn_kib)
    };
    let title = "Connect + subscribe rate";
    let rate = Bars::per_broker(title, "connections/s", &what, each(), |r| {
        r.connects_per_sec
    });
    draw(
        path,
        (1000, 420),
        &[(500, Panel::Bars(kib)), (500, Panel::Bars(rate))],
    )
}
