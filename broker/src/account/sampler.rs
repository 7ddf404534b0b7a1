//! The socket's side of the sampled account budget: count admitted units,
//! and every `every` units tell the caller to charge the account `every`
//! units at once (seed 000: one store call per sample, charged in full so
//! the accounting is conservative).
//!
//! Overshoot: a socket has at most `every - 1` admitted units not yet
//! charged, so an account with S sockets can exceed its budget by at most
//! S × (every − 1) units before the breach is seen (plus charges in flight).

#[derive(Debug, Clone)]
pub struct Sampler {
    every: u32,
    pending: u32,
}

impl Sampler {
    pub fn new(every: u32) -> Sampler {
        Sampler {
            every: every.max(1),
            pending: 0,
        }
    }

    /// Adds admitted units; returns how many units to charge now (a
    /// multiple of `every`, usually 0).
    #[inline]
    pub fn admit(&mut self, units: u32) -> u32 {
        self.pending += units;
        if self.pending < self.every {
            return 0;
        }
        let charge = self.pending - self.pending % self.every;
        self.pending -= charge;
        charge
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

    use super::*;
    use crate::limiter::TokenBucket;

    #[test]
    fn charges_in_full_samples() {
        let mut s = Sampler::new(25);
        let charged: u32 = (0..24).map(|_| s.admit(1)).sum();
        assert_eq!((charged, s.pending()), (0, 24));
        assert_eq!(s.admit(1), 25);
        assert_eq!(s.admit(30), 25, "a 30-unit op charges one sample now");
        assert_eq!(s.pending(), 5);
    }

    /// S sockets flood an account sharing one bucket; count what gets
    /// admitted before the first refused charge. The overshoot over what the
    /// bucket allowed is at most S × (every − 1).
    #[test]
    fn overshoot_is_at_most_every_minus_one_per_socket() {
        for sockets in [1usize, 8, 12] {
            let t0 = Instant::now();
            let every = 25;
            let mut bucket = TokenBucket::new(200.0, 100.0, t0);
            let mut samplers = vec![Sampler::new(every); sockets];
            let mut admitted = 0u64;
            let mut charged = 0u64;
            let mut t = t0;
            'flood: loop {
                // Round-robin, one message per socket every 100 µs.
                for s in &mut samplers {
                    t += Duration::from_micros(100);
                    admitted += 1;
                    let c = s.admit(1);
                    if c > 0 {
                        if bucket.try_take(f64::from(c), t).is_err() {
                            break 'flood;
                        }
                        charged += u64::from(c);
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
