//! Property tests of the limiter invariants, over generated sequences of
//! takes and clock steps (every limiter here is a pure function of the
//! `now` it is given, so the clock is just a generated number).

use std::time::{Duration, Instant};

use proptest::prelude::*;
use serde_json::value::RawValue;

use super::{DropNotice, Due, SampledBucket, Sampler, TokenBucket};

const EPS: f64 = 1e-6;

/// A clock that starts well after `Instant::now()` so generated steps can
/// also go backwards without underflowing.
struct Clock {
    base: Instant,
    ms: i64,
}

impl Clock {
    fn new() -> Clock {
        Clock {
            base: Instant::now() + Duration::from_secs(3600),
            ms: 0,
        }
    }

    fn step(&mut self, dt: i64) -> Instant {
        self.ms = (self.ms + dt).max(-1_000_000);
        self.at(self.ms)
    }

    fn at(&self, ms: i64) -> Instant {
        if ms >= 0 {
            self.base + Duration::from_millis(ms as u64)
        } else {
            self.base - Duration::from_millis(ms.unsigned_abs())
        }
    }
}

proptest! {
    /// Over any window (s, t] of any sequence of takes, refunds and clock
    /// steps (including steps back), what the bucket let through is at
    /// most burst + rate × (t − s).
    #[test]
    fn token_bucket_never_admits_more_than_burst_plus_refill(
        capacity in 1.0f64..500.0,
        rate in 0.5f64..1000.0,
        ops in prop::collection::vec((-200i64..1500, 0.01f64..60.0, 0u8..10), 1..250),
    ) {
        let mut clock = Clock::new();
        let mut bucket = TokenBucket::new(capacity, rate, clock.at(0));
        // (time in ms on the monotone clock, units admitted then)
        let mut admitted: Vec<(i64, f64)> = Vec::new();
        // The latest instant the bucket was given (refunds carry none).
        let mut seen = 0i64;
        for (dt, cost, kind) in ops {
            let now = clock.step(dt);
            if kind == 0 {
                // Undo the last admitted take (a later check refused it).
                if let Some(last) = admitted.iter_mut().rev().find(|(_, c)| *c > 0.0) {
                    bucket.refund(last.1);
                    last.1 = 0.0;
                }
                continue;
            }
            seen = seen.max(clock.ms);
            let t = seen;
            if bucket.try_take(cost, now).is_ok() {
                admitted.push((t, cost));
            }
            // Every window ending now.
            let mut sum = 0.0;
            for &(at, c) in admitted.iter().rev() {
                sum += c;
                let allowed = capacity + rate * (t - at) as f64 / 1000.0;
                prop_assert!(sum <= allowed + EPS, "{sum} admitted since {at} ms, {allowed} allowed at {t} ms");
            }
        }
    }

    /// S sockets charge one account in samples. Judged against the exact
    /// bucket (every unit charged when admitted): the account is refused
    /// only once the exact bucket is in debt (never early), and before the
    /// exact debt passes S × (sample − 1) plus one sample (never later
    /// than the documented overshoot). Also right after the first units,
    /// and after the bucket was forgotten once full.
    #[test]
    fn sampled_account_charge_is_exact_within_the_sampling_bound(
        sockets in 1usize..12,
        every in 1u32..40,
        capacity in 10.0f64..400.0,
        rate in 5.0f64..300.0,
        ops in prop::collection::vec((0usize..12, 0i64..3000, 1u32..4, 0u8..8), 1..400),
    ) {
        let mut clock = Clock::new();
        let t0 = clock.at(0);
        let mut samplers = vec![Sampler::new(every); sockets];
        // The account bucket is created by the first charge.
        let mut account: Option<SampledBucket> = None;
        let mut exact = TokenBucket::new(capacity, rate, t0);
        let max_units = 3.0;
        let bound = sockets as f64 * f64::from(every - 1) + f64::from(every) + max_units;
        for (socket, dt, units, sweep) in ops {
            let now = clock.step(dt);
            // A bucket that refilled is forgotten (swept, or expired in
            // Redis) and made again by the next charge.
            if sweep == 0 && account.as_ref().is_some_and(|b| b.is_idle(now)) {
                account = None;
            }
            exact.force_take(f64::from(units), now);
            let Some(sample) = samplers[socket % sockets].admit(units, now) else {
                prop_assert!(exact.remaining(now) >= -bound - EPS, "late: exact balance {}", exact.remaining(now));
                continue;
            };
            let bucket = account.get_or_insert_with(|| SampledBucket::new(capacity, rate, sample.since));
            if bucket.charge(f64::from(sample.units), sample.since, now).is_err() {
                let truth = exact.remaining(now);
                prop_assert!(truth < EPS, "early: refused with the exact balance at {truth}");
                break;
            }
            prop_assert!(exact.remaining(now) >= -bound - EPS, "late: exact balance {}", exact.remaining(now));
        }
    }

    /// Whatever the timing of drops and wake-ups, every dropped id goes out
    /// in exactly one notice, in order, and notices are an interval apart.
    #[test]
    fn drop_notice_reports_every_dropped_id_exactly_once(
        interval_ms in 1u64..2000,
        drops in prop::collection::vec((0i64..700, any::<bool>()), 1..300),
    ) {
        let mut clock = Clock::new();
        let interval = Duration::from_millis(interval_ms);
        let mut notice = DropNotice::new(interval);
        let mut wake: Option<Instant> = None;
        let (mut reported, mut recorded) = (Vec::new(), Vec::new());
        let (mut dropped_reported, mut dropped) = (0u64, 0u64);
        let mut sent: Vec<Instant> = Vec::new();
        let mut send = |n: &mut DropNotice, at: Instant, reported: &mut Vec<String>, total: &mut u64| {
            if let Some(p) = n.take(at) {
                *total += p.dropped;
                reported.extend(p.ids.iter().map(|r| r.get().to_owned()));
                sent.push(at);
            }
        };
        for (i, (dt, with_id)) in drops.into_iter().enumerate() {
            let now = clock.step(dt);
            if let Some(w) = wake.filter(|w| *w <= now) {
                wake = None;
                send(&mut notice, w, &mut reported, &mut dropped_reported);
            }
            dropped += 1;
            let id = with_id.then(|| RawValue::from_string(i.to_string()).unwrap());
            if with_id {
                recorded.push(i.to_string());
            }
            match notice.record(id, now) {
                Due::Now => send(&mut notice, now, &mut reported, &mut dropped_reported),
                Due::At(w) => {
                    prop_assert!(wake.is_none(), "a second wake-up was asked for");
                    wake = Some(w);
                }
                Due::Scheduled => prop_assert!(wake.is_some(), "no wake-up is arranged"),
            }
        }
        if let Some(w) = wake {
            send(&mut notice, w, &mut reported, &mut dropped_reported);
        }
        prop_assert_eq!(reported, recorded);
        prop_assert_eq!(dropped_reported, dropped);
        for pair in sent.windows(2) {
            prop_assert!(pair[1] - pair[0] >= interval, "two notices within an interval");
        }
    }
}
