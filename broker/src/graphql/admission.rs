//! Consume (§12): the request's [`Ticket`] carries the caller and the
//! price, and the [`Admission`] extension takes the price from the
//! caller's bucket once the document has passed validation and before
//! anything executes (a refusal runs nothing; an invalid document is
//! charged `costs.malformed` instead, by the operation's handler). A plan
//! with `dry_run = ["graphql"]` is charged what its bucket holds and
//! never refused: the ticket records that it would have been.
//!
//! Where a result can outgrow its estimate, the resolver pays the rest
//! before it hands the result over ([`Ticket::pay`]): the bytes of `data`
//! a `history` read renders, the channels `channels` scans. Refused, the
//! field fails with `RATE_LIMITED` and the response is a 429.

use std::sync::Arc;
use std::time::Duration;

use async_graphql::extensions::{Extension, ExtensionContext, ExtensionFactory, NextValidation};
use async_graphql::{ErrorExtensionValues, ErrorExtensions, ServerError, ValidationResult};

use super::caller::Caller;
use super::charge::{self, Balance, Taken};
use super::code::Code;
use super::request::Refused;
use crate::config::LimitName;
use crate::exceeded::Exceeded;
use crate::metrics::Layer;
use crate::node::Node;

/// One operation's way through the limiter, shared by the handler, the
/// extension and the resolvers.
pub struct Ticket {
    pub node: Arc<Node>,
    pub caller: Caller,
    /// The estimated price.
    pub estimate: u64,
    /// Shadow mode: price and count, never refuse.
    pub shadow: bool,
    pub outcome: parking_lot::Mutex<Outcome>,
    /// What resolvers paid beyond the estimate ([`Ticket::pay`]).
    pub extra: parking_lot::Mutex<Extra>,
    /// A subscription's resolver ran (over the socket): what to start.
    pub subscribe: parking_lot::Mutex<Option<Start>>,
    /// `budget`, read once per operation however often it is selected
    /// (aliases weigh nothing; one bucket read serves them all).
    pub budget: tokio::sync::OnceCell<Balance>,
    /// `prices`' document, built once per operation, likewise.
    pub prices: tokio::sync::OnceCell<Arc<str>>,
}

/// What resolvers paid beyond the estimate.
#[derive(Debug, Clone, Copy, Default)]
pub struct Extra {
    /// Units taken.
    pub charged: u64,
    /// The balance after the last take.
    pub balance: Option<Balance>,
    /// A take the bucket refused: until it would fit.
    pub refused: Option<Duration>,
    /// A shadowed refusal (dry run).
    pub would_refuse: bool,
    /// A payment past `graphql_max_single`, refused for that alone.
    pub too_expensive: bool,
    /// Units given back by resolvers (a duplicate publish owes the base
    /// price only, §17).
    pub given_back: u64,
}

/// What a subscription's resolver found the socket should start.
#[derive(Debug, Clone)]
pub enum Start {
    /// `messages`: the channel from `since` (§2/§3).
    Messages { channel: String, since: Option<u64> },
    /// `presence`: the channel's diffs (§13), under its namespace's rule.
    Presence {
        channel: String,
        rule: crate::config::PresenceRule,
    },
    /// A subscribe hook's `disconnect` (§15): close the socket with it.
    Disconnect { code: u16, reason: String },
}

/// What happened at the charge.
#[derive(Debug, Clone, Copy, Default)]
pub struct Outcome {
    /// The document passed validation (so the response is an execution
    /// result, not a request error).
    pub validated: bool,
    /// The charge's answer (none before validation passed).
    pub taken: Option<Taken>,
    /// Units taken from the bucket.
    pub charged: u64,
    /// Refused for the bucket (429).
    pub rate_limited: bool,
    /// A shadowed refusal.
    pub would_refuse: bool,
}

impl Ticket {
    pub fn new(node: Arc<Node>, caller: Caller, estimate: u64) -> Ticket {
        let shadow = caller.limits.is_dry_run(LimitName::Graphql);
        Ticket {
            node,
            caller,
            estimate,
            shadow,
            outcome: parking_lot::Mutex::new(Outcome::default()),
            extra: parking_lot::Mutex::new(Extra::default()),
            subscribe: parking_lot::Mutex::new(None),
            budget: tokio::sync::OnceCell::new(),
            prices: tokio::sync::OnceCell::new(),
        }
    }

    pub fn extra(&self) -> Extra {
        *self.extra.lock()
    }

    /// Pays `units` more than the estimate for work a resolver has done
    /// and is about to hand over (`what` names it in the refusal): taken
    /// from the caller's bucket, or the field's error. Past the caller's
    /// `graphql_max_single` it could never fit: `QUERY_TOO_EXPENSIVE`.
    pub async fn pay(
        &self,
        units: u64,
        what: impl FnOnce() -> String,
    ) -> async_graphql::Result<()> {
        if units == 0 {
            return Ok(());
        }
        let what = what();
        let max = self
            .caller
            .max_single(self.node.limiter_store.account_share(&self.caller.account));
        if units > max && !self.shadow {
            self.extra.lock().too_expensive = true;
            Exceeded::new(
                Layer::Graphql,
                Code::QueryTooExpensive.reason(),
                &self.caller.account,
            )
            .emit(&self.node.metrics);
            return Err(Code::QueryTooExpensive
                .error(format!(
                    "{what} costs {units} units, above the maximum of {max}; request fewer or \
                 smaller items"
                ))
                .extend_with(|_, x| {
                    x.set("cost", units);
                    x.set("max", max);
                }));
        }
        let taken = charge::charge(&self.node, &self.caller, units).await;
        let mut extra = self.extra.lock();
        extra.balance = Some(taken.balance);
        if taken.allowed {
            extra.charged = extra.charged.saturating_add(units);
            return Ok(());
        }
        if taken.shadowed {
            extra.would_refuse = true;
            return Ok(());
        }
        extra.refused = Some(taken.retry_after);
        let e = rate_limited(units, &taken);
        Err(async_graphql::Error {
            message: format!("{}: {what} costs {units} units", e.message),
            source: None,
            extensions: e.extensions,
        })
    }

    /// Gives `units` of the estimate back at once, for work the estimate
    /// priced that turned out cheaper as it ran (a publish that was a
    /// duplicate, §17), never more than the estimate charged.
    pub async fn give_back(&self, units: u64) {
        let charged = self.outcome().charged;
        let units = {
            let extra = self.extra.lock();
            units.min(charged.saturating_sub(extra.given_back))
        };
        if units == 0 {
            return;
        }
        let before = self.extra.lock().balance;
        let Some(before) = before.or(self.outcome().taken.map(|t| t.balance)) else {
            return;
        };
        let balance = charge::refund(&self.node, &self.caller, units, before).await;
        let mut extra = self.extra.lock();
        extra.given_back = extra.given_back.saturating_add(units);
        extra.balance = Some(balance);
    }

    pub fn outcome(&self) -> Outcome {
        *self.outcome.lock()
    }

    /// Takes the estimate from the caller's bucket; the refusal error when
    /// it does not fit (and the plan enforces). The ledger counts the
    /// refusal (or the shadowed one) under `layer="graphql"`.
    async fn admit(&self) -> Result<(), ServerError> {
        let taken = charge::charge(&self.node, &self.caller, self.estimate).await;
        let mut out = self.outcome.lock();
        out.validated = true;
        out.taken = Some(taken);
        if taken.allowed {
            out.charged = self.estimate;
            return Ok(());
        }
        if taken.shadowed {
            out.would_refuse = true;
            return Ok(());
        }
        out.rate_limited = true;
        Err(rate_limited(self.estimate, &taken))
    }
}

/// `RATE_LIMITED` with the contract's extensions: `retryAfter` (seconds,
/// rounded up) and `retryAfterMs`, the time until the bucket holds `cost`.
pub fn rate_limited(cost: u64, taken: &Taken) -> ServerError {
    let mut e = ServerError::new("rate limit exceeded", None);
    let mut x = ErrorExtensionValues::default();
    x.set("code", Code::RateLimited.as_str());
    x.set("cost", cost);
    x.set("remaining", taken.balance.remaining);
    x.set("retryAfter", retry_secs(taken.retry_after));
    x.set("retryAfterMs", retry_ms(taken.retry_after));
    e.extensions = Some(x);
    e
}

/// Whole seconds, rounded up, at least 1 for a wait.
pub fn retry_secs(d: Duration) -> u64 {
    d.as_millis().div_ceil(1000).max(1) as u64
}

/// Milliseconds, rounded up, at least 1.
pub fn retry_ms(d: Duration) -> u64 {
    (d.as_micros().div_ceil(1000) as u64).max(1)
}

/// The extension that charges between validation and execution.
pub struct Admission;

impl ExtensionFactory for Admission {
    fn create(&self) -> Arc<dyn Extension> {
        Arc::new(Admission)
    }
}

#[async_graphql::async_trait::async_trait]
impl Extension for Admission {
    async fn validation(
        &self,
        ctx: &ExtensionContext<'_>,
        next: NextValidation<'_>,
    ) -> Result<ValidationResult, Vec<ServerError>> {
        let result = next.run(ctx).await?;
        if let Some(ticket) = ctx.data_opt::<Arc<Ticket>>() {
            ticket.admit().await.map_err(|e| vec![e])?;
        }
        Ok(result)
    }
}

/// `dearest`: the highest price of one message an operation publishes.
/// Each message a mutation publishes is one operation of the cost table,
/// held to the plan's `max_single` as an HTTP publish of it is (issue 42:
/// `graphql_max_single`, the whole document's limit, let a publish priced
/// 31 through against a `max_single` of 20 that HTTP, gRPC and the socket
/// refuse). Refused before anything is charged, as `QUERY_TOO_EXPENSIVE`
/// with its `cost` and `max`; a plan with `cost` or `graphql` in
/// `dry_run` lets it through, counted.
pub(super) fn single_publishes(node: &Node, caller: &Caller, dearest: u64) -> Result<(), Refused> {
    let limits = &caller.limits;
    let Err(over) = crate::admission::single::check_single_wide(dearest, limits.costs.max_single)
    else {
        return Ok(());
    };
    if limits.is_dry_run(LimitName::Cost) || limits.is_dry_run(LimitName::Graphql) {
        Exceeded::new(
            Layer::Graphql,
            Code::QueryTooExpensive.reason(),
            &caller.account,
        )
        .dry_run(true)
        .emit(&node.metrics);
        return Ok(());
    }
    Err(Refused::request(
        Code::QueryTooExpensive,
        format!(
            "a message this operation publishes {over}; send less data or publish to a \
             channel with fewer subscribers"
        ),
    )
    .with("cost", u64::from(over.cost))
    .with("max", u64::from(over.max)))
}
