//! An endpoint's health (§9): `healthy` until a failure, `failing` while
//! failures go on, `unhealthy` once it has failed for `unhealthy_after`
//! without a success; then one probe per `probe_interval` until a
//! delivery succeeds. Also the full-jitter exponential backoff between
//! failed attempts.

use std::time::{Duration, Instant};

use crate::config::Pacing;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Healthy,
    Failing,
    Unhealthy,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Healthy => "healthy",
            Status::Failing => "failing",
            Status::Unhealthy => "unhealthy",
        }
    }
}

#[derive(Debug, Default, Clone)]
pub struct Health {
    /// When the current run of failures started.
    failing_since: Option<Instant>,
    /// Consecutive failed attempts (the backoff's exponent).
    failures: u32,
}

impl Health {
    pub fn status(&self, now: Instant, pacing: &Pacing) -> Status {
        match self.failing_since {
            None => Status::Healthy,
            Some(t) if now.saturating_duration_since(t) >= pacing.unhealthy_after => {
                Status::Unhealthy
            }
            Some(_) => Status::Failing,
        }
    }

    pub fn success(&mut self) {
        self.failing_since = None;
        self.failures = 0;
    }

    /// A failed attempt; returns how long the endpoint waits before its
    /// next attempt: the backoff, or the probe interval once unhealthy.
    pub fn failure(&mut self, now: Instant, pacing: &Pacing) -> Duration {
        self.failing_since.get_or_insert(now);
        self.failures = self.failures.saturating_add(1);
        if self.status(now, pacing) == Status::Unhealthy {
            pacing.probe_interval
        } else {
            full_jitter(self.failures, pacing.backoff_base, pacing.backoff_max)
        }
    }

    /// The receiver asked for a pause (429/503 with `Retry-After`): not a
    /// success, so the failing clock runs, but no backoff on top.
    pub fn paused(&mut self, now: Instant) {
        self.failing_since.get_or_insert(now);
    }
}

/// A random wait in `[0, min(max, base * 2^(failures-1))]`: retries of
/// many senders spread out instead of arriving together.
pub fn full_jitter(failures: u32, base: Duration, max: Duration) -> Duration {
    let exp = failures.saturating_sub(1).min(30);
    let ceiling = base.saturating_mul(1u32 << exp).min(max);
    ceiling.mul_f64(rand::random::<f64>())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pacing() -> Pacing {
        Pacing {
            rate_per_sec: 1.0,
            burst: 1,
            max_in_flight: 1,
            timeout: Duration::from_secs(1),
            queue_max: 1,
            vacated_delay: Duration::ZERO,
            backoff_base: Duration::from_secs(1),
            backoff_max: Duration::from_secs(300),
            unhealthy_after: Duration::from_secs(600),
            probe_interval: Duration::from_secs(60),
        }
    }

    #[test]
    fn healthy_failing_unhealthy_and_back() {
        let p = pacing();
        let t0 = Instant::now();
        let mut h = Health::default();
        assert_eq!(h.status(t0, &p), Status::Healthy);
        assert!(h.failure(t0, &p) <= Duration::from_secs(1));
        assert_eq!(h.status(t0, &p), Status::Failing);
        let later = t0 + Duration::from_secs(600);
        assert_eq!(h.failure(later, &p), Duration::from_secs(60));
        assert_eq!(h.status(later, &p), Status::Unhealthy);
        h.success();
        assert_eq!(h.status(later, &p), Status::Healthy);
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let (base, max) = (Duration::from_secs(1), Duration::from_secs(300));
        for _ in 0..100 {
            assert!(full_jitter(1, base, max) <= base);
            assert!(full_jitter(4, base, max) <= base * 8);
            assert!(full_jitter(40, base, max) <= max);
        }
    }
}
