//! `grpc-publish`: publish throughput over HTTP (`POST /v1/publish`, one
//! keep-alive connection per worker), GraphQL (`POST /v1/graphql` with the
//! `publish` mutation, likewise), gRPC unary `Publish` and gRPC
//! `PublishStream`, one after the other on one broker, each to the same S
//! WebSocket subscribers of one channel. Counts acknowledged publishes and
//! the deliveries the subscribers read in each phase, and the broker's CPU.
//!
//! The backend key's account has the publisher plan (1,000,000/s), so the
//! phases measure the transports, not the limiter.

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use serde::Serialize;
use serde_json::{Value, json};
use tidegate::grpc::proto::PublishRequest;
use tidegate::grpc::proto::broker_client::BrokerClient;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tonic::transport::Channel;

use super::{Accounts, CpuMeter, Env, open_many};
use crate::report::round2;
use crate::target::{self, Event, Kind};
use crate::ws::Flow;

/// The API key the backends publish with.
pub const BACKEND_KEY: &str = "tidegate-bench-backend-key";

#[derive(Debug, Clone, Serialize)]
pub struct Params {
    pub subscribers: usize,
    pub duration_secs: f64,
    pub payload_bytes: usize,
    /// Publishes in flight per transport (HTTP connections, unary calls,
    /// stream messages ahead of their replies).
    pub in_flight: usize,
    pub subscribers_per_account: usize,
}

#[derive(Debug, Default, Serialize)]
struct Phase {
    transport: &'static str,
    published: u64,
    publishes_per_sec: f64,
    delivered: u64,
    deliveries_per_sec: f64,
    errors: u64,
    broker_cpu_cores: f64,
}

fn layer(grpc_port: u16) -> String {
    format!(
        "[grpc]\nlisten = \"127.0.0.1:{grpc_port}\"\n\
         [[api_keys]]\nkey = \"{BACKEND_KEY}\"\naccount = \"bench_backend\"\npub_channels = [\"doc:*\"]\n\
         [accounts.bench_backend]\nplan = \"{}\"\n",
        target::PUBLISHER_PLAN
    )
}

pub(super) fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

pub(super) fn data(payload: usize) -> String {
    // A JSON string of `payload` bytes in all.
    format!("\"{}\"", "x".repeat(payload.saturating_sub(2)))
}

pub async fn run(env: &Env, p: &Params) -> Result<Value> {
    let port = free_port()?;
    let extra = layer(port);
    let running = env.start(Kind::Tidegate, &[target::RAISED_ACCEPT_BUDGET, &extra])?;
    let target = running.target.clone();
    let topic = target.topic("grpc");
    let accounts = Accounts::new("sub", p.subscribers_per_account);
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
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))?;
    // The gRPC listener opens beside the HTTP one, a moment later at most.
    let deadline = Instant::now() + target::PATIENCE;
    let grpc = loop {
        match endpoint.connect().await {
            Ok(c) => break c,
            Err(e) if Instant::now() > deadline => return Err(e).context("gRPC connect"),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    let body = data(p.payload_bytes);
    let duration = Duration::from_secs_f64(p.duration_secs);
    let mut phases = Vec::new();
    for transport in ["http", "graphql", "grpc_unary", "grpc_stream"] {
        let cpu = CpuMeter::start(running.process.pid);
        let before = delivered.get();
        let start = Instant::now();
        let end = start + duration;
        let (published, errors) = match transport {
            "http" => {
                let json =
                    json!({ "channel": topic, "data": serde_json::from_str::<Value>(&body)? });
                http_phase(
                    running.target.addr,
                    "/v1/publish",
                    &json.to_string(),
                    p.in_flight,
                    end,
                )
                .await
            }
            "graphql" => {
                let json = json!({
                    "query": "mutation($c: String!, $d: JSON!) { publish(channel: $c, data: $d) { seq } }",
                    "variables": { "c": topic, "d": serde_json::from_str::<Value>(&body)? },
                });
                http_phase(
                    running.target.addr,
                    "/v1/graphql",
                    &json.to_string(),
                    p.in_flight,
                    end,
                )
                .await
            }
            "grpc_unary" => unary_phase(&grpc, &topic, &body, p.in_flight, end).await,
            _ => stream_phase(&grpc, &topic, &body, p.in_flight, end).await,
        };
        let secs = start.elapsed().as_secs_f64();
        let got = delivered.get() - before;
        phases.push(Phase {
            transport,
            published,
            publishes_per_sec: round2(published as f64 / secs),
            delivered: got,
            deliveries_per_sec: round2(got as f64 / secs),
            errors,
            broker_cpu_cores: round2(cpu.cores()),
        });
    }
    for r in readers {
        r.abort();
    }
    if phases.iter().any(|ph| ph.published == 0) {
        return Err(anyhow!("a transport published nothing: {phases:?}"));
    }
    Ok(json!({ "phases": phases }))
}

/// `in_flight` keep-alive connections, each a loop of request → response:
/// `body` POSTed to `path` with the backend key.
async fn http_phase(
    addr: std::net::SocketAddr,
    path: &str,
    body: &str,
    in_flight: usize,
    end: Instant,
) -> (u64, u64) {
    let request = format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {BACKEND_KEY}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let ok = Rc::new(Cell::new(0u64));
    let bad = Rc::new(Cell::new(0u64));
    let mut tasks = Vec::new();
    for _ in 0..in_flight.max(1) {
        let (request, ok, bad) = (request.clone(), ok.clone(), bad.clone());
        tasks.push(tokio::task::spawn_local(async move {
            let Ok(mut s) = TcpStream::connect(addr).await else {
                bad.set(bad.get() + 1);
                return;
            };
            let _ = s.set_nodelay(true);
            let mut buf = Vec::with_capacity(4096);
            while Instant::now() < end {
                if s.write_all(request.as_bytes()).await.is_err() {
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

/// Reads one HTTP/1.1 response with a `content-length`; its status.
pub(super) async fn read_response(s: &mut TcpStream, buf: &mut Vec<u8>) -> Option<u16> {
    buf.clear();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = std::str::from_utf8(&buf[..head_end])
        .ok()?
        .to_ascii_lowercase();
    let status: u16 = head.split(' ').nth(1)?.parse().ok()?;
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + len {
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Some(status)
}

fn request(topic: &str, data: &str) -> tonic::Request<PublishRequest> {
    authed(PublishRequest {
        channel: topic.to_string(),
        data_json: data.to_string(),
        id: String::new(),
        idempotency_key: String::new(),
    })
}

fn authed<T>(msg: T) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    r.metadata_mut().insert(
        "authorization",
        format!("Bearer {BACKEND_KEY}").parse().expect("ASCII key"),
    );
    r
}

/// `in_flight` unary calls at a time over one HTTP/2 connection.
async fn unary_phase(
    grpc: &Channel,
    topic: &str,
    data: &str,
    in_flight: usize,
    end: Instant,
) -> (u64, u64) {
    let ok = Rc::new(Cell::new(0u64));
    let bad = Rc::new(Cell::new(0u64));
    let mut tasks = Vec::new();
    for _ in 0..in_flight.max(1) {
        let mut client = BrokerClient::new(grpc.clone());
        let (topic, data, ok, bad) = (topic.to_string(), data.to_string(), ok.clone(), bad.clone());
        tasks.push(tokio::task::spawn_local(async move {
            while Instant::now() < end {
                match client.publish(request(&topic, &data)).await {
                    Ok(_) => ok.set(ok.get() + 1),
                    Err(_) => bad.set(bad.get() + 1),
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    (ok.get(), bad.get())
}

/// One `PublishStream`, at most `in_flight` messages ahead of the replies.
async fn stream_phase(
    grpc: &Channel,
    topic: &str,
    data: &str,
    in_flight: usize,
    end: Instant,
) -> (u64, u64) {
    let mut client = BrokerClient::new(grpc.clone());
    let (tx, rx) = tokio::sync::mpsc::channel::<PublishRequest>(in_flight.max(1));
    let msg = PublishRequest {
        channel: topic.to_string(),
        data_json: data.to_string(),
        id: String::new(),
        idempotency_key: String::new(),
    };
    for _ in 0..in_flight.max(1) {
        let _ = tx.send(msg.clone()).await;
    }
    let mut replies = match client
        .publish_stream(authed(tokio_stream::wrappers::ReceiverStream::new(rx)))
        .await
    {
        Ok(r) => r.into_inner(),
        Err(_) => return (0, 1),
    };
    let (mut ok, mut bad) = (0u64, 0u64);
    let mut sending = Some(tx);
    loop {
        match replies.message().await {
            Ok(Some(r)) => {
                if r.error.is_some() {
                    bad += 1;
                } else {
                    ok += 1;
                }
                // One more for each reply, until the end: then close the
                // sending side and read the replies still owed.
                if Instant::now() < end {
                    if let Some(tx) = &sending {
                        let _ = tx.send(msg.clone()).await;
                    }
                } else {
                    sending = None;
                }
            }
            Ok(None) => break,
            Err(_) => {
                bad += 1;
                break;
            }
        }
    }
    (ok, bad)
}
