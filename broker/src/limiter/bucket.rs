//! A continuously refilling token bucket with fractional costs.

use std::time::{Duration, Instant};

/// `capacity` tokens, refilled at `rate` tokens per second, starting full.
///
/// Costs are `f64` so the same type serves message counts, byte counts and
/// weighted operation prices.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    capacity: f64,
    rate: f64,
    tokens: f64,
    updated: Instant,
}

impl TokenBucket {
    pub fn new(capacity: f64, rate_per_sec: f64, now: Instant) -> TokenBucket {
        TokenBucket {
            capacity,
            rate: rate_per_sec,
            tokens: capacity,
            updated: now,
        }
    }

    pub fn capacity(&self) -> f64 {
        self.capacity
    }

    pub fn rate(&self) -> f64 {
        self.rate
    }

    fn refill(&mut self, now: Instant) {
        if now > self.updated {
            let dt = (now - self.updated).as_secs_f64();
            self.tokens = (self.tokens + dt * self.rate).min(self.capacity);
            self.updated = now;
        }
    }

    /// Takes `cost` tokens if they are there; otherwise takes nothing and
    /// says how long until they would be.
    #[inline]
    pub fn try_take(&mut self, cost: f64, now: Instant) -> Result<(), Duration> {
        self.refill(now);
        if self.tokens >= cost {
            self.tokens -= cost;
            Ok(())
        } else {
            Err(self.wait_for(cost))
        }
    }

    /// Time until `cost` tokens are available (zero if they are now).
    /// A cost above the capacity waits for a full bucket and then some:
    /// callers refuse such costs up front (`cost_exceeds_max`).
    pub fn wait_for(&self, cost: f64) -> Duration {
        let missing = cost - self.tokens;
        if missing <= 0.0 {
            return Duration::ZERO;
        }
        Duration::try_from_secs_f64(missing / self.rate).unwrap_or(Duration::MAX)
    }

    /// Time until at least `cost` tokens are there, as seen at `now`.
    pub fn wait_at(&mut self, cost: f64, now: Instant) -> Duration {
        self.refill(now);
        self.wait_for(cost)
    }

    /// Whole-or-fractional tokens left at `now`.
    pub fn remaining(&mut self, now: Instant) -> f64 {
        self.refill(now);
        self.tokens
    }

    /// Time until the bucket is full again.
    pub fn time_to_full(&mut self, now: Instant) -> Duration {
        self.refill(now);
        self.wait_for(self.capacity)
    }

    /// Gives back tokens taken for an operation that a later check refused.
    pub fn refund(&mut self, cost: f64) {
        self.tokens = (self.tokens + cost).min(self.capacity);
    }

    /// Takes `cost` even if it drives the balance negative: for charges
    /// that already happened (a sampled account charge that overshot).
    pub fn force_take(&mut self, cost: f64, now: Instant) {
        self.refill(now);
        self.tokens -= cost;
    }

    /// New capacity and rate (a config reload), keeping the balance (capped
    /// at the new capacity) so a reload neither grants nor revokes a burst.
    pub fn reconfigure(&mut self, capacity: f64, rate_per_sec: f64, now: Instant) {
        self.refill(now);
        self.capacity = capacity;
        self.rate = rate_per_sec;
        self.tokens = self.tokens.min(capacity);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn starts_full_and_empties_after_burst() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(20.0, 20.0, t0);
        for _ in 0..20 {
            assert!(b.try_take(1.0, t0).is_ok());
        }
        let wait = b.try_take(1.0, t0).unwrap_err();
        assert_eq!(wait, ms(50), "one token at 20/s is 50 ms away");
    }

    #[test]
    fn refills_continuously_and_caps_at_capacity() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(20.0, 20.0, t0);
        b.try_take(20.0, t0).unwrap();
        assert!(b.try_take(1.0, t0 + ms(49)).is_err());
        assert!(b.try_take(1.0, t0 + ms(51)).is_ok());
        assert_eq!(b.remaining(t0 + ms(60_000)), 20.0);
    }

    #[test]
    fn typist_at_8_per_sec_with_30_per_sec_bursts_is_never_limited() {
        // Seed 000: 8 msg/s while typing, 30 msg/s during a paste burst,
        // under a 20/s burst-20 budget. Simulate 10 s of typing, then a
        // one-second burst of 30, then typing again.
        let t0 = Instant::now();
        let mut b = TokenBucket::new(20.0, 20.0, t0);
        let mut t = t0;
        for _ in 0..80 {
            t += ms(125);
            assert!(b.try_take(1.0, t).is_ok());
        }
        for _ in 0..30 {
            t += ms(33);
            assert!(b.try_take(1.0, t).is_ok(), "burst must fit");
        }
        for _ in 0..40 {
            t += ms(125);
            assert!(b.try_take(1.0, t).is_ok());
        }
    }

    #[test]
    fn runaway_loop_is_held_to_the_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(20.0, 20.0, t0);
        let mut admitted = 0;
        // 4,000 msg/s for one second.
        for i in 0..4000u64 {
            if b.try_take(1.0, t0 + Duration::from_micros(i * 250)).is_ok() {
                admitted += 1;
            }
        }
        assert!(
            (38..=41).contains(&admitted),
            "burst + 1 s of refill, got {admitted}"
        );
    }

    #[test]
    fn failed_take_takes_nothing_and_refund_restores() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(10.0, 1.0, t0);
        b.try_take(8.0, t0).unwrap();
        assert!(b.try_take(5.0, t0).is_err());
        assert_eq!(b.remaining(t0), 2.0);
        b.refund(8.0);
        assert_eq!(b.remaining(t0), 10.0, "refund caps at capacity");
    }

    #[test]
    fn reconfigure_keeps_balance_within_new_capacity() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(20.0, 20.0, t0);
        b.try_take(5.0, t0).unwrap();
        b.reconfigure(10.0, 5.0, t0);
        assert_eq!(b.remaining(t0), 10.0);
        b.try_take(10.0, t0).unwrap();
        assert_eq!(b.wait_at(1.0, t0), ms(200));
    }

    #[test]
    fn time_to_full_and_negative_balance() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(100.0, 50.0, t0);
        b.force_take(125.0, t0);
        assert_eq!(b.remaining(t0), -25.0);
        assert_eq!(b.time_to_full(t0), ms(2500));
    }

    #[test]
    fn time_going_backwards_is_ignored() {
        let t0 = Instant::now() + ms(1000);
        let mut b = TokenBucket::new(2.0, 1.0, t0);
        b.try_take(2.0, t0).unwrap();
        assert!(b.try_take(1.0, t0 - ms(500)).is_err());
        assert!(b.try_take(1.0, t0 + ms(1000)).is_ok());
    }
}
