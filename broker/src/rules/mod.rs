//! Rules (seed 003): extra limits by account, channel, account+channel or
//! connection, each `capacity` operations per `window_ms`. Every rule that
//! applies must pass; tokens taken by earlier rules are given back when a
//! later one refuses, so a retransmitted frame is not charged twice.
//!
//! Account, channel and account+channel buckets are shared by the node's
//! sockets ([`RuleBuckets`]); connection buckets live in the socket
//! ([`ConnRules`]), with its handles to the shared ones it uses.

mod buckets;
#[cfg(test)]
mod tests;

use std::time::{Duration, Instant};

pub use buckets::{ConnRules, RuleBuckets};

use crate::config::{LimitName, Limits, Op, Rule};

/// What the rules decided for one operation.
#[derive(Debug, PartialEq)]
pub enum RuleVerdict<'r> {
    Pass,
    /// Refused by `rule`; a token is `wait` away. `hold` when the wait is
    /// short enough to hold the socket instead of dropping the frame.
    Refuse {
        rule: &'r Rule,
        wait: Duration,
        hold: bool,
    },
}

/// A rule that would have refused but is in dry-run mode.
#[derive(Debug, PartialEq)]
pub struct RuleShadow<'r> {
    pub rule: &'r Rule,
    pub wait: Duration,
}

fn applies(rule: &Rule, op: Op, channel: &str) -> bool {
    rule.ops.contains(&op)
        && rule
            .namespace
            .as_deref()
            .is_none_or(|ns| in_namespace(channel, ns))
}

/// Whether `channel`'s namespace is `ns` (`namespace(channel) == ns`),
/// checked where the namespace would end rather than by searching the
/// channel for its first `:`, on every frame.
#[inline]
fn in_namespace(channel: &str, ns: &str) -> bool {
    let (c, n) = (channel.as_bytes(), ns.as_bytes());
    c.len() >= n.len()
        && c.get(n.len()).is_none_or(|&b| b == b':')
        && buckets::same(&c[..n.len()], n)
        && !n.contains(&b':')
}

/// Gives back the tokens a passing [`check`] took for one operation that a
/// later step refused (a payer's bucket): every applicable rule but those
/// in `shadows`, which refused in dry run and took nothing.
pub fn give_back(
    limits: &Limits,
    op: Op,
    account: &str,
    channel: &str,
    shared: &RuleBuckets,
    conn: &mut ConnRules,
    shadows: &[RuleShadow<'_>],
) {
    for rule in limits.rules.iter().filter(|r| applies(r, op, channel)) {
        if !shadows.iter().any(|s| std::ptr::eq(s.rule, rule)) {
            conn.refund(rule, account, channel, shared);
        }
    }
}

/// Whether these limits skip rules for this connection (service accounts,
/// exempt roles).
pub fn skipped(limits: &Limits, role: Option<&str>) -> bool {
    limits.skip_rules || role.is_some_and(|r| limits.skip_rules_for_roles.iter().any(|x| x == r))
}

/// Checks every applicable rule for one operation. `shadows` collects the
/// dry-run rules that would have refused. Allocates nothing on the path
/// that admits, once the socket holds the buckets it uses (the first use
/// of a connection rule, or of a shared bucket it holds no handle to,
/// allocates).
#[allow(clippy::too_many_arguments)]
pub fn check<'r>(
    limits: &'r Limits,
    op: Op,
    account: &str,
    channel: &str,
    shared: &RuleBuckets,
    conn: &mut ConnRules,
    now: Instant,
    shadows: &mut Vec<RuleShadow<'r>>,
) -> RuleVerdict<'r> {
    let first_shadow = shadows.len();
    let applicable = || limits.rules.iter().filter(move |r| applies(r, op, channel));
    for (i, rule) in applicable().enumerate() {
        match conn.take(rule, account, channel, shared, now) {
            Ok(()) => {}
            Err(wait) if rule.dry_run || limits.is_dry_run(LimitName::Rules) => {
                shadows.push(RuleShadow { rule, wait })
            }
            Err(wait) => {
                // Every earlier applicable rule took a token, except those
                // that were shadowed (they refused, in dry run): give back.
                for earlier in applicable().take(i) {
                    let shadowed = shadows[first_shadow..]
                        .iter()
                        .any(|s| std::ptr::eq(s.rule, earlier));
                    if !shadowed {
                        conn.refund(earlier, account, channel, shared);
                    }
                }
                let hold = rule.hold_max_delay_ms > 0
                    && wait <= Duration::from_millis(rule.hold_max_delay_ms);
                return RuleVerdict::Refuse { rule, wait, hold };
            }
        }
    }
    RuleVerdict::Pass
}
