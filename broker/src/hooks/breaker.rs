//! A hook's breaker (§15): `breaker_failures` consecutive failures open
//! it for `breaker_open_ms`, during which calls fail at once; then one
//! call probes, and while it is in flight the others fail at once too.
//! Pure: it takes `now`, so it is tested without sleeping.

use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Closed,
    Open { until: Instant },
    Probing,
}

/// What the breaker says of a call about to be made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Make it.
    Call,
    /// Make it: it is the probe; its outcome closes or reopens the breaker.
    Probe,
    /// Do not: fail at once; worth trying again after this long.
    Refuse(Duration),
}

#[derive(Debug, Clone)]
pub struct Breaker {
    failures: u32,
    state: State,
    threshold: u32,
    open_for: Duration,
}

impl Breaker {
    pub fn new(threshold: u32, open_for: Duration) -> Breaker {
        Breaker {
            failures: 0,
            state: State::Closed,
            threshold: threshold.max(1),
            open_for,
        }
    }

    pub fn admit(&mut self, now: Instant) -> Admit {
        match self.state {
            State::Closed => Admit::Call,
            State::Open { until } if now >= until => {
                self.state = State::Probing;
                Admit::Probe
            }
            State::Open { until } => Admit::Refuse(until - now),
            // The probe decides soon (its timeout bounds it).
            State::Probing => Admit::Refuse(self.open_for),
        }
    }

    /// An answer came: the breaker closes.
    pub fn success(&mut self) {
        self.failures = 0;
        self.state = State::Closed;
    }

    /// A failure (or a call not made for want of a token or a slot).
    /// Returns whether the breaker is open now.
    pub fn failure(&mut self, now: Instant) -> bool {
        self.failures = self.failures.saturating_add(1);
        if self.state == State::Probing || self.failures >= self.threshold {
            self.state = State::Open {
                until: now + self.open_for,
            };
        }
        self.is_open()
    }

    /// Open or probing: calls are not reaching the backend freely.
    pub fn is_open(&self) -> bool {
        self.state != State::Closed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_consecutive_failures_then_probes_once() {
        let t0 = Instant::now();
        let mut b = Breaker::new(3, Duration::from_secs(5));
        assert_eq!(b.admit(t0), Admit::Call);
        assert!(!b.failure(t0));
        b.success();
        assert!(!b.failure(t0));
        assert!(!b.failure(t0));
        assert!(b.failure(t0), "the third consecutive failure opens it");
        assert_eq!(
            b.admit(t0 + Duration::from_secs(1)),
            Admit::Refuse(Duration::from_secs(4))
        );
        let later = t0 + Duration::from_secs(5);
        assert_eq!(b.admit(later), Admit::Probe);
        assert!(
            matches!(b.admit(later), Admit::Refuse(_)),
            "others fail while the probe is in flight"
        );
        assert!(b.failure(later), "a failed probe reopens it");
        assert!(matches!(b.admit(later), Admit::Refuse(_)));
        let again = later + Duration::from_secs(5);
        assert_eq!(b.admit(again), Admit::Probe);
        b.success();
        assert!(!b.is_open());
        assert_eq!(b.admit(again), Admit::Call);
    }
}
