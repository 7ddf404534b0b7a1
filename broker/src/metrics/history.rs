//! This node's counters sampled once per bucket, for the operators'
//! overview (§10): message rates and the rejection chart.

use std::collections::{HashMap, VecDeque};

use parking_lot::Mutex;

use super::Metrics;
use crate::clock::unix_ms;

/// The chart's bucket width.
pub const BUCKET_MS: u64 = 5_000;
/// Buckets kept: five minutes.
pub const BUCKETS: usize = 60;

/// Counter totals at one instant.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    pub at: u64,
    pub messages_in: u64,
    pub messages_out: u64,
    pub rejections: HashMap<(&'static str, &'static str), u64>,
}

impl Sample {
    /// The counters now.
    pub fn of(metrics: &Metrics) -> Sample {
        Sample {
            at: unix_ms(),
            messages_in: metrics.messages_in.get(),
            messages_out: metrics.messages_out.get(),
            rejections: metrics
                .rejection_totals()
                .into_iter()
                .map(|(l, r, n)| ((l, r), n))
                .collect(),
        }
    }
}

/// Samples of this node's counters, one per bucket (bounded: the last
/// [`BUCKETS`] + 1).
#[derive(Debug)]
pub struct History {
    samples: Mutex<VecDeque<Sample>>,
}

impl Default for History {
    /// Starts from zero: the node's counters start at zero with it, so
    /// nothing counted before the first tick is lost.
    fn default() -> Self {
        let zero = Sample {
            at: unix_ms(),
            ..Sample::default()
        };
        History {
            samples: Mutex::new(VecDeque::from([zero])),
        }
    }
}

impl History {
    /// Takes a sample (once per bucket, from the admin task).
    pub fn record(&self, metrics: &Metrics) {
        let mut s = self.samples.lock();
        s.push_back(Sample::of(metrics));
        while s.len() > BUCKETS + 1 {
            s.pop_front();
        }
    }

    /// A copy of the samples, oldest first.
    pub fn samples(&self) -> VecDeque<Sample> {
        self.samples.lock().clone()
    }
}
