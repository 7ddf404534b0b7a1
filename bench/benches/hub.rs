//! In-process fan-out through the real actor path, and subscribe /
//! unsubscribe churn on the channel registry.
//!
//! `fanout/N`: N real socket actors, each opened through the broker's own
//! `/v1/ws` handler (`tidegate::server::routes` in an in-process actix
//! service: token verified, handshake checks, `Socket` actor started),
//! with an in-memory request payload instead of a TCP socket and each
//! response body (the socket's outbox) drained by a task, as actix-http's
//! dispatcher would. Every socket subscribes with a real `subscribe` frame.
//! One iteration is one publish on the node's bridge, timed until every
//! one of the N outboxes has handed that frame over: hub lookup, `seq`,
//! history, one encoding, N gauge checks, N direct outbox pushes (no
//! actor mailbox since issue 10) and N pulls. No network.

use std::cell::Cell;
use std::hint::black_box;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::body::MessageBody;
use actix_web::dev::Payload;
use actix_web::error::PayloadError;
use actix_web::{App, test, web};
use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use tidegate::Node;
use tidegate::hub::{DirectSink, HistoryLimits, Hub, OutboundGauge, Sink, Subscriber};
use tidegate::metrics::Metrics;
use tidegate_bench::target::{self, Who};
use tidegate_bench::ws::{OP_TEXT, encode_frame};

/// The load generator's bench config, with heartbeats out of the way (a
/// ping in the middle of a measurement would be counted as a delivery).
const NO_HEARTBEAT: &str = r#"
[socket]
heartbeat_interval_ms = 3600000
client_timeout_ms = 7200000
"#;

type Inbound = Pin<Box<dyn futures_util::Stream<Item = Result<Bytes, PayloadError>>>>;

struct Fleet {
    sys: actix_rt::SystemRunner,
    node: Arc<Node>,
    frames: Rc<Cell<u64>>,
    n: u64,
    /// Keeps each socket's inbound side open.
    _inbound: Vec<tokio::sync::mpsc::UnboundedSender<Result<Bytes, PayloadError>>>,
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
            let data = web::Data::new(node.clone());
            let app = test::init_service(
                App::new()
                    .app_data(data)
                    .configure(tidegate::server::routes),
            )
            .await;
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
                let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
                let stream = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
                let req = test::TestRequest::get()
                    .uri("/v1/ws")
                    .insert_header(("upgrade", "websocket"))
                    .insert_header(("connection", "upgrade"))
                    .insert_header(("sec-websocket-version", "13"))
                    .insert_header(("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="))
                    .insert_header((
                        "sec-websocket-protocol",
                        format!("tidegate.v1, bearer.{token}"),
                    ))
                    .peer_addr("127.0.0.1:40000".parse().unwrap())
                    .to_request();
                let boxed: Inbound = Box::pin(stream);
                let (req, _) = req.replace_payload(Payload::from(boxed));
                let res = test::call_service(&app, req).await;
                assert_eq!(res.status().as_u16(), 101, "socket {i} was refused");
                let mut body = res.into_body();
                let frames = frames.clone();
                actix_rt::spawn(async move {
                    while let Some(Ok(_)) =
                        std::future::poll_fn(|cx| Pin::new(&mut body).poll_next(cx)).await
                    {
                        frames.set(frames.get() + 1);
                    }
                });
                let mut sub = Vec::new();
                encode_frame(
                    OP_TEXT,
                    br#"{"type":"subscribe","channel":"doc:bench","id":1}"#,
                    0x5a5a_5a5a,
                    &mut sub,
                );
                tx.send(Ok(Bytes::from(sub))).expect("inbound open");
                inbound.push(tx);
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
    fn message(&self, _: &Arc<str>, _: u64, _: Bytes, _: Option<&Arc<str>>) {}
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
