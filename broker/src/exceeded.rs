//! Exceeded events: every refusal, drop and close for cause emits exactly
//! one structured `tracing` event (target `tidegate::exceeded`) and
//! increments `tidegate_rejections_total{layer,reason}` (or
//! `tidegate_dry_run_rejections_total` for a limit that only observes).
//!
//! Events are at DEBUG for the per-frame layers (a runaway loop produces
//! thousands a second; the metric is what to alert on) and INFO for the
//! rest. `RUST_LOG=tidegate::exceeded=debug` shows them all.

use std::time::Duration;

use crate::metrics::{Layer, Metrics};

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
        }
        self.log();
    }

    /// Logs the event only, for refusals counted where they happened (the
    /// hub counts each message it drops for a slow consumer; the socket
    /// reports the episode once).
    pub fn log(self) {
        let reset_ms = self.reset.as_millis() as u64;
        macro_rules! event {
            ($level:expr) => {
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
                    "limit exceeded"
                )
            };
        }
        match self.layer {
            Layer::Connection | Layer::Outbound => event!(tracing::Level::DEBUG),
            _ => event!(tracing::Level::INFO),
        }
    }
}
