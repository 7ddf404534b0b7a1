//! In-process fan-out through the real actor path, and subscribe /
//! unsubscribe churn on the channel registry.
//!
//! `fanout/N`: N real socket actors, each opened through the broker's own
//! upgrade handler (`tidegate::socket::handshake::upgrade`: token
//! verified, handshake checks, `Socket` actor started) over an in-memory
//! duplex stream instead of a TCP socket, whose far end a task reads,
//! counting WebSocket frames. Every socket subscribes with a real
//! `subscribe` frame. One iteration is one publish on the node's bridge,
//! timed until every one of the N clients has read that frame: hub lookup,
//! `seq`, history, one encoding, N gauge checks, N direct outbox pushes
//! (no actor mailbox since issue 10), N transport writes and N reads. No
//! network.

use std::cell::Cell;
use std::hint::black_box;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_codec::Framed;
use actix_http::{h1, test::TestRequest};
use bytes::{Buf, Bytes, BytesMut};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use tidegate::Node;
use tidegate::hub::{DirectSink, HistoryLimits, Hub, OutboundGauge, Renders, Sink, Subscriber};
use tidegate::metrics::Metrics;
use tidegate_bench::target::{self, Who};
use tidegate_bench::ws::{OP_TEXT, encode_frame};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream, WriteHalf};

/// The load generator's bench config, with heartbeats out of the way (a
/// ping in the middle of a measurement would be counted as a delivery).
const NO_HEARTBEAT: &str = r#"
[socket]
heartbeat_interval_ms = 3600000
client_timeout_ms = 7200000
"#;

struct Fleet {
    sys: actix_rt::SystemRunner,
    node: Arc<Node>,
    frames: Rc<Cell<u64>>,
    n: u64,
    /// Keeps each socket's inbound side open.
    _inbound: Vec<WriteHalf<DuplexStream>>,
}

/// The same fleet on a conflating namespace (§11), keyed by `/k`: every
/// message is keyed once at the hub and pushed keyed into each outbox.
const CONFLATING: &str = r#"
[namespaces.doc]
delivery = "conflate"
conflation_key = "/k"
"#;

fn fleet(n: usize, extra: &str) -> Fleet {
    let sys = actix_rt::System::new();
    let frames = Rc::new(Cell::new(0u64));
    let (node, inbound) = sys.block_on({
        let frames = frames.clone();
        async move {
            let (_, config) = target::tidegate_config(&[
                target::TIDEGATE_BASE,
                target::RAISED_ACCEPT_BUDGET,
                NO_HEARTBEAT,
                extra,
            ])
            .expect("bench config");
            let minter = target::Target::tidegate("127.0.0.1:1".parse().unwrap(), &config)
                .expect("authenticator");
            let node = Node::new(config).expect("node");
            let mut inbound = Vec::with_capacity(n);
            for i in 0..n {
                let account = format!("s{}", i / 8);
                let token = minter
                    .token(&Who {
                        account: &account,
                        plan: None,
                        token: None,
                    })
                    .expect("token");
                let req = TestRequest::with_uri("/v1/ws")
                    .insert_header(("upgrade", "websocket"))
                    .insert_header(("connection", "upgrade"))
                    .insert_header(("sec-websocket-version", "13"))
                    .insert_header(("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="))
                    .insert_header((
                        "sec-websocket-protocol",
                        format!("tidegate.v1, bearer.{token}"),
                    ))
                    .finish();
                let (server, client) = tokio::io::duplex(64 * 1024);
                let framed = Framed::new(server, h1::Codec::new(Default::default()));
                actix_rt::spawn(tidegate::socket::handshake::upgrade(
                    node.clone(),
                    req,
                    framed,
                    &[],
                ));
                let (mut rd, mut wr) = tokio::io::split(client);
                let frames = frames.clone();
                actix_rt::spawn(async move {
                    let mut buf = BytesMut::with_capacity(16 * 1024);
                    let mut head = true;
                    while rd.read_buf(&mut buf).await.is_ok_and(|n| n > 0) {
                        if head {
                            let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                                continue;
                            };
                            assert!(buf.starts_with(b"HTTP/1.1 101"), "socket {i} was refused");
                            buf.advance(end + 4);
                            head = false;
                        }
                        while let Some(len) = frame_len(&buf) {
                            buf.advance(len);
                            frames.set(frames.get() + 1);
                        }
                    }
                });
                let mut sub = Vec::new();
                encode_frame(
                    OP_TEXT,
                    br#"{"type":"subscribe","channel":"doc:bench","id":1}"#,
                    0x5a5a_5a5a,
                    &mut sub,
                );
                wr.write_all(&sub).await.expect("inbound open");
                inbound.push(wr);
            }
            // welcome + ack on every socket.
            while frames.get() < 2 * n as u64 {
                tokio::task::yield_now().await;
            }
            (node, inbound)
        }
    });
    Fleet {
        sys,
        node,
        frames,
        n: n as u64,
        _inbound: inbound,
    }
}

/// The length of the whole server frame at the start of `buf`, if it is
/// all there (server frames are not masked).
fn frame_len(buf: &[u8]) -> Option<usize> {
    let (head, len) = match *buf.get(1)? & 0x7f {
        126 => (
            4,
            usize::from(u16::from_be_bytes([*buf.get(2)?, *buf.get(3)?])),
        ),
        127 => (
            10,
            u64::from_be_bytes(buf.get(2..10)?.try_into().ok()?) as usize,
        ),
        n => (2, usize::from(n)),
    };
    (buf.len() >= head + len).then_some(head + len)
}

fn fanout(c: &mut Criterion) {
    let data = format!("\"{}\"", "x".repeat(62));
    fanout_group(c, "fanout", "", &data);
}

/// The cost of conflation on the fan-out path, next to `fanout` (a 64-byte
/// payload with a key, so the pointer finds one).
fn fanout_conflate(c: &mut Criterion) {
    let data = format!("{{\"k\":7,\"x\":\"{}\"}}", "x".repeat(48));
    fanout_group(c, "fanout_conflate", CONFLATING, &data);
}

fn fanout_group(c: &mut Criterion, name: &str, extra: &str, data: &str) {
    let mut g = c.benchmark_group(name);
    g.sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    for n in [1usize, 100, 1_000, 10_000] {
        g.throughput(Throughput::Elements(n as u64));
        // Built only when this benchmark is selected.
        let mut built: Option<Fleet> = None;
        g.bench_function(BenchmarkId::from_parameter(n), |b| {
            let f = built.get_or_insert_with(|| fleet(n, extra));
            b.iter_custom(|iters| {
                f.sys.block_on(async {
                    let start = Instant::now();
                    for _ in 0..iters {
                        let target = f.frames.get() + f.n;
                        black_box(f.node.hub.publish("doc:bench", data));
                        while f.frames.get() < target {
                            tokio::task::yield_now().await;
                        }
                    }
                    start.elapsed()
                })
            })
        });
    }
    g.finish();
}

/// A subscriber for registry benches (never receives anything).
struct Nowhere;

impl DirectSink for Nowhere {
    fn message(&self, _: &Arc<str>, _: u64, _: &Bytes, _: Option<&Arc<str>>, _: &mut Renders) {}
    fn congested(&self) {}
}

fn registry(c: &mut Criterion) {
    let mut g = c.benchmark_group("registry");
    g.warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    let sink = Sink::Socket(Arc::new(Nowhere));
    let gauge = Arc::new(OutboundGauge::new(1 << 20));
    let sub = |conn: u64| Subscriber {
        conn,
        sink: sink.clone(),
        gauge: gauge.clone(),
    };
    for existing in [10u64, 1_000, 10_000] {
        let hub = Hub::new(
            HistoryLimits {
                size: 100,
                ttl: Duration::from_secs(300),
                max_bytes: usize::MAX,
            },
            Arc::new(Metrics::new()),
        );
        for conn in 0..existing {
            hub.subscribe("doc:churn", sub(conn), None);
        }
        let newcomer = sub(existing + 1);
        g.bench_function(BenchmarkId::new("subscribe_unsubscribe", existing), |b| {
            b.iter(|| {
                black_box(hub.subscribe("doc:churn", newcomer.clone(), None));
                hub.unsubscribe("doc:churn", existing + 1);
            })
        });
    }
    // A socket joining and leaving many small channels (one per document).
    let hub = Hub::new(
        HistoryLimits {
            size: 100,
            ttl: Duration::from_secs(300),
            max_bytes: usize::MAX,
        },
        Arc::new(Metrics::new()),
    );
    let names: Vec<String> = (0..10_000).map(|i| format!("doc:{i}")).collect();
    for (i, name) in names.iter().enumerate() {
        hub.subscribe(name, sub(i as u64), None);
    }
    let mut i = 0usize;
    let newcomer = sub(1 << 40);
    g.bench_function("subscribe_unsubscribe_10k_channels", |b| {
        b.iter(|| {
            let name = &names[i % names.len()];
            i += 1;
            black_box(hub.subscribe(name, newcomer.clone(), None));
            hub.unsubscribe(name, 1 << 40);
        })
    });
    g.finish();
}

criterion_group!(benches, fanout, fanout_conflate, registry);
criterion_main!(benches);
