//! The primitive's outcomes for each payer, on the single-node bridge.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::cluster::MemoryBridge;
use crate::hub::{HistoryLimits, Hub};
use crate::protocol::glob::GlobSet;

struct Parts {
    metrics: Arc<Metrics>,
    bridge: MemoryBridge,
    rules: RuleBuckets,
}

fn parts() -> Parts {
    let metrics = Arc::new(Metrics::new());
    let history = HistoryLimits {
        size: 0,
        ttl: Duration::ZERO,
        max_bytes: usize::MAX,
    };
    let hub = Arc::new(Hub::new(history, metrics.clone()));
    Parts {
        bridge: MemoryBridge::new(hub),
        metrics,
        rules: RuleBuckets::default(),
    }
}

impl Parts {
    fn ledger(&self) -> Ledger<'_> {
        Ledger::new(&self.metrics, &self.bridge, &self.rules)
    }

    fn rejections(&self, layer: &str, reason: &str) -> u64 {
        self.metrics
            .rejection_totals()
            .into_iter()
            .find(|(l, r, _)| *l == layer && *r == reason)
            .map_or(0, |(_, _, n)| n)
    }
}

fn ready(p: Pending<'_, Outcome>) -> Outcome {
    match p {
        Pending::Ready(o) => o,
        Pending::Later(_) => panic!("single-node charges answer at once"),
    }
}

fn small_plan() -> Limits {
    Limits {
        account_burst: 3,
        account_messages_per_sec: 1.0,
        ..Limits::default()
    }
}

#[test]
fn a_key_pays_until_empty_then_is_refused_with_its_wait_and_balance() {
    let p = parts();
    let limits = small_plan();
    let key = KeyState {
        account: "acme".into(),
        publish: GlobSet::new(&["*"]),
        subscribe: GlobSet::new::<&str>(&[]),
        id: "k1".into(),
    };
    let payer = || Payer::Key {
        layer: Layer::Http,
        key: &key,
        limits: &limits,
    };
    let now = Instant::now();
    let first = ready(p.ledger().charge(payer(), Price::units(2, None), now)).unwrap();
    assert_eq!(first.balance.map(|b| (b.limit, b.remaining)), Some((3, 1)));
    let refused = ready(p.ledger().charge(payer(), Price::units(2, None), now)).unwrap_err();
    assert_eq!(refused.reason, Reason::RateLimited);
    assert!(refused.retry_after > Duration::ZERO, "a wait that can help");
    assert_eq!(
        refused.balance.map(|b| b.remaining),
        Some(1),
        "nothing taken"
    );
    assert_eq!(
        p.rejections("http", "rate_limited"),
        1,
        "counted once, here"
    );
}

#[test]
fn a_price_over_the_single_charge_is_refused_before_any_bucket() {
    let p = parts();
    let limits = small_plan();
    let payer = Payer::Account {
        layer: Layer::Grpc,
        account: "acme",
        limits: &limits,
    };
    let price = Price {
        max_single: Some(2),
        ..Price::units(3, None)
    };
    let refused = ready(p.ledger().charge(payer, price, Instant::now())).unwrap_err();
    assert_eq!(refused.reason, Reason::CostExceedsMax { cost: 3, max: 2 });
    assert_eq!(refused.retry_after, Duration::ZERO);
    assert_eq!(p.rejections("grpc", "cost_exceeds_max"), 1);
    // The account's budget is whole: the whole burst still fits.
    let payer = Payer::Account {
        layer: Layer::Grpc,
        account: "acme",
        limits: &limits,
    };
    let taken = ready(
        p.ledger()
            .charge(payer, Price::units(3, None), Instant::now()),
    );
    assert!(taken.is_ok(), "{taken:?}");
}

#[test]
fn a_connection_is_charged_synchronously_and_samples_for_its_account() {
    let p = parts();
    let limits = Arc::new(Limits {
        burst: 2,
        account_sample_every: 2,
        ..Limits::default()
    });
    let now = Instant::now();
    let mut admission = Admission::new(limits.clone(), now);
    let mut sampler = Sampler::new(limits.account_sample_every);
    let charge = |admission: &mut Admission, sampler: &mut Sampler, price| {
        let payer = Payer::Connection(Connection {
            admission,
            sampler: Some(sampler),
            rules: None,
            account: "acme",
            conn: "n1-0001",
        });
        ready(p.ledger().charge(payer, price, now))
    };
    let price = Price::frame(1, 10, &limits, Some("doc:1"));
    let first = charge(&mut admission, &mut sampler, price).unwrap();
    assert_eq!(first.sample, None);
    let second = charge(&mut admission, &mut sampler, price).unwrap();
    assert_eq!(second.sample.map(|s| s.units), Some(2), "every 2nd unit");
    let third = charge(&mut admission, &mut sampler, price).unwrap_err();
    assert_eq!(third.reason, Reason::RateLimited);
    assert_eq!(p.rejections("connection", "rate_limited"), 1);
    // Owed units are taken from the empty bucket all the same, and sampled
    // (an SSE stream's opening); the next frame waits for the refill.
    let owed = charge(&mut admission, &mut sampler, Price::owed(5)).unwrap();
    assert_eq!(owed.sample.map(|s| s.units), Some(4), "every 2nd unit");
    assert_eq!(admission.balance(now).0, -5.0);
    charge(&mut admission, &mut sampler, price).unwrap_err();
    assert_eq!(p.rejections("connection", "rate_limited"), 2);
}

#[test]
fn graphql_refunds_to_either_bucket_and_its_dry_run_shadows_both() {
    let p = parts();
    let limits = Limits {
        dry_run: vec![crate::config::LimitName::Graphql],
        ..small_plan()
    };
    let key = KeyState {
        account: "acme".into(),
        publish: GlobSet::new(&["*"]),
        subscribe: GlobSet::new::<&str>(&[]),
        id: "k1".into(),
    };
    let payer_of = |by_key: bool| {
        if by_key {
            Payer::Key {
                layer: Layer::Graphql,
                key: &key,
                limits: &limits,
            }
        } else {
            Payer::Account {
                layer: Layer::Graphql,
                account: "acme",
                limits: &limits,
            }
        }
    };
    let now = Instant::now();
    for by_key in [true, false] {
        let payer = || payer_of(by_key);
        let taken = ready(p.ledger().charge(payer(), Price::units(3, None), now)).unwrap();
        assert_eq!(taken.balance.map(|b| b.remaining), Some(0));
        assert!(!taken.shadow);
        // Empty: shadowed, not refused; nothing was taken.
        let shadowed = ready(p.ledger().charge(payer(), Price::units(2, None), now)).unwrap();
        assert!(
            shadowed.shadow,
            "dry_run = [\"graphql\"] shadows this bucket"
        );
        assert_eq!(shadowed.balance.map(|b| b.remaining), Some(0));
        let Pending::Ready(left) = p.ledger().refund_to(payer(), 2) else {
            panic!("single-node refunds answer at once")
        };
        assert_eq!(left, 2, "the refund is in the bucket");
    }
    let text = p.metrics.encode();
    assert!(
        text.lines()
            .any(|l| l.starts_with("tidegate_dry_run_rejections_total{")
                && l.contains("layer=\"graphql\"")
                && l.contains("reason=\"rate_limited\"")
                && l.ends_with(" 2")),
        "{text}"
    );
    assert_eq!(
        p.rejections("graphql", "rate_limited"),
        0,
        "shadowed, not refused"
    );
    // Another layer's refusal of the same key is not shadowed by GraphQL's name.
    let http = Payer::Key {
        layer: Layer::Http,
        key: &key,
        limits: &limits,
    };
    let refused = ready(p.ledger().charge(http, Price::units(3, None), now)).unwrap_err();
    assert_eq!(refused.reason, Reason::RateLimited);
}
