//! `behaviours`: seed 000's three clients at once against one Tidegate with
//! every default limit, and what each got back.
//!
//! - typist: one socket, 8 publishes/s with a one-second paste burst of
//!   30/s. Expected: never limited.
//! - buggy: one socket in a re-render loop, 4,000 publishes/s. Expected:
//!   excess dropped with about one `rate_limited` frame a second, socket
//!   kept open.
//! - abuser: one account opening 50 sockets, 200 publishes each spread
//!   over the run. Expected:
//!   the connection cap refuses sockets past 8 (429) and the account
//!   budget closes the rest with 1008.
//!
//! Assertions are on the shape (seed 000: "assert on the shape of the
//! result, not on exact counts"); `as_seed_expects` says whether it held.

use std::time::{Duration, Instant};

use anyhow::Result;
use serde::Serialize;
use serde_json::json;
use tokio::task::JoinSet;

use super::{Env, Tally, refusal_key};
use crate::target::{Conn, Event, Kind, Target, Who};
use crate::ws::Flow;

#[derive(Debug, Clone, Serialize)]
pub struct Params {
    pub duration_secs: f64,
    pub abuser_sockets: usize,
    pub abuser_messages: usize,
    pub buggy_rate: f64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Outcome {
    pub sockets_attempted: usize,
    pub sockets_opened: usize,
    pub handshake_refusals: Tally,
    pub sent: u64,
    pub acked: u64,
    /// Frames `rate_limited` notices reported dropped.
    pub dropped: u64,
    /// Error frames by code.
    pub errors: Tally,
    /// Closes by code (`eof` for a stream that ended without one).
    pub closes: Tally,
    pub open_at_end: usize,
    pub as_seed_expects: bool,
}

/// When each frame of a socket goes out, from the socket's start.
pub(super) fn typist_schedule(duration: f64) -> Vec<Duration> {
    let mut out = Vec::new();
    let mut t = 0.0;
    while t < duration {
        // One second of paste-and-format at 30/s in the middle.
        let burst = (1.0..2.0).contains(&t);
        out.push(Duration::from_secs_f64(t));
        t += if burst { 1.0 / 30.0 } else { 1.0 / 8.0 };
    }
    out
}

pub(super) fn steady_schedule(rate: f64, duration: f64) -> Vec<Duration> {
    let n = (rate * duration) as usize;
    (0..n)
        .map(|i| Duration::from_secs_f64(i as f64 / rate))
        .collect()
}

#[derive(Debug, Default)]
struct SocketTally {
    sent: u64,
    acked: u64,
    dropped: u64,
    errors: Tally,
    close: Option<String>,
}

async fn drive(
    mut conn: Conn,
    topic: String,
    schedule: Vec<Duration>,
    run_for: Duration,
) -> SocketTally {
    let mut t = SocketTally::default();
    let start = Instant::now();
    let mut next = 0usize;
    let mut out = Vec::new();
    let mut data = Vec::new();
    let end = start + run_for;
    loop {
        enum Step {
            Read(anyhow::Result<()>),
            Send,
            End,
        }
        let due = schedule.get(next).map(|d| start + *d);
        let step = {
            let send = async {
                match due {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending::<()>().await,
                }
            };
            let mut closed = None;
            let s = tokio::select! {
                biased;
                r = conn.recv(|e| {
                    match e {
                        Event::Ack => t.acked += 1,
                        Event::Error { code, dropped } => {
                            t.dropped += dropped;
                            t.errors.add(code, 1);
                        }
                        Event::Closed { code } => {
                            closed = Some(code.map_or("none".to_string(), |c| c.to_string()));
                        }
                        _ => {}
                    }
                    Flow::Continue
                }) => Step::Read(r),
                () = send => Step::Send,
                () = tokio::time::sleep_until(end.into()) => Step::End,
            };
            if let Some(c) = closed {
                t.close = Some(c);
            }
            s
        };
        match step {
            Step::Read(Err(_)) => {
                t.close.get_or_insert_with(|| "eof".into());
                return t;
            }
            Step::Read(Ok(())) if t.close.is_some() => return t,
            Step::Read(Ok(())) => {}
            Step::Send => {
                out.clear();
                let now = start.elapsed();
                while next < schedule.len() && schedule[next] <= now {
                    data.clear();
                    data.extend_from_slice(format!("{{\"n\":{next}}}").as_bytes());
                    conn.publish_frame(&topic, &data, next as u64, &mut out);
                    next += 1;
                    t.sent += 1;
                }
                if conn.ws.write_raw(&out).await.is_err() {
                    t.close.get_or_insert_with(|| "eof".into());
                    return t;
                }
            }
            Step::End => return t,
        }
    }
}

pub(super) async fn client(
    target: &Target,
    account: &str,
    sockets: usize,
    schedule: Vec<Duration>,
    run_for: Duration,
) -> Result<Outcome> {
    let mut out = Outcome {
        sockets_attempted: sockets,
        ..Outcome::default()
    };
    let mut set = JoinSet::new();
    let topic = target.topic(account);
    for i in 0..sockets {
        let who = Who {
            account,
            plan: None,
            token: None,
        };
        match target.connect(&who, i as u64 + 99, 16 * 1024, 0).await? {
            Ok(conn) => {
                out.sockets_opened += 1;
                set.spawn_local(drive(conn, topic.clone(), schedule.clone(), run_for));
            }
            Err(r) => out.handshake_refusals.add(refusal_key(&r), 1),
        }
    }
    while let Some(r) = set.join_next().await {
        let t = r?;
        out.sent += t.sent;
        out.acked += t.acked;
        out.dropped += t.dropped;
        for (k, v) in t.errors.0 {
            out.errors.add(k, v);
        }
        match t.close {
            Some(c) => out.closes.add(c, 1),
            None => out.open_at_end += 1,
        }
    }
    Ok(out)
}

pub async fn run(env: &Env, p: &Params) -> Result<serde_json::Value> {
    eprintln!("behaviours: tidegate, {} s", p.duration_secs);
    let running = env.start(Kind::Tidegate, &[])?;
    let target = running.target.clone();
    let d = p.duration_secs;
    // A last rate_limited notice follows within a second of the last drop.
    let run_for = Duration::from_secs_f64(d + 1.5);
    let typist_t = target.clone();
    let buggy_t = target.clone();
    let abuser_t = target.clone();
    // 200 per socket, spread over the run: a per-connection bucket alone
    // would admit 20/s of it on each socket, which is what the account
    // budget exists to stop.
    let schedule_abuser = steady_schedule(p.abuser_messages as f64 / d, d);
    let (typist, buggy, abuser) = tokio::join!(
        client(&typist_t, "typist", 1, typist_schedule(d), run_for),
        client(
            &buggy_t,
            "buggy",
            1,
            steady_schedule(p.buggy_rate, d),
            run_for
        ),
        client(
            &abuser_t,
            "abuser",
            p.abuser_sockets,
            schedule_abuser,
            run_for
        ),
    );
    let mut typist = typist?;
    let mut buggy = buggy?;
    let mut abuser = abuser?;
    typist.as_seed_expects =
        typist.errors.total() == 0 && typist.closes.total() == 0 && typist.acked == typist.sent;
    buggy.as_seed_expects = buggy.errors.0.get("rate_limited").copied().unwrap_or(0) > 0
        && buggy.closes.total() == 0
        && buggy.open_at_end == 1;
    let closed_1008 = abuser.closes.0.get("1008").copied().unwrap_or(0);
    let refused_429 = abuser
        .handshake_refusals
        .0
        .iter()
        .filter(|(k, _)| k.starts_with("429"))
        .map(|(_, v)| v)
        .sum::<u64>();
    abuser.as_seed_expects = closed_1008 > 0 && refused_429 > 0;
    let rate_limited_rejections = super::tidegate_metric(
        target.addr,
        "tidegate_rejections_total",
        &["reason=\"rate_limited\""],
    )
    .await;
    drop(running);
    let results = json!({
        "typist": typist,
        "buggy": buggy,
        "abuser": abuser,
        "broker_rate_limited_rejections": rate_limited_rejections,
    });
    if let Some(path) = &env.chart {
        chart(
            path,
            &[("typist", &typist), ("buggy", &buggy), ("abuser", &abuser)],
        )?;
    }
    Ok(results)
}

/// What each client sent, got acked, had dropped and had closed.
fn chart(path: &std::path::Path, clients: &[(&str, &Outcome)]) -> Result<()> {
    use crate::chart::{Bars, FOURTH, NATS, Panel, Series, THIRD, TIDEGATE, draw};
    let pick = |f: &dyn Fn(&Outcome) -> f64| clients.iter().map(|(_, o)| f(o)).collect::<Vec<_>>();
    let bars = Panel::Bars(Bars {
        title: "Seed 000 behaviours against Tidegate defaults".into(),
        y_desc: "frames".into(),
        categories: clients.iter().map(|(n, _)| n.to_string()).collect(),
        series: vec![
            Series::new("sent", TIDEGATE, pick(&|o| o.sent as f64)),
            Series::new("acked", THIRD, pick(&|o| o.acked as f64)),
            Series::new("dropped (rate_limited)", NATS, pick(&|o| o.dropped as f64)),
            Series::new("sockets closed", FOURTH, pick(&|o| o.closes.total() as f64)),
        ],
        hline: None,
    });
    draw(path, (900, 440), &[(900, bars)])
}
