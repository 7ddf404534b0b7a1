//! Recovery's one meaning, on every front (issue 42: a socket owed it
//! after the fact and never refused it, gRPC `Subscribe` charged it before
//! delivery and could refuse it, graphql-ws refused it with
//! `RATE_LIMITED`).
//!
//! A subscription that continues from a position (`since`, an SSE
//! stream's `Last-Event-ID`) pays twice:
//!
//! - **`costs.recovery`, flat**: part of the subscription's own price
//!   ([`super::subscribe::price`], [`crate::pricing::subscribe`]), known
//!   before anything runs, so it is held to `max_single` and refused with
//!   the subscription (`cost_exceeds_max`, or a rate limit) before any of
//!   it happens.
//! - **`costs.recovery_per_kib`, by the history's bytes**: known only once
//!   the join has found what `since` recovers. It is charged here, to the
//!   payer the front charges its subscriptions to, once the backlog is
//!   known and **before any of it is sent**, as a **debt**: taken even
//!   below zero, never refused. The subscription was admitted and has
//!   joined; refusing its history now would either leave a gap (§2/§3
//!   forbid one) or end a subscription the client was told it had, and a
//!   history larger than the bucket could never be recovered at all. The
//!   payer's next operations wait for the refill instead, so a recovery is
//!   paid for in full whatever its size.
//!
//! The payer is the front's: a socket's or an SSE stream's connection
//! bucket, sampled into the account budget as its frames are; a
//! graphql-ws subscription's caller (the account budget for a token, the
//! API key's bucket for a key); gRPC `Subscribe`'s API key bucket. For a
//! token the units reach the account budget on every front; an API key's
//! bucket is its account plan's budget for backends on every protocol
//! (§8, §12), so a backend's recovery never spends the budget its users'
//! sockets share.
//!
//! [`units`] is the one place the per-KiB price is computed
//! (`tests/layers.rs` fails on [`crate::pricing::recovery`] anywhere
//! else); a GraphQL `history` read pays the same price for its `data`, but
//! as a read, answered at once, so it is refusable (nothing is under way).

use std::time::Instant;

use super::{Admitted, Ledger, Payer, Pending, Price};
use crate::config::Costs;

/// Units for `bytes` of history: `recovery_per_kib` per started KiB.
#[inline]
pub fn units(costs: &Costs, bytes: usize) -> u32 {
    crate::pricing::recovery(costs, bytes)
}

impl<'a> Ledger<'a> {
    /// Charges `bytes` of history a join recovered to `payer`, before any
    /// of it is sent: owed, never refused (see the module). Resolves to
    /// what was taken (`None`: nothing to pay); a connection's answer is
    /// [`Pending::Ready`], with the account sample in [`Admitted::sample`].
    pub fn recovery(
        self,
        payer: Payer<'a>,
        bytes: usize,
        now: Instant,
    ) -> Pending<'a, Option<(u32, Admitted)>> {
        let costs = match &payer {
            Payer::Connection(c) => &c.admission.limits().costs,
            Payer::Key { limits, .. }
            | Payer::Identity { limits, .. }
            | Payer::Account { limits, .. } => &limits.costs,
        };
        let units = units(costs, bytes);
        if units == 0 {
            return Pending::Ready(None);
        }
        // An owed price is never refused: the outcome is always `Ok`.
        match self.charge(payer, Price::owed(units), now) {
            Pending::Ready(outcome) => Pending::Ready(outcome.ok().map(|a| (units, a))),
            Pending::Later(f) => {
                Pending::Later(Box::pin(async move { f.await.ok().map(|a| (units, a)) }))
            }
        }
    }

    /// [`Ledger::charge`] of an owed price for a payer without connection
    /// buckets: the bridge takes it even below zero. No `max_single` (the
    /// flat part was held to it with the subscription), no rules, no dry
    /// run: nothing here is refused.
    pub(super) fn owe(self, payer: Payer<'a>, price: Price<'a>) -> Pending<'a, super::Outcome> {
        let units = price.units;
        match payer {
            Payer::Connection(_) => unreachable!("a connection owes through its own buckets"),
            Payer::Key { key, limits, .. } => {
                let b = super::Bucket::key(key, limits);
                let taken = self
                    .store
                    .owe_key(b.id, f64::from(units), b.capacity, b.rate);
                super::then(taken, |c| Ok(Admitted::taken(Some((&c).into()))))
            }
            Payer::Identity {
                account, limits, ..
            } => {
                let id = super::identity_bucket(account);
                let b = super::Bucket::identity(&id, limits);
                let taken = self
                    .store
                    .owe_key(b.id, f64::from(units), b.capacity, b.rate);
                super::then(taken, |c| Ok(Admitted::taken(Some((&c).into()))))
            }
            Payer::Account {
                account, limits, ..
            } => {
                let taken = self.store.owe_account(account, units, limits);
                super::then(taken, |c| {
                    Ok(Admitted::taken(Some(super::Balance::of_account(&c.view))))
                })
            }
        }
    }
}
