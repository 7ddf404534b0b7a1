//! The one charge primitive (seed 004: "one primitive, four call sites"):
//! every front asks [`Ledger::charge`] with **who is asking** (a
//! [`Payer`]: which bucket pays), **what it costs** (a [`Price`], computed
//! by [`crate::pricing`] and the front's own checks before anything
//! executes) and gets back **taken or refused**: [`Admitted`] with the
//! balance to show, or a typed [`Refused`] with its `retry_after`
//! (`retryAfterMs`). The fronts only say the outcome in their own words: a
//! close code or an error frame, an HTTP status and headers, a gRPC status
//! and trailers.
//!
//! What lives here once, not per front: the order of the checks (the
//! single-charge limit before any bucket, compared in one place,
//! [`crate::admission::check_single`], then the buckets, then the rules
//! for a connection), dry run (`limits.dry_run`: a would-be refusal is
//! counted and let through), giving back what a later check refused, and
//! the one `exceeded` event and `tidegate_rejections_total` /
//! `tidegate_dry_run_rejections_total` count per refusal, under the layer
//! the payer names (so labels are the front's: `connection`, `http`,
//! `grpc`, `graphql`, …).
//!
//! # How a front charges
//!
//! - **Socket frames** (`socket/actor/handle.rs`): [`Payer::Connection`] with the
//!   socket's own [`Admission`] buckets, its rules and its account
//!   [`Sampler`](crate::limiter::Sampler); the price is
//!   [`Admission::price`] of the frame. Always [`Pending::Ready`], without
//!   allocating: the hot path stays synchronous. A sample in
//!   [`Admitted::sample`] goes to the account supervisor.
//! - **An SSE stream's opening** (`socket/sse/`): its channels, each priced
//!   by [`subscribe::price`] as a socket's `subscribe` frame, summed and
//!   charged to [`Payer::Connection`] as [`Price::owed`] (taken even below
//!   zero: one request cannot resend a refused frame), sampled into the
//!   account budget. A graphql-ws subscription's `recovery`, known only
//!   after its operation ran, is owed the same way.
//! - **The history a join recovers** (`recovery_per_kib`), on every front:
//!   [`Ledger::recovery`] with the front's payer ([`recovery`]: owed,
//!   never refused, before any of it is sent; for a payer without
//!   connection buckets the bridge takes it even below zero).
//! - **HTTP publish and batch, gRPC `Publish` and each `PublishStream`
//!   message**: [`publish::price`] checks and prices each message,
//!   then [`Payer::Key`] (the API key's cluster-wide bucket, with the
//!   front's [`Layer`]) is charged the units, all or nothing for a batch.
//!   [`Ledger::balance`] reads the bucket without charging (trailers on a
//!   refusal).
//! - **A client publish** (`http/client_publish.rs`, §14): the token's
//!   identity, [`Payer::Identity`] (its own cluster-wide bucket with the
//!   plan's per-connection numbers), then [`Payer::Account`]; the second
//!   refusing gives the first back ([`Ledger::refund_to`]).
//! - **A refusal of the input** on a front without connection buckets
//!   (HTTP, gRPC): [`crate::admission::refusal_units`] of it, charged as
//!   [`Price::units`] to the same payer.
//! - **A GraphQL operation** (`graphql/charge.rs`): the front prices the
//!   parsed document (and variables) and refuses a price over
//!   `graphql_max_single` itself (`QUERY_TOO_EXPENSIVE`, with its own
//!   words), then charges [`Payer::Key`] for an API key or
//!   [`Payer::Account`] for a JWT's account, with `Layer::Graphql`, in one
//!   atomic take; after execution [`Ledger::refund_to`] gives back what the
//!   real cost did not use (capped at what was charged). A plan's
//!   `dry_run = ["graphql"]` shadows that layer's refusals on either
//!   bucket. [`Admitted::balance`] goes to `extensions.rateLimit` and
//!   `X-RateLimit-*`, [`Admitted::shadow`] to `"mode":"shadow","wouldRefuse"`.
//! - **A presence read**: a fixed small price ([`Price::units`] from the
//!   plan's cost table, no bytes), the reader's payer, the same translation.

mod balance;
mod bucket;
mod connection;
pub mod keys;
mod price;
pub mod publish;
pub mod recovery;
mod rules;
pub mod subscribe;

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

pub use balance::Balance;
pub use connection::{Admission, Shadow, Verdict};
pub use keys::{ApiKeys, KeyState};
pub use price::Price;
pub use publish::Refusal;
pub use rules::RulesPassed;

use crate::admission::{CostExceedsMax, check_single};
use crate::cluster::{self, KeyCharge, LimiterStore};
use crate::config::{LimitName, Limits};
use crate::exceeded::Exceeded;
use crate::limiter::{Sample, Sampler};
use crate::metrics::{Layer, Metrics};
use crate::protocol::Op;
use crate::rules::{ConnRules, RuleBuckets};
use bucket::{Bucket, dry_run, identity_bucket};

/// A charge's answer: ready now (a connection's own buckets, single-node
/// buckets), or once the bridge answers (Redis).
pub enum Pending<'a, T> {
    Ready(T),
    Later(Pin<Box<dyn Future<Output = T> + Send + 'a>>),
}

impl<T> Pending<'_, T> {
    pub async fn wait(self) -> T {
        match self {
            Pending::Ready(v) => v,
            Pending::Later(f) => f.await,
        }
    }
}

/// The bridge's answer `p`, then `f` on it: at once when the bridge
/// answered at once (no allocation), else in one boxed future.
fn then<'a, T: Send + 'static, U>(
    p: cluster::Pending<T>,
    f: impl FnOnce(T) -> U + Send + 'a,
) -> Pending<'a, U> {
    match p {
        cluster::Pending::Ready(v) => Pending::Ready(f(v)),
        cluster::Pending::Later(fut) => Pending::Later(Box::pin(async move { f(fut.await) })),
    }
}

/// Who is asking, and so which bucket pays.
pub enum Payer<'a> {
    /// A connection's own buckets (socket frames): the message and byte
    /// buckets, the plan's rules, then the sampled account roll-up.
    Connection(Connection<'a>),
    /// An API key's cluster-wide bucket (its account plan's burst and
    /// rate), whatever front spends it.
    Key {
        layer: Layer,
        key: &'a KeyState,
        limits: &'a Limits,
    },
    /// A token's identity (`sub`) without a connection (client publish,
    /// §14): its own cluster-wide bucket, named after the account, with
    /// the plan's per-connection numbers (`burst`, `messages_per_sec`), so
    /// a client publishing over HTTP is paced as one socket is. Its dry-run
    /// name is `messages`, the per-connection budget's.
    Identity {
        layer: Layer,
        account: &'a str,
        limits: &'a Limits,
    },
    /// An account's budget directly, charged at once (not sampled): for a
    /// caller that holds no connection buckets of its own.
    Account {
        layer: Layer,
        account: &'a str,
        limits: &'a Limits,
    },
}

/// A socket's side of a charge.
pub struct Connection<'a> {
    pub admission: &'a mut Admission,
    /// Where admitted units are counted toward the account budget; `None`
    /// for a frame that did not parse (charged to the connection only).
    pub sampler: Option<&'a mut Sampler>,
    /// The operation for the plan's rules, and the connection's rule
    /// buckets; `None` when rules do not apply (a `budget` request, a
    /// frame that did not parse, a role that skips rules).
    pub rules: Option<(Op, &'a mut ConnRules)>,
    pub account: &'a str,
    /// The connection's label (`n1-8f3a`), for the event.
    pub conn: &'a str,
}

/// Taken.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Admitted {
    /// The paying bucket after the take. `None` for a connection: its
    /// buckets are read when a `budget` frame shows them, so the hot path
    /// computes no balance.
    pub balance: Option<Balance>,
    /// A dry-run limit would have refused (counted already).
    pub shadow: bool,
    /// A connection's units to charge to the account budget now (every
    /// `account_sample_every` units).
    pub sample: Option<Sample>,
}

impl Admitted {
    /// Taken from a bucket whose balance is `balance`.
    fn taken(balance: Option<Balance>) -> Admitted {
        Admitted {
            balance,
            shadow: false,
            sample: None,
        }
    }

    fn shadowed(mut self, shadowed: bool) -> Admitted {
        self.shadow |= shadowed;
        self
    }
}

/// Why a charge was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The paying bucket is empty.
    RateLimited,
    /// A connection's byte bucket is empty.
    BytesLimited,
    /// The price is above the largest single charge: no retry can help.
    CostExceedsMax { cost: u32, max: u32 },
    /// One of the plan's rules refused; `hold`: the wait is short enough
    /// to stop reading and retry (seed 003's lossless throttling).
    Rule { hold: bool },
}

impl Reason {
    /// The reason label of the refusal's metric and event.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::RateLimited | Reason::Rule { .. } => "rate_limited",
            Reason::BytesLimited => "bytes_limited",
            Reason::CostExceedsMax { .. } => "cost_exceeds_max",
        }
    }
}

/// Refused, and already counted: nothing was taken from any bucket.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Refused {
    pub reason: Reason,
    /// Until the bucket would admit this price (zero when waiting cannot
    /// help): `retryAfterMs`, `Retry-After`, `retry-after-ms`.
    pub retry_after: Duration,
    /// The paying bucket, when known (an API key's).
    pub balance: Option<Balance>,
}

/// The outcome of one charge.
pub type Outcome = Result<Admitted, Refused>;

/// The charge layer over a node's state: what [`Ledger::charge`] reads and
/// counts into. Three references, copied freely
/// ([`crate::node::Node::ledger`]).
#[derive(Clone, Copy)]
pub struct Ledger<'a> {
    metrics: &'a Metrics,
    store: &'a dyn LimiterStore,
    rules: &'a RuleBuckets,
}

impl<'a> Ledger<'a> {
    #[inline]
    pub fn new(metrics: &'a Metrics, store: &'a dyn LimiterStore, rules: &'a RuleBuckets) -> Self {
        Ledger {
            metrics,
            store,
            rules,
        }
    }

    /// Identify, price, consume: takes `price` from `payer`'s bucket at
    /// `now`, or refuses (counted, with one `exceeded` event). A
    /// connection's charge is always [`Pending::Ready`].
    #[inline]
    pub fn charge(self, payer: Payer<'a>, price: Price<'a>, now: Instant) -> Pending<'a, Outcome> {
        if price.owed && !matches!(payer, Payer::Connection(_)) {
            return self.owe(payer, price);
        }
        match payer {
            Payer::Connection(c) => Pending::Ready(self.connection(c, price, now)),
            Payer::Key { layer, key, limits } => {
                let bucket = Bucket::key(key, limits);
                self.bucket(layer, &key.account, limits, bucket, price, now)
            }
            Payer::Identity {
                layer,
                account,
                limits,
            } => {
                let id = identity_bucket(account);
                let bucket = Bucket::identity(&id, limits);
                self.bucket(layer, account, limits, bucket, price, now)
            }
            Payer::Account {
                layer,
                account,
                limits,
            } => {
                let shadowed = match self.single(layer, account, limits, &price) {
                    Ok(shadowed) => shadowed,
                    Err(r) => return Pending::Ready(Err(r)),
                };
                let passed = match self.request_rules(account, limits, &price, now) {
                    Ok(passed) => passed,
                    Err(r) => return Pending::Ready(Err(r)),
                };
                let taken = self.store.charge_account(account, price.units, now, limits);
                let settle = move |c: cluster::Charged| {
                    let dry = dry_run(layer, limits, Some(LimitName::AccountMessages));
                    let balance = Balance::of_account(&c.view);
                    let outcome = self.settle(
                        layer,
                        account,
                        &price,
                        c.allowed,
                        c.retry_after,
                        Some(balance),
                        dry,
                    );
                    if outcome.is_err() {
                        self.give_back_rules(passed);
                    }
                    outcome.map(|a| a.shadowed(shadowed))
                };
                then(taken, settle)
            }
        }
    }

    /// Gives back `units` a connection was charged for a frame a later
    /// step did not run (never more than was taken: the caller gives back
    /// one charge's units at most).
    pub fn refund(self, admission: &mut Admission, price: &Price<'_>) {
        admission.refund(price.units, price.bytes);
    }

    /// Gives `units` back to a key's or an account's bucket after an
    /// operation cost less than it was charged (GraphQL's refund, §12);
    /// resolves to the whole tokens left. The caller gives back at most
    /// what one charge took. A connection's units go back through
    /// [`Ledger::refund`].
    pub fn refund_to(self, payer: Payer<'a>, units: u32) -> Pending<'a, u64> {
        let given = match payer {
            Payer::Connection(c) => {
                c.admission.refund(units, 0);
                return Pending::Ready(0);
            }
            Payer::Key { key, limits, .. } => {
                let b = Bucket::key(key, limits);
                self.store
                    .refund_key(b.id, f64::from(units), b.capacity, b.rate)
            }
            Payer::Identity {
                account, limits, ..
            } => {
                let id = identity_bucket(account);
                let b = Bucket::identity(&id, limits);
                self.store
                    .refund_key(b.id, f64::from(units), b.capacity, b.rate)
            }
            Payer::Account {
                account, limits, ..
            } => self.store.refund_account(account, units, limits),
        };
        then(given, |remaining| remaining)
    }

    /// An API key's balance, read without charging (a refusal's trailers).
    pub fn balance(self, key: &'a KeyState, limits: &'a Limits) -> Pending<'a, Balance> {
        let read = self.store.charge_key(
            &key.id,
            0.0,
            f64::from(limits.account_burst),
            limits.account_messages_per_sec,
        );
        then(read, |c| Balance::from(&c))
    }

    /// A charge to a bucket the bridge keeps by name (an API key's, an
    /// identity's): the single-charge limit, then the take.
    fn bucket(
        self,
        layer: Layer,
        account: &'a str,
        limits: &'a Limits,
        bucket: Bucket<'_>,
        price: Price<'a>,
        now: Instant,
    ) -> Pending<'a, Outcome> {
        let shadowed = match self.single(layer, account, limits, &price) {
            Ok(shadowed) => shadowed,
            Err(r) => return Pending::Ready(Err(r)),
        };
        let passed = match self.request_rules(account, limits, &price, now) {
            Ok(passed) => passed,
            Err(r) => return Pending::Ready(Err(r)),
        };
        let units = f64::from(price.units);
        let taken = self
            .store
            .charge_key(bucket.id, units, bucket.capacity, bucket.rate);
        let dry_name = bucket.dry_run;
        let settle = move |c: KeyCharge| {
            let dry = dry_run(layer, limits, dry_name);
            let balance = Some(Balance::from(&c));
            let outcome = self.settle(
                layer,
                account,
                &price,
                c.allowed,
                c.retry_after,
                balance,
                dry,
            );
            if outcome.is_err() {
                self.give_back_rules(passed);
            }
            outcome.map(|a| a.shadowed(shadowed))
        };
        then(taken, settle)
    }

    /// The single-charge limit of a payer without connection buckets;
    /// `Ok(true)`: over it, but in dry run.
    fn single(
        self,
        layer: Layer,
        account: &str,
        limits: &Limits,
        price: &Price<'_>,
    ) -> Result<bool, Refused> {
        let Some(max) = price.max_single else {
            return Ok(false);
        };
        let Err(CostExceedsMax { cost, max }) = check_single(price.units, max) else {
            return Ok(false);
        };
        let dry = limits.is_dry_run(LimitName::Cost);
        Exceeded::new(layer, "cost_exceeds_max", account)
            .dry_run(dry)
            .emit(self.metrics);
        if dry {
            return Ok(true);
        }
        Err(Refused {
            reason: Reason::CostExceedsMax { cost, max },
            retry_after: Duration::ZERO,
            balance: None,
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn settle(
        self,
        layer: Layer,
        account: &str,
        price: &Price<'_>,
        allowed: bool,
        retry_after: Duration,
        balance: Option<Balance>,
        dry: bool,
    ) -> Outcome {
        if allowed {
            return Ok(Admitted::taken(balance));
        }
        let mut e = Exceeded::new(layer, "rate_limited", account)
            .reset(retry_after)
            .dry_run(dry);
        if let Some(c) = price.channel {
            e = e.channel(c);
        }
        e.emit(self.metrics);
        if dry {
            return Ok(Admitted {
                balance,
                shadow: true,
                sample: None,
            });
        }
        Err(Refused {
            reason: Reason::RateLimited,
            retry_after,
            balance,
        })
    }
}

#[cfg(test)]
mod tests;
