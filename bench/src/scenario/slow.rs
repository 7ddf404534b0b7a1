//! `slow`: K reading subscribers and one that never reads, under a paced
//! flood; the broker's RSS over time and the readers' latency, against a
//! baseline run without the non-reader (Tidegate only).
//!
//! What should happen (architecture.md, "outbound queue"): the
//! non-reader's kernel buffers fill, then its outbox reaches the
//! high-water mark (1 MiB) and messages to it are dropped
//! (`slow_consumer`), then after the grace period (5 s) it is closed with
//! 4008. The broker's memory stays flat and the other subscribers do not
//! notice.

use std::time::{Duration, Instant};

use anyhow::Result;
use serde::Serialize;
use serde_json::json;

use super::fanout::{self, Rate, Shared};
use super::{Accounts, Env, RssSampler, Tally, mib, open_many, tidegate_metric};
use crate::report::{self, Latency};
use crate::target::{Event, Kind, PUBLISHER_PLAN, Who};
use crate::ws::Flow;

#[derive(Debug, Clone, Serialize)]
pub struct Params {
    pub subscribers: usize,
    pub rate: f64,
    pub payload_bytes: usize,
    pub duration_secs: f64,
    /// `SO_RCVBUF` of the non-reading client (0 = OS default).
    pub slow_recv_buffer: u32,
}

#[derive(Debug, Clone, Serialize)]
pub struct SlowRun {
    pub with_slow_subscriber: bool,
    pub published: u64,
    pub readers_latency: Latency,
    pub readers_lost: u64,
    pub rss_mib_start: f64,
    pub rss_mib_max: f64,
    pub rss_mib_end: f64,
    /// (seconds, MiB) every 100 ms.
    pub rss_timeline: Vec<(f64, f64)>,
    pub slow_consumer_drops: Option<f64>,
    pub slow_consumer_closes: Option<f64>,
    /// What the non-reader found when it finally read: its close code,
    /// or `eof`, and how many messages had reached it.
    pub slow_outcome: Option<String>,
    pub slow_messages_received: u64,
    pub errors: Tally,
}

async fn run_one(env: &Env, p: &Params, with_slow: bool) -> Result<SlowRun> {
    let running = env.start(Kind::Tidegate, &[crate::target::RAISED_ACCEPT_BUDGET])?;
    let target = running.target.clone();
    let topic = target.topic("flood");
    let base = Instant::now();
    let readers = open_many(
        &target,
        &Accounts::new("reader", 8),
        p.subscribers,
        50,
        64 * 1024,
        |_| Some(topic.clone()),
    )
    .await?;
    let mut slow = None;
    if with_slow {
        let who = Who {
            account: "stalled",
            plan: None,
            token: None,
        };
        let mut c = target
            .connect(&who, 4242, 4096, p.slow_recv_buffer)
            .await?
            .map_err(|r| anyhow::anyhow!("slow subscriber refused: {r:?}"))?;
        c.subscribe(&topic).await?;
        slow = Some(c);
    }
    let mut pub_accounts = Accounts::new("flooder", 8);
    pub_accounts.plan = Some(PUBLISHER_PLAN.to_string());
    let publisher = open_many(&target, &pub_accounts, 1, 1, 16 * 1024, |_| None)
        .await?
        .pop()
        .ok_or_else(|| anyhow::anyhow!("no publisher"))?;

    let sh = Shared::new(base, p.subscribers);
    let rss_start = running.process.rss_bytes();
    let sampler = RssSampler::start(running.process.pid, Duration::from_millis(100), base);
    let mut tasks = Vec::new();
    for c in readers {
        tasks.push(tokio::task::spawn_local(fanout::subscriber(c, sh.clone())));
    }
    let pub_task = tokio::task::spawn_local(fanout::publisher(
        publisher,
        sh.clone(),
        topic.clone(),
        p.payload_bytes,
        Rate::PerSec(p.rate),
        64,
        p.rate,
    ));
    // Half a second of warm-up, then measure to the end.
    tokio::time::sleep(Duration::from_millis(500)).await;
    sh.measuring.set(true);
    tokio::time::sleep(Duration::from_secs_f64(p.duration_secs)).await;
    sh.stop.set(true);
    let _ = tokio::time::timeout(Duration::from_secs(3), pub_task).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    sh.measuring.set(false);
    let rss_end = running.process.rss_bytes();
    let timeline: Vec<(f64, f64)> = sampler
        .samples()
        .into_iter()
        .map(|(t, b)| (report::round2(t), mib(b)))
        .collect();
    let rss_max = sampler.max();
    drop(sampler);
    let drops = tidegate_metric(
        target.addr,
        "tidegate_rejections_total",
        &["layer=\"outbound\"", "reason=\"slow_consumer\""],
    )
    .await;
    let closes = tidegate_metric(
        target.addr,
        "tidegate_rejections_total",
        &["reason=\"slow_consumer_closed\""],
    )
    .await;
    for t in tasks {
        t.abort();
    }
    // Now the non-reader reads what reached it.
    let mut slow_outcome = None;
    let mut slow_received = 0u64;
    if let Some(mut c) = slow {
        let read = async {
            loop {
                let mut code = None;
                let r = c
                    .recv(|e| {
                        match e {
                            Event::Message { .. } => slow_received += 1,
                            Event::Closed { code: cc } => code = Some(cc),
                            _ => {}
                        }
                        Flow::Continue
                    })
                    .await;
                if let Some(cc) = code {
                    return cc.map_or("close".to_string(), |c| c.to_string());
                }
                if r.is_err() {
                    return "eof".to_string();
                }
            }
        };
        slow_outcome = Some(
            tokio::time::timeout(Duration::from_secs(5), read)
                .await
                .unwrap_or_else(|_| "still open".to_string()),
        );
    }
    let expected = sh.published.get() * p.subscribers as u64;
    let hist = sh.hist.borrow();
    Ok(SlowRun {
        with_slow_subscriber: with_slow,
        published: sh.published.get(),
        readers_latency: Latency::of(&hist),
        readers_lost: expected.saturating_sub(sh.received.get()),
        rss_mib_start: mib(rss_start),
        rss_mib_max: mib(rss_max),
        rss_mib_end: mib(rss_end),
        rss_timeline: timeline,
        slow_consumer_drops: drops,
        slow_consumer_closes: closes,
        slow_outcome,
        slow_messages_received: slow_received,
        errors: sh.errors.borrow().clone(),
    })
}

pub async fn run(env: &Env, p: &Params) -> Result<serde_json::Value> {
    let mut runs = Vec::new();
    for with_slow in [false, true] {
        eprintln!(
            "slow: tidegate readers={} rate={} payload={} non-reader={with_slow}",
            p.subscribers, p.rate, p.payload_bytes
        );
        let r = run_one(env, p, with_slow).await?;
        eprintln!(
            "  readers p50={}us p99={}us lost={}; RSS {}→max {} MiB; drops {:?}; outcome {:?}",
            r.readers_latency.p50_us,
            r.readers_latency.p99_us,
            r.readers_lost,
            r.rss_mib_start,
            r.rss_mib_max,
            r.slow_consumer_drops,
            r.slow_outcome
        );
        runs.push(r);
    }
    let comparison = json!({
        "readers_p99_ratio_with_vs_without": report::ratio(
            runs[1].readers_latency.p99_us as f64,
            runs[0].readers_latency.p99_us as f64
        ),
        "rss_max_growth_mib": report::round2(runs[1].rss_mib_max - runs[1].rss_mib_start),
    });
    if let Some(path) = &env.chart {
        chart(path, &runs)?;
    }
    Ok(json!({ "runs": runs, "with_vs_without": comparison }))
}

/// RSS over the flood, with and without a non-reader, and the readers'
/// latency percentiles.
fn chart(path: &std::path::Path, runs: &[SlowRun]) -> Result<()> {
    use crate::chart::{Bars, Line, Lines, Panel, Series, THIRD, TIDEGATE, draw};
    let name = |r: &SlowRun| {
        if r.with_slow_subscriber {
            "with one non-reading subscriber"
        } else {
            "readers only"
        }
    };
    let rss = runs
        .iter()
        .zip([THIRD, TIDEGATE])
        .map(|(r, color)| Line::new(name(r), color, r.rss_timeline.clone()))
        .collect();
    let rss = Lines::over_time("Broker RSS under a flood", "MiB", rss);
    let series = runs
        .iter()
        .zip([THIRD, TIDEGATE])
        .map(|(r, color)| {
            let l = &r.readers_latency;
            let name = if r.with_slow_subscriber {
                "with non-reader"
            } else {
                "readers only"
            };
            let ms = |us: u64| us as f64 / 1000.0;
            Series::new(name, color, vec![ms(l.p50_us), ms(l.p99_us), ms(l.p999_us)])
        })
        .collect();
    let latency = Bars {
        title: "Readers' publish→receive latency".into(),
        y_desc: "ms".into(),
        categories: vec!["p50".into(), "p99".into(), "p99.9".into()],
        series,
        hline: None,
    };
    draw(
        path,
        (1200, 460),
        &[(700, Panel::Lines(rss)), (500, Panel::Bars(latency))],
    )
}
