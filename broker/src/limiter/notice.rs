//! Throttles `rate_limited` frames to one per interval per socket while
//! making sure every dropped frame's `id` is reported exactly once.
//!
//! Sending one error per dropped frame would double the traffic of a flood
//! (seed 000: "error frames can amplify"). So the first drop after a quiet
//! interval is reported at once; later drops accumulate and go out together
//! when the interval has passed, including after the run of drops ends.

use std::time::{Duration, Instant};

use serde_json::value::RawValue;

/// When the caller should send the accumulated notice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    /// Send now ([`DropNotice::take`]).
    Now,
    /// Arrange a wake-up at this instant and call `take` then.
    At(Instant),
    /// A wake-up is already arranged.
    Scheduled,
}

/// What one `rate_limited` frame reports.
#[derive(Debug, Default)]
pub struct PendingNotice {
    pub dropped: u64,
    pub ids: Vec<Box<RawValue>>,
}

#[derive(Debug)]
pub struct DropNotice {
    interval: Duration,
    last_sent: Option<Instant>,
    scheduled: bool,
    pending: PendingNotice,
}

impl DropNotice {
    pub fn new(interval: Duration) -> DropNotice {
        DropNotice {
            interval,
            last_sent: None,
            scheduled: false,
            pending: PendingNotice::default(),
        }
    }

    /// Records one dropped frame (with its `id`, if it had one).
    pub fn record(&mut self, id: Option<Box<RawValue>>, now: Instant) -> Due {
        self.pending.dropped += 1;
        if let Some(id) = id {
            self.pending.ids.push(id);
        }
        match self.last_sent {
            Some(last) if now < last + self.interval => {
                if self.scheduled {
                    Due::Scheduled
                } else {
                    self.scheduled = true;
                    Due::At(last + self.interval)
                }
            }
            _ => Due::Now,
        }
    }

    /// Ids waiting to be reported (the caller bounds this by pausing reads).
    pub fn pending_ids(&self) -> usize {
        self.pending.ids.len()
    }

    /// The notice to send now, if anything was dropped since the last one.
    pub fn take(&mut self, now: Instant) -> Option<PendingNotice> {
        self.scheduled = false;
        if self.pending.dropped == 0 {
            return None;
        }
        self.last_sent = Some(now);
        Some(std::mem::take(&mut self.pending))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u32) -> Option<Box<RawValue>> {
        Some(RawValue::from_string(n.to_string()).unwrap())
    }

    #[test]
    fn first_drop_is_reported_at_once_then_batched_per_interval() {
        let t0 = Instant::now();
        let sec = Duration::from_secs(1);
        let mut n = DropNotice::new(sec);
        assert_eq!(n.record(id(1), t0), Due::Now);
        let first = n.take(t0).unwrap();
        assert_eq!((first.dropped, first.ids.len()), (1, 1));

        let t1 = t0 + Duration::from_millis(10);
        assert_eq!(n.record(id(2), t1), Due::At(t0 + sec));
        assert_eq!(n.record(None, t1), Due::Scheduled);
        assert_eq!(n.record(id(3), t1), Due::Scheduled);
        // The run of drops ends; the scheduled wake-up reports the rest.
        let last = n.take(t0 + sec).unwrap();
        assert_eq!(last.dropped, 3);
        let ids: Vec<_> = last.ids.iter().map(|r| r.get().to_owned()).collect();
        assert_eq!(ids, ["2", "3"]);
        assert!(n.take(t0 + sec * 2).is_none(), "nothing new, nothing sent");
    }

    #[test]
    fn quiet_interval_resets_to_immediate() {
        let t0 = Instant::now();
        let mut n = DropNotice::new(Duration::from_secs(1));
        n.record(id(1), t0);
        n.take(t0);
        assert_eq!(n.record(id(2), t0 + Duration::from_millis(1500)), Due::Now);
    }

    #[test]
    fn never_more_than_one_notice_per_interval() {
        let t0 = Instant::now();
        let mut n = DropNotice::new(Duration::from_secs(1));
        let mut sent = Vec::new();
        let mut wake: Option<Instant> = None;
        for i in 0..4000u32 {
            let now = t0 + Duration::from_micros(u64::from(i) * 500);
            if let Some(w) = wake
                && now >= w
            {
                wake = None;
                if n.take(w).is_some() {
                    sent.push(w);
                }
            }
            match n.record(id(i), now) {
                Due::Now => {
                    n.take(now);
                    sent.push(now);
                }
                Due::At(w) => wake = Some(w),
                Due::Scheduled => {}
            }
        }
        if let Some(w) = wake {
            n.take(w);
            sent.push(w);
        }
        for pair in sent.windows(2) {
            assert!(pair[1] - pair[0] >= Duration::from_secs(1));
        }
        assert_eq!(sent.len(), 3, "t=0, t=1s, t=2s (the tail)");
    }
}
