//! The one place GraphQL takes from and gives back to a caller's bucket:
//! an API key's (the bucket HTTP and gRPC
//! publish spend) or the account's budget (through the bridge, as the
//! sockets' sampled charges). When the broker gains one charge primitive
//! (issue 23) this file is what changes.

use std::time::{Duration, Instant};

use super::caller::{Caller, Payer};
use crate::node::Node;

/// A bucket's balance, as `X-RateLimit-*` and `extensions.rateLimit` show it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Balance {
    pub limit: u64,
    pub remaining: u64,
    pub refill_per_sec: f64,
    /// Until the bucket is full.
    pub reset: Duration,
}

/// One take of `cost` units.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Taken {
    pub allowed: bool,
    pub balance: Balance,
    /// When refused: until the bucket holds `cost`.
    pub retry_after: Duration,
}

fn until_full(limit: u64, remaining: u64, rate: f64) -> Duration {
    Duration::try_from_secs_f64((limit.saturating_sub(remaining) as f64 / rate).max(0.0))
        .unwrap_or_default()
}

/// Takes `cost` from the caller's bucket in one atomic step (cluster-wide
/// through the bridge). A cost of 0 only reads the balance.
pub async fn charge(node: &Node, caller: &Caller, cost: u64) -> Taken {
    let limits = &caller.limits;
    match &caller.payer {
        Payer::Key(key) => {
            let c = node
                .bridge
                .charge_key(
                    &key.id,
                    cost as f64,
                    f64::from(limits.account_burst),
                    limits.account_messages_per_sec,
                )
                .wait()
                .await;
            Taken {
                allowed: c.allowed,
                balance: Balance {
                    limit: c.limit,
                    remaining: c.remaining,
                    refill_per_sec: limits.account_messages_per_sec
                        * node.bridge.account_share(&caller.account),
                    reset: c.reset,
                },
                retry_after: c.retry_after,
            }
        }
        Payer::Account => {
            let units = u32::try_from(cost).unwrap_or(u32::MAX);
            let c = node
                .bridge
                .charge_account(&caller.account, units, Instant::now(), limits)
                .wait()
                .await;
            let v = c.view;
            Taken {
                allowed: c.allowed,
                balance: Balance {
                    limit: v.capacity,
                    remaining: v.remaining,
                    refill_per_sec: v.refill_per_sec,
                    reset: until_full(v.capacity, v.remaining, v.refill_per_sec),
                },
                retry_after: c.retry_after,
            }
        }
    }
}

/// Gives `units` back after an operation cost less than it was charged;
/// the balance after it.
pub async fn refund(node: &Node, caller: &Caller, units: u64, before: Balance) -> Balance {
    let limits = &caller.limits;
    let remaining = match &caller.payer {
        Payer::Key(key) => {
            node.bridge
                .refund_key(
                    &key.id,
                    units as f64,
                    f64::from(limits.account_burst),
                    limits.account_messages_per_sec,
                )
                .wait()
                .await
        }
        Payer::Account => {
            let units = u32::try_from(units).unwrap_or(u32::MAX);
            node.bridge
                .refund_account(&caller.account, units, limits)
                .wait()
                .await
        }
    };
    let remaining = remaining.min(before.limit);
    Balance {
        remaining,
        reset: until_full(before.limit, remaining, before.refill_per_sec),
        ..before
    }
}
