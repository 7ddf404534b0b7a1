//! `webhooks`: N events to a fast webhook endpoint, alone and then beside a
//! failing one (every request answered 500, or never answered); the fast
//! endpoint's delivery rate and latency in both cases show whether the
//! failing endpoint costs it anything (§9's per-endpoint isolation).
//!
//! The receivers are minimal HTTP/1.1 servers in this process (keep-alive,
//! `content-length` bodies). Events are published over HTTP in batches by
//! a key bound to the publisher's plan; each carries its publish time, so
//! latency is publish → arrival at the receiver.

use std::cell::RefCell;
use std::collections::HashSet;
use std::rc::Rc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, bail};
use serde::Serialize;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::Env;
use crate::report::{self, Latency};
use crate::target::{Kind, PUBLISHER_PLAN};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Failing {
    /// Answers 500 at once.
    Error,
    /// Accepts the connection and never answers (timeouts).
    Hang,
}

#[derive(Debug, Clone, Serialize)]
pub struct Params {
    pub events: usize,
    pub batch: usize,
    pub failing: Failing,
    pub fast_rate_per_sec: f64,
    pub max_in_flight: u32,
    pub patience_secs: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct WebhookRun {
    pub case: &'static str,
    pub events: usize,
    pub delivered: usize,
    pub publish_secs: f64,
    /// First publish to the last delivery at the fast endpoint.
    pub delivery_secs: f64,
    pub deliveries_per_sec: f64,
    pub latency: Latency,
    pub failing_requests: usize,
}

const BENCH_KEY: &str = "tidegate-bench-webhook-publisher-key";

/// What a receiver saw.
#[derive(Default)]
struct Seen {
    ids: HashSet<String>,
    latency: Option<hdrhistogram::Histogram<u64>>,
    requests: usize,
    last: Option<Instant>,
}

fn unix_micros() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Reads one request (head and `content-length` body) from `buf`/`s`.
async fn read_request(s: &mut TcpStream, buf: &mut Vec<u8>) -> Result<Option<(String, Vec<u8>)>> {
    loop {
        if let Some(end) = find(buf, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            let total = end + 4 + len;
            while buf.len() < total {
                let mut chunk = [0u8; 16384];
                let n = s.read(&mut chunk).await?;
                if n == 0 {
                    return Ok(None);
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            let body = buf[end + 4..total].to_vec();
            buf.drain(..total);
            return Ok(Some((head, body)));
        }
        let mut chunk = [0u8; 16384];
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// A receiver on a free port: `answer` is `Some(status)` or `None` (hang).
async fn receiver(answer: Option<u16>, seen: Rc<RefCell<Seen>>) -> Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/hook", listener.local_addr()?);
    tokio::task::spawn_local(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let seen = seen.clone();
            tokio::task::spawn_local(async move {
                let mut buf = Vec::new();
                while let Ok(Some((head, body))) = read_request(&mut s, &mut buf).await {
                    let now = unix_micros();
                    {
                        let mut seen = seen.borrow_mut();
                        seen.requests += 1;
                        seen.last = Some(Instant::now());
                        let id = head
                            .lines()
                            .find_map(|l| l.strip_prefix("webhook-id:"))
                            .map(|v| v.trim().to_owned())
                            .unwrap_or_default();
                        let v: serde_json::Value =
                            serde_json::from_slice(&body).unwrap_or_default();
                        if let Some(t) = v["data"]["data"]["t"].as_u64()
                            && seen.ids.insert(id)
                            && let Some(h) = seen.latency.as_mut()
                        {
                            let _ = h.record(now.saturating_sub(t).max(1));
                        }
                    }
                    let Some(status) = answer else {
                        std::future::pending::<()>().await;
                        return;
                    };
                    let reply = format!("HTTP/1.1 {status} X\r\ncontent-length: 0\r\n\r\n");
                    if s.write_all(reply.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    Ok(url)
}

/// Publishes `n` events in batches over one keep-alive HTTP connection.
async fn publish(addr: std::net::SocketAddr, n: usize, batch: usize) -> Result<()> {
    let mut s = TcpStream::connect(addr).await?;
    s.set_nodelay(true)?;
    let mut buf = Vec::new();
    let mut sent = 0;
    while sent < n {
        let k = batch.min(n - sent);
        let messages: Vec<_> = (0..k)
            .map(|i| json!({"channel": "hook:bench", "data": {"i": sent + i, "t": unix_micros()}}))
            .collect();
        let body = serde_json::to_vec(&json!({ "messages": messages }))?;
        let head = format!(
            "POST /v1/publish/batch HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {BENCH_KEY}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes()).await?;
        s.write_all(&body).await?;
        let (head, _) = read_request(&mut s, &mut buf)
            .await?
            .context("broker closed the publish connection")?;
        if !head.starts_with("http/1.1 200") {
            bail!(
                "batch publish refused: {}",
                head.lines().next().unwrap_or("")
            );
        }
        sent += k;
    }
    Ok(())
}

fn layer(fast: &str, failing: Option<&str>, p: &Params) -> String {
    let mut text = format!(
        "[[api_keys]]\nkey = \"{BENCH_KEY}\"\naccount = \"webhook-publisher\"\npub_channels = [\"*\"]\n\
         [accounts.webhook-publisher]\nplan = \"{PUBLISHER_PLAN}\"\n\
         [[webhooks]]\nid = \"fast\"\nurl = \"{fast}\"\nsecret = \"bench-webhook-secret-0123456789\"\n\
         events = [\"message.published\"]\nrate_per_sec = {}\nburst = {}\nmax_in_flight = {}\nqueue_max = {}\n",
        p.fast_rate_per_sec,
        p.fast_rate_per_sec.ceil() as u64,
        p.max_in_flight,
        p.events * 2
    );
    if let Some(url) = failing {
        text.push_str(&format!(
            "[[webhooks]]\nid = \"failing\"\nurl = \"{url}\"\nsecret = \"bench-webhook-secret-0123456789\"\n\
             events = [\"message.published\"]\nrate_per_sec = {}\nburst = {}\nmax_in_flight = {}\nqueue_max = {}\ntimeout_ms = 2000\n",
            p.fast_rate_per_sec,
            p.fast_rate_per_sec.ceil() as u64,
            p.max_in_flight,
            p.events * 2
        ));
    }
    text
}

async fn run_case(env: &Env, p: &Params, with_failing: bool) -> Result<WebhookRun> {
    let fast = Rc::new(RefCell::new(Seen {
        latency: Some(report::histogram()),
        ..Seen::default()
    }));
    let bad = Rc::new(RefCell::new(Seen::default()));
    let fast_url = receiver(Some(200), fast.clone()).await?;
    let failing_url = match (with_failing, p.failing) {
        (false, _) => None,
        (true, Failing::Error) => Some(receiver(Some(500), bad.clone()).await?),
        (true, Failing::Hang) => Some(receiver(None, bad.clone()).await?),
    };
    let text = layer(&fast_url, failing_url.as_deref(), p);
    let running = env.start(Kind::Tidegate, &[text.as_str()])?;
    let addr = running.target.addr;
    let start = Instant::now();
    publish(addr, p.events, p.batch).await?;
    let published = start.elapsed();
    let deadline = start + Duration::from_secs_f64(p.patience_secs);
    while fast.borrow().ids.len() < p.events && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    drop(running);
    let seen = fast.borrow();
    let delivered = seen.ids.len();
    let took = seen
        .last
        .map_or(Duration::ZERO, |l| l.duration_since(start));
    Ok(WebhookRun {
        case: if with_failing {
            "beside_failing"
        } else {
            "alone"
        },
        events: p.events,
        delivered,
        publish_secs: report::round2(published.as_secs_f64()),
        delivery_secs: report::round2(took.as_secs_f64()),
        deliveries_per_sec: (delivered as f64 / took.as_secs_f64().max(1e-9)).round(),
        latency: Latency::of(
            seen.latency
                .as_ref()
                .expect("fast receiver records latency"),
        ),
        failing_requests: bad.borrow().requests,
    })
}

pub async fn run(env: &Env, p: &Params) -> Result<serde_json::Value> {
    let mut runs = Vec::new();
    for with_failing in [false, true] {
        eprintln!(
            "webhooks: {} events, failing endpoint: {with_failing}",
            p.events
        );
        let r = run_case(env, p, with_failing).await?;
        eprintln!(
            "  {}/{} delivered, {} /s, p50 {} µs, p99 {} µs, failing endpoint saw {} requests",
            r.delivered,
            r.events,
            r.deliveries_per_sec,
            r.latency.p50_us,
            r.latency.p99_us,
            r.failing_requests
        );
        runs.push(r);
    }
    let ratio = report::ratio(runs[1].deliveries_per_sec, runs[0].deliveries_per_sec);
    Ok(json!({ "runs": runs, "rate_beside_failing_vs_alone": ratio }))
}
