//! The hook metrics of §15, registered in the node's registry.

use std::collections::HashSet;
use std::sync::{LazyLock, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    hook: String,
    event: &'static str,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EventLabels {
    hook: String,
    event: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HookLabel {
    hook: String,
}

/// Outcomes counted in `tidegate_hook_calls_total`.
pub mod outcome {
    pub const ALLOWED: &str = "allowed";
    pub const REFUSED: &str = "refused";
    pub const DISCONNECTED: &str = "disconnected";
    /// Made, and no answer came (timeout, status, body).
    pub const FAILED: &str = "failed";
    /// Answered from `cache_ms`.
    pub const CACHED: &str = "cached";
    /// Answered by an identical call in flight.
    pub const SHARED: &str = "shared";
    /// Not made: no token or slot in time, or the breaker open.
    pub const SHED: &str = "shed";
}

/// 1 ms to ~59 s: a backend's answer.
fn duration_buckets() -> Histogram {
    Histogram::new(exponential_buckets(1e-3, 3.0, 11))
}

#[derive(Debug)]
pub struct HookMetrics {
    calls: Family<CallLabels, Counter>,
    duration: Family<EventLabels, Histogram, fn() -> Histogram>,
    breaker_open: Family<HookLabel, Gauge>,
    disagreements: Family<EventLabels, Counter>,
}

impl Default for HookMetrics {
    fn default() -> Self {
        HookMetrics {
            calls: Family::default(),
            duration: Family::new_with_constructor(duration_buckets),
            breaker_open: Family::default(),
            disagreements: Family::default(),
        }
    }
}

impl HookMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "hook_calls",
            "Backend hook calls by hook, event and outcome (allowed, refused, disconnected, failed, cached, shared, shed)",
            self.calls.clone(),
        );
        registry.register(
            "hook_duration_seconds",
            "Time from a hook request to its answer or failure",
            self.duration.clone(),
        );
        registry.register(
            "hook_breaker_open",
            "1 while a hook's breaker is open (or probing)",
            self.breaker_open.clone(),
        );
        registry.register(
            "hook_disagreements",
            "Dry-run hook answers that differed from the token's decision",
            self.disagreements.clone(),
        );
    }

    pub fn call(&self, hook: &str, event: &'static str, outcome: &'static str) {
        self.calls
            .get_or_create(&CallLabels {
                hook: hook.to_owned(),
                event,
                outcome,
            })
            .inc();
    }

    pub fn calls(&self, hook: &str, event: &'static str, outcome: &'static str) -> u64 {
        self.calls
            .get_or_create(&CallLabels {
                hook: hook.to_owned(),
                event,
                outcome,
            })
            .get()
    }

    pub fn duration(&self, hook: &str, event: &'static str, secs: f64) {
        self.duration
            .get_or_create(&EventLabels {
                hook: hook.to_owned(),
                event,
            })
            .observe(secs);
    }

    pub fn set_breaker_open(&self, hook: &str, open: bool) {
        self.breaker_open
            .get_or_create(&HookLabel {
                hook: hook.to_owned(),
            })
            .set(i64::from(open));
    }

    pub fn disagreement(&self, hook: &str, event: &'static str) {
        self.disagreements
            .get_or_create(&EventLabels {
                hook: hook.to_owned(),
                event,
            })
            .inc();
    }
}

/// Distinct backend codes that get their own `reason` label; past it,
/// `other`. What bounds the label set a backend can grow.
pub const MAX_HOOK_REASONS: usize = 64;

static REASONS: LazyLock<Mutex<HashSet<&'static str>>> =
    LazyLock::new(|| Mutex::new(HashSet::new()));

/// A backend's error code as a `reason` label of
/// `tidegate_rejections_total{layer="hook"}`: the code itself for the
/// first [`MAX_HOOK_REASONS`] distinct ones (each kept for the process's
/// life), then `other`.
pub fn hook_reason(code: &str) -> &'static str {
    let mut set = REASONS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(r) = set.get(code) {
        return r;
    }
    if set.len() >= MAX_HOOK_REASONS {
        return "other";
    }
    let leaked: &'static str = Box::leak(code.to_owned().into_boxed_str());
    set.insert(leaked);
    leaked
}
