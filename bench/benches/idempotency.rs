//! What the node's idempotency table (§17) costs one keyed publish: the
//! look a front makes to price it (`seen`), the claim, and the answer
//! (`done`), each with a key never used before, as the load generator's
//! `keyed-publish` sends them.
//!
//! Two table states: filling (far under `idempotency_max_keys`, as a
//! node's first minutes) and full (at the default cap of 100,000 keys,
//! where every claim makes room by evicting the oldest, whose memory is
//! cold). The difference between the two is what eviction costs.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use criterion::{Criterion, criterion_group, criterion_main};
use tidegate::idempotency::{Claim, Idempotency, Keyed};
use tidegate::metrics::idempotency::IdempotencyMetrics;

/// The shipped `idempotency_max_keys`.
const DEFAULT_MAX_KEYS: u64 = 100_000;
/// Five minutes: nothing expires during a run.
const WINDOW_MS: u64 = 300_000;

fn table(max_keys: u64) -> Arc<Idempotency> {
    Idempotency::new(WINDOW_MS, max_keys, Arc::new(IdempotencyMetrics::default()))
}

/// One keyed publish's table work: priced, claimed, answered.
fn publish(t: &Arc<Idempotency>, key: &str, seq: u64, now: Instant) {
    let keyed = Keyed {
        publisher: "bench_backend",
        key,
    };
    let scope = keyed.on("doc:keyed");
    black_box(t.seen(scope, now));
    match t.claim(scope, now) {
        Claim::First(first) => first.done(seq, now),
        other => panic!("a fresh key was held: {other:?}"),
    }
}

fn keyed_publish(c: &mut Criterion) {
    let mut g = c.benchmark_group("idempotency");
    let now = Instant::now();
    let mut key = String::with_capacity(32);
    let mut n = 0u64;
    let mut next = |key: &mut String| {
        use std::fmt::Write;
        n += 1;
        key.clear();
        let _ = write!(key, "bench-{n}");
        n
    };

    // Far under the cap: no eviction (the cap is out of reach of the
    // iterations criterion runs).
    let filling = table(u64::MAX);
    g.bench_function("seen_claim_done_filling", |b| {
        b.iter(|| {
            let seq = next(&mut key);
            publish(&filling, &key, seq, now)
        })
    });
    drop(filling);

    // At the cap: every claim past it evicts (in batches) the oldest keys.
    let full = table(DEFAULT_MAX_KEYS);
    for _ in 0..DEFAULT_MAX_KEYS + 1_000 {
        let seq = next(&mut key);
        publish(&full, &key, seq, now);
    }
    g.bench_function("seen_claim_done_full", |b| {
        b.iter(|| {
            let seq = next(&mut key);
            publish(&full, &key, seq, now)
        })
    });

    g.finish();
}

criterion_group!(benches, keyed_publish);
criterion_main!(benches);
