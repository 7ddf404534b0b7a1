//! Exceeded events: every refusal, drop and close for cause emits exactly
//! one structured `tracing` event (target `tidegate::exceeded`) and
//! increments `tidegate_rejections_total{layer,reason}` (or
//! `tidegate_dry_run_rejections_total` for a limit that only observes).
//!
//! Events are at DEBUG for the per-frame layers (a runaway loop produces
//! thousands a second; the metric is what to alert on) and INFO for the
//! rest, sampled: at most one INFO line per (layer, reason) a second, with
//! the number of events that went to DEBUG instead since the previous line
//! (`suppressed`), so one host refused in a loop cannot fill a disk (issue
//! 26). The metric counts every event. `RUST_LOG=tidegate::exceeded=debug`
//! shows them all.

use std::sync::LazyLock;
use std::time::{Duration, Instant};

use dashmap::DashMap;

use crate::metrics::{Layer, Metrics};

/// How often each (layer, reason) may log at INFO.
const LOG_PERIOD: Duration = Duration::from_secs(1);

/// The INFO lines' sampler, process-wide (logs are).
static SAMPLER: LazyLock<LogSampler> = LazyLock::new(|| LogSampler::new(LOG_PERIOD));

/// At most one line per key a period; counts what it held back.
#[derive(Debug)]
pub struct LogSampler {
    period: Duration,
    /// One window per (layer, reason): both come from the code (reasons
    /// are `&'static str`s), so the map is bounded by the code's names.
    windows: DashMap<(Layer, &'static str), Window>,
}

#[derive(Debug)]
struct Window {
    /// When the last line was logged (`None`: never).
    logged_at: Option<Instant>,
    suppressed: u64,
}

impl LogSampler {
    pub fn new(period: Duration) -> LogSampler {
        LogSampler {
            period,
            windows: DashMap::new(),
        }
    }

    /// Whether an event of `(layer, reason)` at `now` gets a line: `Some`
    /// with how many were held back since the previous line, or `None`
    /// (held back, and counted).
    pub fn admit(&self, layer: Layer, reason: &'static str, now: Instant) -> Option<u64> {
        let mut w = self.windows.entry((layer, reason)).or_insert(Window {
            logged_at: None,
            suppressed: 0,
        });
        let due = w
            .logged_at
            .is_none_or(|at| now.saturating_duration_since(at) >= self.period);
        if due {
            w.logged_at = Some(now);
            Some(std::mem::take(&mut w.suppressed))
        } else {
            w.suppressed += 1;
            None
        }
    }
}

/// What was refused, where, and when the limit resets.
#[derive(Debug, Clone, Copy)]
pub struct Exceeded<'a> {
    pub layer: Layer,
    pub reason: &'static str,
    pub account: &'a str,
    pub rule: Option<&'a str>,
    pub channel: Option<&'a str>,
    pub conn: Option<&'a str>,
    /// How many operations this event stands for (a batch, a sample).
    pub count: u64,
    /// Time until the limit would admit again (zero when not a rate).
    pub reset: Duration,
    /// The limit is in dry-run mode: nothing was refused.
    pub dry_run: bool,
}

impl<'a> Exceeded<'a> {
    pub fn new(layer: Layer, reason: &'static str, account: &'a str) -> Exceeded<'a> {
        Exceeded {
            layer,
            reason,
            account,
            rule: None,
            channel: None,
            conn: None,
            count: 1,
            reset: Duration::ZERO,
            dry_run: false,
        }
    }

    pub fn rule(mut self, rule: &'a str) -> Self {
        self.rule = Some(rule);
        self
    }

    pub fn channel(mut self, channel: &'a str) -> Self {
        self.channel = Some(channel);
        self
    }

    pub fn conn(mut self, conn: &'a str) -> Self {
        self.conn = Some(conn);
        self
    }

    pub fn count(mut self, count: u64) -> Self {
        self.count = count;
        self
    }

    pub fn reset(mut self, reset: Duration) -> Self {
        self.reset = reset;
        self
    }

    pub fn dry_run(mut self, dry_run: bool) -> Self {
        self.dry_run = dry_run;
        self
    }

    /// Logs the event and counts it.
    pub fn emit(self, metrics: &Metrics) {
        if self.dry_run {
            metrics.dry_run(self.layer, self.reason);
        } else {
            metrics.reject_n(self.layer, self.reason, self.count);
            metrics
                .pusher
                .rejected(self.account, self.layer, self.reason, self.count);
        }
        self.log();
    }

    /// Logs the event only, for refusals counted where they happened (the
    /// hub counts each message it drops for a slow consumer; the socket
    /// reports the episode once).
    pub fn log(self) {
        let reset_ms = self.reset.as_millis() as u64;
        macro_rules! event {
            ($level:expr, $suppressed:expr) => {
                tracing::event!(
                    target: "tidegate::exceeded",
                    $level,
                    layer = self.layer.as_str(),
                    reason = self.reason,
                    account = self.account,
                    rule = self.rule,
                    channel = self.channel,
                    conn = self.conn,
                    count = self.count,
                    reset_ms,
                    dry_run = self.dry_run,
                    suppressed = $suppressed,
                    "limit exceeded"
                )
            };
        }
        match self.layer {
            Layer::Connection | Layer::Outbound => event!(tracing::Level::DEBUG, 0u64),
            _ => match SAMPLER.admit(self.layer, self.reason, Instant::now()) {
                Some(suppressed) => event!(tracing::Level::INFO, suppressed),
                None => event!(tracing::Level::DEBUG, 0u64),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_layer_and_reason_a_period_counting_the_rest() {
        let sampler = LogSampler::new(Duration::from_secs(1));
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let h = Layer::Handshake;
        assert_eq!(sampler.admit(h, "ip_rate_limited", at(0)), Some(0));
        for ms in 1..=500 {
            assert_eq!(sampler.admit(h, "ip_rate_limited", at(ms)), None);
        }
        // Other reasons and layers have their own windows.
        assert_eq!(sampler.admit(h, "node_overloaded", at(10)), Some(0));
        assert_eq!(
            sampler.admit(Layer::Http, "ip_rate_limited", at(10)),
            Some(0)
        );
        assert_eq!(sampler.admit(h, "ip_rate_limited", at(999)), None);
        // A period later: one line, with the 501 held back.
        assert_eq!(sampler.admit(h, "ip_rate_limited", at(1000)), Some(501));
        assert_eq!(sampler.admit(h, "ip_rate_limited", at(1001)), None);
        assert_eq!(sampler.admit(h, "ip_rate_limited", at(5000)), Some(1));
        assert_eq!(sampler.admit(h, "node_overloaded", at(5000)), Some(0));
    }
}
