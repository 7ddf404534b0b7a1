//! GraphQL's side of the one charge primitive ([`crate::charge::Ledger`]):
//! the caller's payer (an API key's bucket, the one HTTP and gRPC publish
//! spend, or the account's budget for a JWT), under `Layer::Graphql`, and
//! the answer in the words `extensions.rateLimit` and `X-RateLimit-*`
//! use. Dry run, the exceeded event and the rejection count happen in the
//! ledger, as for every front.

use std::time::{Duration, Instant};

use super::caller::{Caller, Payer as CallerPayer};
use crate::charge::{self, Payer, Price};
use crate::metrics::Layer;
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
    /// Taken from the bucket.
    pub allowed: bool,
    /// Not taken, but a dry-run plan lets it run (counted already).
    pub shadowed: bool,
    pub balance: Balance,
    /// When refused: until the bucket holds `cost`.
    pub retry_after: Duration,
}

fn until_full(limit: u64, remaining: u64, rate: f64) -> Duration {
    Duration::try_from_secs_f64((limit.saturating_sub(remaining) as f64 / rate).max(0.0))
        .unwrap_or_default()
}

/// The ledger's payer for `caller`.
fn payer(caller: &Caller) -> Payer<'_> {
    match &caller.payer {
        CallerPayer::Key(key) => Payer::Key {
            layer: Layer::Graphql,
            key,
            limits: &caller.limits,
        },
        CallerPayer::Account => Payer::Account {
            layer: Layer::Graphql,
            account: &caller.account,
            limits: &caller.limits,
        },
    }
}

fn refill(node: &Node, caller: &Caller) -> f64 {
    caller.limits.account_messages_per_sec * node.limiter_store.account_share(&caller.account)
}

/// Takes `cost` from the caller's bucket in one atomic step (cluster-wide
/// through the bridge). A cost of 0 only reads the balance. The price
/// was checked against `graphql_max_single` already (`QUERY_TOO_EXPENSIVE`
/// is the front's refusal, with its own words).
pub async fn charge(node: &Node, caller: &Caller, cost: u64) -> Taken {
    let units = u32::try_from(cost).unwrap_or(u32::MAX);
    let outcome = node
        .ledger()
        .charge(payer(caller), Price::units(units, None), Instant::now())
        .wait()
        .await;
    let rate = refill(node, caller);
    let balance = |b: Option<charge::Balance>| {
        let b = b.unwrap_or_default();
        Balance {
            limit: b.limit,
            remaining: b.remaining,
            refill_per_sec: rate,
            reset: b.reset,
        }
    };
    match outcome {
        Ok(a) => Taken {
            allowed: !a.shadow,
            shadowed: a.shadow,
            balance: balance(a.balance),
            retry_after: Duration::ZERO,
        },
        Err(r) => Taken {
            allowed: false,
            shadowed: false,
            balance: balance(r.balance),
            retry_after: r.retry_after,
        },
    }
}

/// Charges `bytes` of history a subscription recovered to the caller's
/// payer, before any of it is sent: recovery's one meaning
/// ([`crate::charge::recovery`]), owed and never refused, as on `/v1/ws`,
/// SSE and gRPC. Resolves to the units taken.
pub async fn recovery(node: &Node, caller: &Caller, bytes: usize) -> u32 {
    node.ledger()
        .recovery(payer(caller), bytes, Instant::now())
        .wait()
        .await
        .map_or(0, |(units, _)| units)
}

/// Gives `units` back after an operation cost less than it was charged;
/// the balance after it.
pub async fn refund(node: &Node, caller: &Caller, units: u64, before: Balance) -> Balance {
    let units = u32::try_from(units).unwrap_or(u32::MAX);
    let remaining = node
        .ledger()
        .refund_to(payer(caller), units)
        .wait()
        .await
        .min(before.limit);
    Balance {
        remaining,
        reset: until_full(before.limit, remaining, before.refill_per_sec),
        ..before
    }
}
