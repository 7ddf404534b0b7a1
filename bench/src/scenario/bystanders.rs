//! What the rest of a node sees during a reconnect storm: bystander
//! sockets, connected and subscribed before the storm and not part of it,
//! and the broker's own accept counter.
//!
//! The bystanders run on their own thread with their own event loop
//! ([`Watch`]), so what they time is the broker, not the load generator's
//! loop busy with the storm's clients.
//!
//! Each bystander answers the server's heartbeat pings and records when
//! they arrive (a gap over twice the interval is a missed heartbeat),
//! sends its own ping every [`PING_EVERY`] and times the pong, and
//! receives a message published over HTTP every [`PUBLISH_EVERY`] to the
//! bystanders' channel, timing its delivery. The publisher and the
//! `/metrics` sampler each keep one HTTP/1.1 connection open from before
//! the storm, so neither waits in the accept queue the storm fills.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use serde::Serialize;
use tokio::sync::{oneshot, watch};

use super::keepalive::Publisher;
use super::{Accounts, open_many};
use crate::report::round2;
use crate::target::{Conn, Target};
use crate::ws::{Flow, OP_CLOSE, OP_PING, OP_PONG, OP_TEXT};

/// How often each bystander pings the server itself.
pub const PING_EVERY: Duration = Duration::from_millis(250);
/// How often a message is published to the bystanders.
pub const PUBLISH_EVERY: Duration = Duration::from_millis(200);

/// One bystander's record, times in seconds from the storm's start.
#[derive(Default)]
struct Record {
    server_pings: Vec<f64>,
    pong_rtts_ms: Vec<f64>,
    /// (publish number, delivery latency in ms).
    deliveries: Vec<(u64, f64)>,
    closed_at: Option<f64>,
}

/// What the bystanders saw from the drop until a second after the last
/// client was back.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub bystanders: usize,
    pub heartbeat_interval_ms: u64,
    /// Server heartbeat pings received, over all bystanders.
    pub heartbeats: usize,
    /// Gaps between heartbeats (window edges included) over twice the
    /// interval: each is at least one missed heartbeat.
    pub missed_heartbeats: usize,
    pub max_heartbeat_gap_ms: f64,
    /// The bystanders' own pings: round trips to the pong.
    pub pings: usize,
    pub max_pong_rtt_ms: f64,
    pub p99_pong_rtt_ms: f64,
    /// Messages published to the bystanders during the storm, and how
    /// many (publish, bystander) deliveries were due and arrived.
    pub published: u64,
    pub deliveries_due: u64,
    pub delivered: u64,
    pub max_delivery_ms: f64,
    pub p99_delivery_ms: f64,
    /// Bystanders the server closed (or whose stream ended).
    pub closed: usize,
}

/// The running bystanders: their sockets' tasks and the publisher.
struct Bystanders {
    records: Vec<Rc<RefCell<Record>>>,
    tasks: tokio::task::JoinSet<()>,
    stop: watch::Sender<bool>,
    published: Rc<Cell<u64>>,
    /// The storm's start: every time is measured from it.
    t0: Rc<Cell<Option<Instant>>>,
    heartbeat_ms: u64,
}

/// Nearest-rank percentile of `v` (sorted in place).
fn percentile(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let i = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[i.clamp(1, v.len()) - 1]
}

impl Bystanders {
    /// Opens `n` bystanders (their own accounts) on `topic`; they start
    /// recording at [`Bystanders::storm_starts`].
    async fn open(target: &Target, n: usize, topic: &str, heartbeat_ms: u64) -> Result<Self> {
        let accounts = Accounts::new("bystander", 4);
        let conns = open_many(target, &accounts, n, 50, 4096, |_| Some(topic.to_string()))
            .await
            .context("opening the bystanders")?;
        let (stop, _) = watch::channel(false);
        let t0 = Rc::new(Cell::new(None));
        let base = Instant::now();
        let mut records = Vec::with_capacity(n);
        let mut tasks = tokio::task::JoinSet::new();
        for conn in conns {
            let record = Rc::new(RefCell::new(Record::default()));
            records.push(record.clone());
            tasks.spawn_local(watch_one(conn, record, stop.subscribe(), t0.clone(), base));
        }
        let published = Rc::new(Cell::new(0));
        let publisher = Publisher::connect(target).await?;
        tasks.spawn_local(publish(
            publisher,
            topic.to_string(),
            stop.subscribe(),
            t0.clone(),
            base,
            published.clone(),
        ));
        Ok(Bystanders {
            records,
            tasks,
            stop,
            published,
            t0,
            heartbeat_ms,
        })
    }

    /// Times count from now.
    fn storm_starts(&self, t0: Instant) {
        self.t0.set(Some(t0));
    }

    /// Stops recording and reports the window `[0, end_secs]`.
    async fn finish(mut self, end_secs: f64) -> Report {
        let _ = self.stop.send(true);
        while self.tasks.join_next().await.is_some() {}
        let interval = self.heartbeat_ms as f64 / 1000.0;
        let (mut heartbeats, mut missed, mut max_gap) = (0, 0, 0.0f64);
        let (mut rtts, mut latencies) = (Vec::new(), Vec::new());
        let (mut delivered, mut closed) = (0u64, 0);
        let published = self.published.get();
        for r in &self.records {
            let r = r.borrow();
            let until = r.closed_at.unwrap_or(end_secs).min(end_secs);
            let mut last = 0.0f64;
            for &t in r.server_pings.iter().filter(|&&t| t >= 0.0 && t <= until) {
                heartbeats += 1;
                let gap = t - last;
                max_gap = max_gap.max(gap);
                missed += usize::from(gap > 2.0 * interval);
                last = t;
            }
            let tail = end_secs - last;
            max_gap = max_gap.max(tail);
            missed += usize::from(tail > 2.0 * interval);
            rtts.extend_from_slice(&r.pong_rtts_ms);
            delivered += r.deliveries.len() as u64;
            latencies.extend(r.deliveries.iter().map(|&(_, ms)| ms));
            closed += usize::from(r.closed_at.is_some());
        }
        Report {
            bystanders: self.records.len(),
            heartbeat_interval_ms: self.heartbeat_ms,
            heartbeats,
            missed_heartbeats: missed,
            max_heartbeat_gap_ms: round2(max_gap * 1000.0),
            pings: rtts.len(),
            max_pong_rtt_ms: round2(rtts.iter().copied().fold(0.0, f64::max)),
            p99_pong_rtt_ms: round2(percentile(&mut rtts, 99.0)),
            published,
            deliveries_due: published * self.records.len() as u64,
            delivered,
            max_delivery_ms: round2(latencies.iter().copied().fold(0.0, f64::max)),
            p99_delivery_ms: round2(percentile(&mut latencies, 99.0)),
            closed,
        }
    }
}

/// The bystanders on their own thread: opened by [`Watch::spawn`], told
/// when the storm starts, asked for their report at its end.
pub struct Watch {
    start: Option<oneshot::Sender<Instant>>,
    finish: Option<oneshot::Sender<f64>>,
    report: oneshot::Receiver<Result<Report>>,
}

impl Watch {
    /// Opens `n` bystanders on `topic` from a new thread; returns once they
    /// are connected and subscribed. `config` is the broker's config text.
    pub async fn spawn(
        target: &Target,
        config: &str,
        n: usize,
        topic: &str,
        heartbeat_ms: u64,
    ) -> Result<Watch> {
        let (addr, config, topic) = (target.addr, config.to_string(), topic.to_string());
        let (ready_tx, ready_rx) = oneshot::channel::<Result<()>>();
        let (start_tx, start_rx) = oneshot::channel::<Instant>();
        let (finish_tx, finish_rx) = oneshot::channel::<f64>();
        let (report_tx, report_rx) = oneshot::channel();
        std::thread::Builder::new()
            .name("bystanders".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.into()));
                        return;
                    }
                };
                let local = tokio::task::LocalSet::new();
                local.block_on(&rt, async move {
                    let opened = async {
                        let cfg = tidegate::config::Config::from_toml(&config, &|_| None)
                            .map_err(|e| anyhow!("bench config: {e}"))?;
                        let target = Target::tidegate(addr, &cfg)?;
                        Bystanders::open(&target, n, &topic, heartbeat_ms).await
                    };
                    let b = match opened.await {
                        Ok(b) => {
                            let _ = ready_tx.send(Ok(()));
                            b
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    let Ok(t0) = start_rx.await else { return };
                    b.storm_starts(t0);
                    let Ok(end) = finish_rx.await else { return };
                    let _ = report_tx.send(Ok(b.finish(end).await));
                });
            })?;
        ready_rx
            .await
            .map_err(|_| anyhow!("bystander thread ended"))??;
        Ok(Watch {
            start: Some(start_tx),
            finish: Some(finish_tx),
            report: report_rx,
        })
    }

    /// The storm starts now: times count from `t0`.
    pub fn storm_starts(&mut self, t0: Instant) {
        if let Some(s) = self.start.take() {
            let _ = s.send(t0);
        }
    }

    /// Ends the watch at `end_secs` from the storm's start.
    pub async fn finish(mut self, end_secs: f64) -> Result<Report> {
        if let Some(f) = self.finish.take() {
            let _ = f.send(end_secs);
        }
        self.report
            .await
            .map_err(|_| anyhow!("bystander thread ended"))?
    }
}

/// Seconds since the storm started (negative before).
fn since(t0: &Cell<Option<Instant>>, now: Instant) -> Option<f64> {
    t0.get().map(|t0| {
        if now >= t0 {
            (now - t0).as_secs_f64()
        } else {
            -(t0 - now).as_secs_f64()
        }
    })
}

/// One bystander: pings on a timer, reads (and answers heartbeats) the
/// rest of the time, until told to stop or closed.
async fn watch_one(
    mut conn: Conn,
    record: Rc<RefCell<Record>>,
    mut stop: watch::Receiver<bool>,
    t0: Rc<Cell<Option<Instant>>>,
    base: Instant,
) {
    let mut tick = tokio::time::interval(PING_EVERY);
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = tick.tick() => {
                // The payload is when it was sent, in µs from `base`.
                let sent = base.elapsed().as_micros() as u64;
                if conn.ws.send(OP_PING, &sent.to_be_bytes()).await.is_err() {
                    record.borrow_mut().closed_at = since(&t0, Instant::now()).or(Some(-1.0));
                    return;
                }
            }
            read = conn.ws.read_frames(|op, p| {
                let now = Instant::now();
                let at = since(&t0, now);
                let mut r = record.borrow_mut();
                match op {
                    OP_PING => r.server_pings.extend(at),
                    OP_PONG if at.is_some() => {
                        if let Ok(b) = <[u8; 8]>::try_from(p) {
                            let sent = base + Duration::from_micros(u64::from_be_bytes(b));
                            r.pong_rtts_ms.push((now - sent).as_secs_f64() * 1000.0);
                        }
                    }
                    OP_TEXT if at.is_some() => {
                        if let Some((n, sent)) = published_stamp(p) {
                            let sent = base + Duration::from_micros(sent);
                            r.deliveries.push((n, (now - sent).as_secs_f64() * 1000.0));
                        }
                    }
                    OP_CLOSE => {
                        r.closed_at = at.or(Some(-1.0));
                        return Flow::Stop;
                    }
                    _ => {}
                }
                Flow::Continue
            }) => {
                if read.is_err() || record.borrow().closed_at.is_some() {
                    let mut r = record.borrow_mut();
                    if r.closed_at.is_none() {
                        r.closed_at = since(&t0, Instant::now()).or(Some(-1.0));
                    }
                    return;
                }
            }
        }
    }
}

/// `{"n":N,"sent_us":T}` inside a message frame's data.
fn published_stamp(frame: &[u8]) -> Option<(u64, u64)> {
    let v: serde_json::Value = serde_json::from_slice(frame).ok()?;
    let d = &v["data"];
    Some((d["n"].as_u64()?, d["sent_us"].as_u64()?))
}

/// Publishes to the bystanders' channel while the storm runs.
async fn publish(
    mut publisher: Publisher,
    topic: String,
    mut stop: watch::Receiver<bool>,
    t0: Rc<Cell<Option<Instant>>>,
    base: Instant,
    published: Rc<Cell<u64>>,
) {
    let mut tick = tokio::time::interval(PUBLISH_EVERY);
    let mut n = 0u64;
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = tick.tick() => {}
        }
        if t0.get().is_none() {
            // Keep the connection from idling out before the storm.
            if publisher.get("/healthz").await.is_err() {
                return;
            }
            continue;
        }
        n += 1;
        let sent_us = base.elapsed().as_micros() as u64;
        let body = format!(r#"{{"channel":"{topic}","data":{{"n":{n},"sent_us":{sent_us}}}}}"#);
        match publisher.post("/v1/publish", &body).await {
            Ok(200) => published.set(published.get() + 1),
            // A refused publish is due to nobody: not counted.
            Ok(_) => {}
            Err(_) => return,
        }
    }
}
