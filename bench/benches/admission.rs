//! The whole admission check of one inbound frame, as the socket runs it
//! (`socket/actor/handle.rs`, `on_text`, through the charge primitive
//! `tidegate::charge::Ledger::charge` with the connection as the payer),
//! measured on exactly what the target (< 100 ns) names:
//!
//! - `check/*`: the per-frame check once the frame is parsed: read the
//!   clock, price the frame from the plan's cost table, refuse a price
//!   above `costs.max_single`, charge the per-connection message bucket
//!   and the byte bucket, check the plan's rules, count the admitted units
//!   in the account `Sampler` and, every 25th unit, charge the shared
//!   account bucket; then the token's publish grant. Dry-run flags are off
//!   (the default), so every limit enforces.
//!   - `check/defaults`: the shipped `free` plan (no rules configured) plus
//!     a byte budget;
//!   - `check/every_limit`: the same plus the rules from `config.toml`'s
//!     commented example (per-document channel rule) and a per-connection
//!     rule, i.e. every kind of limit the broker has, on.
//! - `frame/*`: UTF-8 validation + JSON parse + `check/every_limit`:
//!   everything between the WebSocket layer handing over a text frame and
//!   the operation.
//!
//! Budgets are raised so the bench measures the admitting path (a refused
//! frame stops at the first empty bucket and is cheaper). The account
//! bucket is a `SampledBucket` behind a lock, as the single-node account
//! supervisor holds it; the actor message that carries a sampled charge
//! there (one per 25 frames) is not included.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use parking_lot::Mutex;
use tidegate::account::Sampler;
use tidegate::auth::{Claims, Grants};
use tidegate::charge::{Admission, Connection, Ledger, Payer, Pending, Price};
use tidegate::cluster::MemoryBridge;
use tidegate::config::Limits;
use tidegate::hub::{HistoryLimits, Hub};
use tidegate::limiter::SampledBucket;
use tidegate::metrics::Metrics;
use tidegate::protocol::{ClientFrame, frames};
use tidegate::rules::{ConnRules, RuleBuckets};

/// Raised budgets, a byte limit, and (for `every_limit`) two rules.
const PLAN: &str = r#"
[plans.free]
messages_per_sec = 1000000000.0
burst = 1000000000
bytes_per_sec = 1000000000000
bytes_burst = 1000000000000
"#;

const RULES: &str = r#"
[[plans.free.rules]]
id = "per-document"
track_by = "channel"
capacity = 1000000000
window_ms = 10000
namespace = "doc"
ops = ["publish"]

[[plans.free.rules]]
id = "per-connection-publish"
track_by = "connection"
capacity = 1000000000
window_ms = 1000
ops = ["publish"]
"#;

struct Check {
    limits: Arc<Limits>,
    metrics: Arc<Metrics>,
    bridge: MemoryBridge,
    admission: Admission,
    grants: Grants,
    sampler: Sampler,
    account: Arc<Mutex<SampledBucket>>,
    shared_rules: RuleBuckets,
    conn_rules: ConnRules,
}

impl Check {
    fn new(with_rules: bool) -> Check {
        let layers: &[&str] = if with_rules { &[PLAN, RULES] } else { &[PLAN] };
        // The shipped config.toml with these layers merged over it.
        let (_, config) = tidegate_bench::target::tidegate_config(layers).expect("bench config");
        let limits = config.limits_for("acme", None).expect("free plan");
        assert!(limits.dry_run.is_empty(), "every limit enforces");
        assert_eq!(limits.rules.len(), if with_rules { 2 } else { 0 });
        let claims = Claims {
            sub: "acme".into(),
            exp: u64::MAX,
            plan: None,
            role: None,
            sub_channels: vec!["doc:*".into()],
            pub_channels: vec!["doc:*".into(), "presence:*".into()],
            info: None,
        };
        let now = Instant::now();
        let metrics = Arc::new(Metrics::new());
        let hub = Arc::new(Hub::new(
            HistoryLimits {
                size: 0,
                ttl: Duration::ZERO,
                max_bytes: usize::MAX,
            },
            metrics.clone(),
        ));
        Check {
            bridge: MemoryBridge::new(hub),
            metrics,
            sampler: Sampler::new(limits.account_sample_every),
            admission: Admission::new(limits.clone(), now),
            account: Arc::new(Mutex::new(SampledBucket::new(1e12, 1e12, now))),
            grants: claims.grants(),
            shared_rules: RuleBuckets::default(),
            conn_rules: ConnRules::default(),
            limits,
        }
    }

    #[inline]
    fn run(&mut self, frame: &ClientFrame<'_>, len: usize) -> bool {
        let now = Instant::now();
        let units = self.admission.price(frame, |_| 0);
        let price = Price::frame(units, len, &self.limits, frame.channel());
        let payer = Payer::Connection(Connection {
            admission: &mut self.admission,
            sampler: Some(&mut self.sampler),
            rules: frame.op().map(|op| (op, &mut self.conn_rules)),
            account: "acme",
            conn: "n1-0001",
        });
        let ledger = Ledger::new(&self.metrics, &self.bridge, &self.shared_rules);
        let Pending::Ready(Ok(admitted)) = ledger.charge(payer, price, now) else {
            return false;
        };
        if let Some(sample) = admitted.sample
            && self
                .account
                .lock()
                .charge(f64::from(sample.units), sample.since, now)
                .is_err()
        {
            return false;
        }
        match frame {
            ClientFrame::Publish { channel, .. } => self.grants.publish.matches(channel),
            ClientFrame::Subscribe { channel, .. } => self.grants.subscribe.matches(channel),
            _ => true,
        }
    }
}

fn frame_text(size: usize) -> String {
    format!(
        r#"{{"type":"publish","channel":"doc:42","id":17,"data":"{}"}}"#,
        "x".repeat(size)
    )
}

fn admission(c: &mut Criterion) {
    let mut g = c.benchmark_group("admission");
    let text = frame_text(64);
    let frame = frames::parse(&text, 32).expect("valid frame");
    for (name, with_rules) in [("defaults", false), ("every_limit", true)] {
        let mut check = Check::new(with_rules);
        assert!(check.run(&frame, text.len()), "the bench frame is admitted");
        g.bench_function(BenchmarkId::new("check", name), |b| {
            b.iter(|| black_box(check.run(black_box(&frame), text.len())))
        });
    }
    let mut check = Check::new(true);
    for size in [64usize, 1024] {
        let bytes = frame_text(size).into_bytes();
        g.bench_with_input(BenchmarkId::new("frame", size), &bytes, |b, bytes| {
            b.iter(|| {
                let Ok(text) = std::str::from_utf8(black_box(bytes)) else {
                    return false;
                };
                match frames::parse(text, 32) {
                    Ok(frame) => check.run(&frame, bytes.len()),
                    Err(_) => false,
                }
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = admission
}
criterion_main!(benches);
