//! Rules (seed 003): extra limits by account, channel, account+channel or
//! connection, each `capacity` operations per `window_ms`. Every rule that
//! applies must pass; tokens taken by earlier rules are given back when a
//! later one refuses, so a retransmitted frame is not charged twice.
//!
//! Account, channel and account+channel buckets are shared by the node's
//! sockets ([`RuleBuckets`]); connection buckets live in the socket.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::config::{LimitName, Limits, Op, Rule, TrackBy};
use crate::limiter::{KeyedBuckets, TokenBucket};
use crate::protocol::channel::namespace;

/// Node-wide rule buckets.
#[derive(Debug, Default)]
pub struct RuleBuckets {
    shared: KeyedBuckets<String>,
}

impl RuleBuckets {
    pub fn sweep(&self, now: Instant) {
        self.shared.sweep(now);
    }
}

/// A socket's own rule buckets (`track_by = "connection"`), and the
/// buffer shared-bucket keys are written into, so that checking a frame
/// allocates nothing once the socket's buckets exist.
#[derive(Debug, Default)]
pub struct ConnRules {
    buckets: HashMap<String, TokenBucket, foldhash::fast::RandomState>,
    key: String,
}

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
            .is_none_or(|ns| namespace(channel) == ns)
}

/// Whether these limits skip rules for this connection (service accounts,
/// exempt roles).
pub fn skipped(limits: &Limits, role: Option<&str>) -> bool {
    limits.skip_rules || role.is_some_and(|r| limits.skip_rules_for_roles.iter().any(|x| x == r))
}

fn key(buf: &mut String, rule: &Rule, account: &str, channel: &str) {
    buf.clear();
    buf.push_str(&rule.id);
    buf.push('\u{0}');
    match rule.track_by {
        TrackBy::Account => buf.push_str(account),
        TrackBy::Channel => {
            buf.push('\u{0}');
            buf.push_str(channel);
        }
        TrackBy::AccountChannel | TrackBy::Connection => {
            buf.push_str(account);
            buf.push('\u{0}');
            buf.push_str(channel);
        }
    }
}

/// Takes one token from `rule`'s bucket for this operation.
fn take(
    rule: &Rule,
    account: &str,
    channel: &str,
    shared: &RuleBuckets,
    conn: &mut ConnRules,
    now: Instant,
) -> Result<(), Duration> {
    let cap = f64::from(rule.capacity);
    let rate = rule.refill_per_sec();
    if rule.track_by == TrackBy::Connection {
        if let Some(b) = conn.buckets.get_mut(rule.id.as_str()) {
            return b.try_take(1.0, now);
        }
        let mut b = TokenBucket::new(cap, rate, now);
        let result = b.try_take(1.0, now);
        conn.buckets.insert(rule.id.clone(), b);
        result
    } else {
        key(&mut conn.key, rule, account, channel);
        shared
            .shared
            .try_take(conn.key.as_str(), 1.0, cap, rate, now)
    }
}

/// Gives back the token `take` took for `rule`.
fn refund(rule: &Rule, account: &str, channel: &str, shared: &RuleBuckets, conn: &mut ConnRules) {
    if rule.track_by == TrackBy::Connection {
        if let Some(b) = conn.buckets.get_mut(rule.id.as_str()) {
            b.refund(1.0);
        }
    } else {
        key(&mut conn.key, rule, account, channel);
        shared.shared.refund(conn.key.as_str(), 1.0);
    }
}

/// Checks every applicable rule for one operation. `shadows` collects the
/// dry-run rules that would have refused. Allocates nothing on the path
/// that admits (a socket's first use of a connection rule creates it).
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
    let all_dry = limits.is_dry_run(LimitName::Rules);
    let first_shadow = shadows.len();
    let applicable = || limits.rules.iter().filter(move |r| applies(r, op, channel));
    for (i, rule) in applicable().enumerate() {
        match take(rule, account, channel, shared, conn, now) {
            Ok(()) => {}
            Err(wait) if rule.dry_run || all_dry => shadows.push(RuleShadow { rule, wait }),
            Err(wait) => {
                // Every earlier applicable rule took a token, except those
                // that were shadowed (they refused, in dry run): give back.
                for earlier in applicable().take(i) {
                    let shadowed = shadows[first_shadow..]
                        .iter()
                        .any(|s| std::ptr::eq(s.rule, earlier));
                    if !shadowed {
                        refund(earlier, account, channel, shared, conn);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(id: &str, track_by: TrackBy, capacity: u32, window_ms: u64) -> Rule {
        Rule {
            id: id.into(),
            track_by,
            capacity,
            window_ms,
            namespace: None,
            ops: vec![Op::Publish],
            hold_max_delay_ms: 0,
            dry_run: false,
        }
    }

    fn limits(rules: Vec<Rule>) -> Limits {
        Limits {
            rules,
            ..Limits::default()
        }
    }

    #[test]
    fn a_later_refusal_refunds_earlier_rules() {
        let l = limits(vec![
            rule("per-user", TrackBy::Account, 10, 1000),
            rule("per-doc", TrackBy::Channel, 1, 60_000),
        ]);
        let shared = RuleBuckets::default();
        let mut conn = ConnRules::default();
        let now = Instant::now();
        let mut sh = Vec::new();
        assert_eq!(
            check(
                &l,
                Op::Publish,
                "a",
                "doc:1",
                &shared,
                &mut conn,
                now,
                &mut sh
            ),
            RuleVerdict::Pass
        );
        for _ in 0..5 {
            let v = check(
                &l,
                Op::Publish,
                "a",
                "doc:1",
                &shared,
                &mut conn,
                now,
                &mut sh,
            );
            assert!(matches!(v, RuleVerdict::Refuse { rule, .. } if rule.id == "per-doc"));
        }
        // Only the one admitted publish was charged to per-user.
        let mut buf = String::new();
        key(&mut buf, &l.rules[0], "a", "doc:1");
        assert_eq!(shared.shared.remaining(buf.as_str(), 10.0, now), 9.0);
    }

    #[test]
    fn keys_separate_accounts_channels_and_pairs() {
        let l = limits(vec![rule("pair", TrackBy::AccountChannel, 1, 60_000)]);
        let shared = RuleBuckets::default();
        let mut conn = ConnRules::default();
        let now = Instant::now();
        let mut sh = Vec::new();
        let mut go = |a: &str, c: &str| {
            check(&l, Op::Publish, a, c, &shared, &mut conn, now, &mut sh) == RuleVerdict::Pass
        };
        assert!(go("a", "doc:1"));
        assert!(!go("a", "doc:1"));
        assert!(go("b", "doc:1"));
        assert!(go("a", "doc:2"));
    }

    #[test]
    fn namespace_and_op_filters() {
        let mut r = rule("docs", TrackBy::Channel, 1, 60_000);
        r.namespace = Some("doc".into());
        let l = limits(vec![r]);
        let shared = RuleBuckets::default();
        let mut conn = ConnRules::default();
        let now = Instant::now();
        let mut sh = Vec::new();
        for _ in 0..3 {
            assert_eq!(
                check(
                    &l,
                    Op::Publish,
                    "a",
                    "chat:1",
                    &shared,
                    &mut conn,
                    now,
                    &mut sh
                ),
                RuleVerdict::Pass
            );
            assert_eq!(
                check(
                    &l,
                    Op::Subscribe,
                    "a",
                    "doc:1",
                    &shared,
                    &mut conn,
                    now,
                    &mut sh
                ),
                RuleVerdict::Pass
            );
        }
    }

    #[test]
    fn hold_when_the_wait_is_short_dry_run_never_refuses() {
        let mut r = rule("conn", TrackBy::Connection, 2, 100);
        r.hold_max_delay_ms = 60;
        let mut dry = rule("shadow", TrackBy::Account, 1, 60_000);
        dry.dry_run = true;
        let l = limits(vec![dry, r]);
        let shared = RuleBuckets::default();
        let mut conn = ConnRules::default();
        let now = Instant::now();
        let mut sh = Vec::new();
        assert_eq!(
            check(&l, Op::Publish, "a", "c", &shared, &mut conn, now, &mut sh),
            RuleVerdict::Pass
        );
        assert_eq!(
            check(&l, Op::Publish, "a", "c", &shared, &mut conn, now, &mut sh),
            RuleVerdict::Pass
        );
        assert_eq!(
            sh.len(),
            1,
            "the dry-run rule would have refused the second"
        );
        match check(&l, Op::Publish, "a", "c", &shared, &mut conn, now, &mut sh) {
            RuleVerdict::Refuse { rule, wait, hold } => {
                assert_eq!(
                    (rule.id.as_str(), wait, hold),
                    ("conn", Duration::from_millis(50), true)
                );
            }
            v => panic!("{v:?}"),
        }
    }

    #[test]
    fn skip_for_service_accounts_and_roles() {
        let mut l = limits(vec![]);
        l.skip_rules_for_roles = vec!["service".into()];
        assert!(skipped(&l, Some("service")));
        assert!(!skipped(&l, Some("user")));
        l.skip_rules = true;
        assert!(skipped(&l, None));
    }
}
