//! Token bucket take and refill, and the sampled account charge.
//!
//! The sampled account charge is the broker's own `account::Sampler` (a
//! per-socket count of admitted units; every `account_sample_every`
//! units it asks for one charge of that many) plus the charge itself on a
//! shared account bucket (`SampledBucket` behind a lock: the bucket the
//! single-node account supervisor holds; the actor message that carries
//! the charge there, once per 25 messages, and a cluster's Redis round
//! trip are not part of this number).

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use parking_lot::Mutex;
use tidegate::account::Sampler;
use tidegate::limiter::{SampledBucket, TokenBucket};

fn token_bucket(c: &mut Criterion) {
    let mut g = c.benchmark_group("token_bucket");
    let t0 = Instant::now();

    // Take at a fixed `now`: the bucket never needs a refill computation.
    let mut full = TokenBucket::new(1e12, 1e12, t0);
    g.bench_function("take", |b| {
        b.iter(|| black_box(full.try_take(black_box(1.0), t0)))
    });

    // `now` moves 1 µs per call: every take refills first.
    let mut refilling = TokenBucket::new(20.0, 1e6, t0);
    let mut t = t0;
    g.bench_function("take_with_refill", |b| {
        b.iter(|| {
            t += Duration::from_micros(1);
            black_box(refilling.try_take(black_box(1.0), t))
        })
    });

    // An empty bucket: the refusal path computes the wait.
    let mut empty = TokenBucket::new(20.0, 20.0, t0);
    let _ = empty.try_take(20.0, t0);
    g.bench_function("refused", |b| {
        b.iter(|| black_box(empty.try_take(black_box(1.0), t0)))
    });

    // As the socket does it: reading the clock is part of the cost.
    let mut clocked = TokenBucket::new(1e12, 1e12, t0);
    g.bench_function("take_with_clock", |b| {
        b.iter(|| black_box(clocked.try_take(black_box(1.0), Instant::now())))
    });
    g.finish();
}

fn account_charge(c: &mut Criterion) {
    let mut g = c.benchmark_group("account_charge");
    let t0 = Instant::now();
    // The free plan's account budget (100/s, burst 200) would refuse
    // within microseconds; raise it so the bench measures charges.
    let account = Mutex::new(SampledBucket::new(1e12, 1e12, t0));

    g.bench_function("shared_bucket_charge", |b| {
        b.iter(|| black_box(account.lock().charge(black_box(25.0), t0, t0)))
    });

    // Per admitted message: the sampler, and every 25th message the
    // shared charge (the amortised cost a socket pays).
    let mut sampler = Sampler::new(25);
    g.bench_function("sampled_per_message", |b| {
        b.iter(|| {
            if let Some(s) = sampler.admit(black_box(1), t0) {
                black_box(account.lock().charge(f64::from(s.units), s.since, t0)).ok();
            }
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = token_bucket, account_charge
}
criterion_main!(benches);
