//! A bucket's balance, as every front shows it after a charge.

use std::time::Duration;

use crate::cluster::KeyCharge;
use crate::protocol::wire::BudgetView;

/// A bucket's balance, as `X-RateLimit-*`, gRPC trailers and GraphQL's
/// `extensions.rateLimit` show it.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Balance {
    pub limit: u64,
    pub remaining: u64,
    /// Until the bucket is full again.
    pub reset: Duration,
}

impl From<&KeyCharge> for Balance {
    fn from(c: &KeyCharge) -> Balance {
        Balance {
            limit: c.limit,
            remaining: c.remaining,
            reset: c.reset,
        }
    }
}

impl Balance {
    /// The `X-RateLimit-Limit`, `-Remaining` and `-Reset` (seconds, rounded
    /// up) headers an HTTP answer shows this balance with, the same on
    /// every front that answers over HTTP.
    pub fn rate_limit_headers(&self) -> [(&'static str, String); 3] {
        [
            ("X-RateLimit-Limit", self.limit.to_string()),
            ("X-RateLimit-Remaining", self.remaining.to_string()),
            (
                "X-RateLimit-Reset",
                crate::refusal::retry_after_secs(self.reset).to_string(),
            ),
        ]
    }

    /// An account budget's balance, from the bridge's view of it.
    pub(super) fn of_account(v: &BudgetView) -> Balance {
        Balance {
            limit: v.capacity,
            remaining: v.remaining,
            reset: Duration::try_from_secs_f64(
                (v.capacity.saturating_sub(v.remaining)) as f64
                    / v.refill_per_sec.max(f64::MIN_POSITIVE),
            )
            .unwrap_or_default(),
        }
    }
}
