//! The socket's side of the sampled account budget: count admitted units,
//! and every `every` units tell the caller to charge the account `every`
//! units at once (seed 000: one store call per sample, charged in full so
//! the accounting is conservative).
//!
//! Overshoot: a socket has at most `every - 1` admitted units not yet
//! charged, so an account with S sockets can exceed its budget by at most
//! S × (every − 1) units before the breach is seen (plus charges in flight).
//!
//! Each charge also says when its first unit was admitted, so the account
//! bucket can judge it as if it had been charged unit by unit
//! ([`super::SampledBucket`]): without that, a charge that arrives
//! while the bucket sits full loses the refill its units had made room for.

use std::time::Instant;

#[derive(Debug, Clone)]
pub struct Sampler {
    every: u32,
    pending: u32,
    /// When the first of the `pending` units was admitted.
    since: Option<Instant>,
}

/// One sampled charge: `units` admitted from `since` on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    pub units: u32,
    pub since: Instant,
}

impl Sampler {
    pub fn new(every: u32) -> Sampler {
        Sampler {
            every: every.max(1),
            pending: 0,
            since: None,
        }
    }

    /// Adds units admitted at `now`; returns the charge to make now (a
    /// multiple of `every`), usually none.
    #[inline]
    pub fn admit(&mut self, units: u32, now: Instant) -> Option<Sample> {
        if units == 0 {
            return None;
        }
        let since = *self.since.get_or_insert(now);
        self.pending += units;
        if self.pending < self.every {
            return None;
        }
        let charge = self.pending - self.pending % self.every;
        self.pending -= charge;
        // The units left over were admitted just now.
        self.since = (self.pending > 0).then_some(now);
        Some(Sample {
            units: charge,
            since,
        })
    }

    pub fn set_every(&mut self, every: u32) {
        self.every = every.max(1);
    }

    pub fn pending(&self) -> u32 {
        self.pending
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::super::SampledBucket;
    use super::*;

    #[test]
    fn charges_in_full_samples_from_the_first_unit() {
        let t0 = Instant::now();
        let at = |n: u64| t0 + Duration::from_millis(n);
        let mut s = Sampler::new(25);
        assert!((0..24).all(|i| s.admit(1, at(i)).is_none()));
        assert_eq!(s.pending(), 24);
        let first = s.admit(1, at(24)).unwrap();
        assert_eq!((first.units, first.since), (25, t0));
        let big = s.admit(30, at(30)).unwrap();
        assert_eq!(
            (big.units, big.since),
            (25, at(30)),
            "a 30-unit op charges one sample now"
        );
        assert_eq!(s.pending(), 5);
        assert_eq!(
            s.admit(20, at(40)).unwrap().since,
            at(30),
            "the 5 left over came at 30"
        );
    }

    /// S sockets flood an account sharing one bucket; count what gets
    /// admitted before the first refused charge. The overshoot over what the
    /// bucket allowed is at most S × (every − 1).
    #[test]
    fn overshoot_is_at_most_every_minus_one_per_socket() {
        for sockets in [1usize, 8, 12] {
            let t0 = Instant::now();
            let every = 25;
            let mut bucket = SampledBucket::new(200.0, 100.0, t0);
            let mut samplers = vec![Sampler::new(every); sockets];
            let mut admitted = 0u64;
            let mut charged = 0u64;
            let mut t = t0;
            'flood: loop {
                // Round-robin, one message per socket every 100 µs.
                for s in &mut samplers {
                    t += Duration::from_micros(100);
                    admitted += 1;
                    if let Some(c) = s.admit(1, t) {
                        if bucket.charge(f64::from(c.units), c.since, t).is_err() {
                            break 'flood;
                        }
                        charged += u64::from(c.units);
                    }
                }
            }
            let allowed = 200.0 + (t - t0).as_secs_f64() * 100.0;
            let overshoot = admitted as f64 - allowed;
            let bound = (sockets as u32 * (every - 1) + every) as f64;
            assert!(
                overshoot <= bound,
                "{sockets} sockets: overshoot {overshoot} > {bound}"
            );
            assert!(charged as f64 <= allowed);
        }
    }
}
