//! The plan's rules (seed 003, `rules/`) for a payer without a connection:
//! an API key's publish (HTTP, gRPC), a client publish's identity, a
//! GraphQL publish (issue 42: they held on socket frames only, so 15 of 15
//! publishes went through a "5 per minute on this document" rule over
//! client publish and the GraphQL mutation). A rule keys on the account,
//! the channel or both, so it holds across the fronts; a `connection`
//! rule binds one request here (a request is its own connection).
//!
//! They are checked before the payer's bucket, and their tokens are given
//! back when the bucket then refuses, as a connection gives its buckets
//! back when a rule refuses: a refused operation costs no rule a token.
//!
//! Bounds: a request's own [`ConnRules`] lives as long as the request. The
//! node's shared rule buckets it reaches are the sockets' map
//! ([`crate::rules::RuleBuckets`]), swept of full buckets: it holds the
//! buckets of operations admitted within their rules' windows, plus those
//! that requests refused after the rules (their tokens given back, so
//! full) created since the last sweep, at most one per authenticated,
//! priced request.

use std::time::{Duration, Instant};

use super::{Ledger, Price, Reason, Refused};
use crate::config::Limits;
use crate::exceeded::Exceeded;
use crate::metrics::Layer;
use crate::protocol::Op;
use crate::rules::{self, ConnRules, RuleShadow, RuleVerdict};

/// The rules one operation passed, to give back if a later step refuses.
pub struct RulesPassed<'a> {
    op: Op,
    channel: &'a str,
    account: &'a str,
    limits: &'a Limits,
    /// This request's own buckets (`track_by = "connection"`) and handles.
    conn: ConnRules,
    /// Rules that refused in dry run (they took nothing).
    shadows: Vec<RuleShadow<'a>>,
}

impl<'a> Ledger<'a> {
    /// Checks the plan's rules for `price`'s operation on its channel (when
    /// it names both): `Ok(None)` when no rule applies or the plan skips
    /// rules, `Ok(Some)` when every applicable rule took a token.
    pub(super) fn request_rules(
        self,
        account: &'a str,
        limits: &'a Limits,
        price: &Price<'a>,
        now: Instant,
    ) -> Result<Option<RulesPassed<'a>>, Refused> {
        let (Some(op), Some(channel)) = (price.op, price.channel) else {
            return Ok(None);
        };
        if limits.rules.is_empty() || rules::skipped(limits, None) {
            return Ok(None);
        }
        let event = |rule: &str, reset: Duration, dry: bool| {
            Exceeded::new(Layer::Rule, "rate_limited", account)
                .rule(rule)
                .channel(channel)
                .reset(reset)
                .dry_run(dry)
                .emit(self.metrics);
        };
        let mut conn = ConnRules::default();
        let mut shadows = Vec::new();
        let verdict = rules::check(
            limits,
            op,
            account,
            channel,
            self.rules,
            &mut conn,
            now,
            &mut shadows,
        );
        for s in &shadows {
            event(&s.rule.id, s.wait, true);
        }
        match verdict {
            RuleVerdict::Pass => Ok(Some(RulesPassed {
                op,
                channel,
                account,
                limits,
                conn,
                shadows,
            })),
            RuleVerdict::Refuse { rule, wait, .. } => {
                event(&rule.id, wait, false);
                Err(Refused {
                    // A request cannot be held as a socket's reading is.
                    reason: Reason::Rule { hold: false },
                    retry_after: wait,
                    balance: None,
                })
            }
        }
    }

    /// The plan's rules alone, for an operation charged as a part of a
    /// larger one (each publish of a GraphQL mutation, whose price was
    /// charged with its operation's before it ran): `Ok(None)` when no
    /// rule applies.
    pub fn rules_alone(
        self,
        account: &'a str,
        limits: &'a Limits,
        op: Op,
        channel: &'a str,
        now: Instant,
    ) -> Result<Option<RulesPassed<'a>>, Refused> {
        let price = Price::units(0, Some(channel)).rules_as(op);
        self.request_rules(account, limits, &price, now)
    }

    /// Gives back the tokens of rules an operation passed before a later
    /// step refused it.
    pub fn give_back_rules(self, passed: Option<RulesPassed<'a>>) {
        if let Some(mut p) = passed {
            rules::give_back(
                p.limits,
                p.op,
                p.account,
                p.channel,
                self.rules,
                &mut p.conn,
                &p.shadows,
            );
        }
    }
}
