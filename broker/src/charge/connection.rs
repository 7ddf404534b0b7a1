//! A connection's own buckets and how a frame is charged to them: what a
//! frame costs and whether this connection's budgets let it through
//! ([`Admission`], owned by the socket actor, so it needs no locks; pure
//! functions of `now`, so it is tested and benchmarked without a socket),
//! then the plan's rules and the account sample.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Admitted, Connection, Ledger, Outcome, Price, Reason, Refused};
use crate::admission::{CostExceedsMax, check_single};
use crate::config::{LimitName, Limits};
use crate::exceeded::Exceeded;
use crate::limiter::TokenBucket;
use crate::metrics::Layer;
use crate::protocol::{ClientFrame, Op};
use crate::rules::{self, ConnRules, RuleVerdict};

/// The outcome of admitting one frame.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Admit,
    /// Dropped by the per-connection budget; a token is `retry_after` away.
    Drop {
        retry_after: Duration,
        reason: &'static str,
    },
    /// The price is above the largest single charge: no retry can help.
    TooCostly {
        cost: u32,
        max: u32,
    },
}

/// What a dry-run limit would have done, for the caller to log and count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shadow {
    pub reason: &'static str,
}

#[derive(Debug)]
pub struct Admission {
    limits: Arc<Limits>,
    messages: TokenBucket,
    bytes: Option<TokenBucket>,
}

fn bytes_bucket(limits: &Limits, now: Instant) -> Option<TokenBucket> {
    (limits.bytes_per_sec > 0).then(|| {
        let burst = if limits.bytes_burst > 0 {
            limits.bytes_burst
        } else {
            limits.bytes_per_sec
        };
        TokenBucket::new(burst as f64, limits.bytes_per_sec as f64, now)
    })
}

impl Admission {
    pub fn new(limits: Arc<Limits>, now: Instant) -> Admission {
        Admission {
            messages: TokenBucket::new(f64::from(limits.burst), limits.messages_per_sec, now),
            bytes: bytes_bucket(&limits, now),
            limits,
        }
    }

    pub fn limits(&self) -> &Arc<Limits> {
        &self.limits
    }

    /// Applies new limits (a config reload) keeping current balances.
    pub fn reconfigure(&mut self, limits: Arc<Limits>, now: Instant) {
        self.messages
            .reconfigure(f64::from(limits.burst), limits.messages_per_sec, now);
        match (&mut self.bytes, limits.bytes_per_sec > 0) {
            (Some(b), true) => {
                let burst = if limits.bytes_burst > 0 {
                    limits.bytes_burst
                } else {
                    limits.bytes_per_sec
                };
                b.reconfigure(burst as f64, limits.bytes_per_sec as f64, now);
            }
            _ => self.bytes = bytes_bucket(&limits, now),
        }
        self.limits = limits;
    }

    /// The frame's price in message-budget units (seed 004); a publish is
    /// priced by [`crate::pricing::publish`] with the channel's current
    /// subscriber count from `subscribers`.
    pub fn price(&self, frame: &ClientFrame<'_>, subscribers: impl FnOnce(&str) -> u64) -> u32 {
        let c = &self.limits.costs;
        match frame {
            ClientFrame::Subscribe { since, .. } => crate::pricing::subscribe(c, since.is_some()),
            ClientFrame::Unsubscribe { .. } => c.unsubscribe,
            ClientFrame::Publish { channel, data, .. } => {
                crate::pricing::publish(c, data.get().len(), subscribers(channel))
            }
            ClientFrame::Budget { .. } => c.budget,
            ClientFrame::Refresh { .. } => c.refresh,
            ClientFrame::Presence { limit, .. } => crate::pricing::presence(c, *limit),
            ClientFrame::PresenceStats { .. } => c.presence_stats,
            ClientFrame::Rpc { .. } => c.rpc,
        }
    }

    /// Price of a frame that did not parse, or a binary frame.
    pub fn malformed_price(&self) -> u32 {
        self.limits.costs.malformed
    }

    /// Charges `cost` units and `bytes` bytes, or refuses. A refused frame
    /// takes nothing from any bucket. Dry-run limits record into `shadow`
    /// and let the frame through.
    pub fn admit(
        &mut self,
        cost: u32,
        bytes: usize,
        now: Instant,
        shadow: &mut Option<Shadow>,
    ) -> Verdict {
        if let Err(CostExceedsMax { cost, max }) = check_single(cost, self.limits.costs.max_single)
        {
            if self.limits.is_dry_run(LimitName::Cost) {
                *shadow = Some(Shadow {
                    reason: "cost_exceeds_max",
                });
            } else {
                return Verdict::TooCostly { cost, max };
            }
        }
        let cost_f = f64::from(cost);
        if let Err(wait) = self.messages.try_take(cost_f, now) {
            if self.limits.is_dry_run(LimitName::Messages) {
                *shadow = Some(Shadow {
                    reason: "rate_limited",
                });
            } else {
                return Verdict::Drop {
                    retry_after: wait,
                    reason: "rate_limited",
                };
            }
        }
        if let Some(b) = &mut self.bytes
            && let Err(wait) = b.try_take(bytes as f64, now)
        {
            if self.limits.is_dry_run(LimitName::Bytes) {
                *shadow = Some(Shadow {
                    reason: "bytes_limited",
                });
            } else {
                self.messages.refund(cost_f);
                return Verdict::Drop {
                    retry_after: wait,
                    reason: "bytes_limited",
                };
            }
        }
        Verdict::Admit
    }

    /// Gives back a charge a later check refused.
    pub fn refund(&mut self, cost: u32, bytes: usize) {
        self.messages.refund(f64::from(cost));
        if let Some(b) = &mut self.bytes {
            b.refund(bytes as f64);
        }
    }

    /// Takes `units` from the message budget even below zero: what they
    /// bought cannot wait (a recovery delivered, an SSE stream's opening);
    /// the connection's next frames wait for the refill instead.
    pub fn owe(&mut self, units: u32, now: Instant) {
        if units > 0 {
            self.messages.force_take(f64::from(units), now);
        }
    }

    /// Time until the next message token (for `retryAfterMs`).
    pub fn next_token(&mut self, now: Instant) -> Duration {
        self.messages.wait_at(1.0, now)
    }

    /// (remaining, capacity, refill/s) of the message budget.
    pub fn balance(&mut self, now: Instant) -> (f64, f64, f64) {
        (
            self.messages.remaining(now),
            self.messages.capacity(),
            self.messages.rate(),
        )
    }
}

/// A socket frame's charge: [`Ledger::charge`] with [`Payer::Connection`].
impl Ledger<'_> {
    /// A socket frame: single-charge limit, message and byte buckets, the
    /// plan's rules (whose refusal gives the buckets back), then the
    /// account sample. Allocates nothing on the admitting path.
    #[inline]
    pub(super) fn connection(self, c: Connection<'_>, price: Price<'_>, now: Instant) -> Outcome {
        let Connection {
            admission,
            sampler,
            rules,
            account,
            conn,
        } = c;
        let event = |reason: &'static str, reset: Duration, dry: bool| {
            let mut e = Exceeded::new(Layer::Connection, reason, account)
                .conn(conn)
                .reset(reset)
                .dry_run(dry);
            if let Some(ch) = price.channel {
                e = e.channel(ch);
            }
            e.emit(self.metrics);
        };
        let mut shadow = None;
        let verdict = match price.max_single {
            _ if price.owed => {
                admission.owe(price.units, now);
                Verdict::Admit
            }
            Some(_) => admission.admit(price.units, price.bytes, now, &mut shadow),
            // Charged whatever it costs; a dry-run limit's would-be refusal
            // of garbage is not an operation to shadow.
            None => match admission.admit(price.units, price.bytes, now, &mut None) {
                Verdict::TooCostly { .. } => Verdict::Admit,
                v => v,
            },
        };
        match verdict {
            Verdict::Admit => {}
            Verdict::Drop {
                retry_after,
                reason,
            } => {
                event(reason, retry_after, false);
                return Err(Refused {
                    reason: if reason == "bytes_limited" {
                        Reason::BytesLimited
                    } else {
                        Reason::RateLimited
                    },
                    retry_after,
                    balance: None,
                });
            }
            Verdict::TooCostly { cost, max } => {
                event("cost_exceeds_max", Duration::ZERO, false);
                return Err(Refused {
                    reason: Reason::CostExceedsMax { cost, max },
                    retry_after: Duration::ZERO,
                    balance: None,
                });
            }
        }
        if let Some(Shadow { reason }) = shadow {
            event(reason, Duration::ZERO, true);
        }
        if let (Some((op, conn_rules)), Some(channel)) = (rules, price.channel)
            && !admission.limits().rules.is_empty()
        {
            // The verdict borrows nothing from the limits, so the buckets
            // can be given back after it (no `Arc` clone per frame).
            let checked = self.rules(
                admission.limits(),
                op,
                account,
                conn,
                channel,
                conn_rules,
                now,
            );
            if let Err(r) = checked {
                self.refund(admission, &price);
                return Err(r);
            }
        }
        Ok(Admitted {
            balance: None,
            shadow: shadow.is_some(),
            sample: sampler.and_then(|s| s.admit(price.units, now)),
        })
    }

    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn rules(
        self,
        limits: &Limits,
        op: Op,
        account: &str,
        conn: &str,
        channel: &str,
        conn_rules: &mut ConnRules,
        now: Instant,
    ) -> Result<(), Refused> {
        let event = |rule: &str, reset: Duration, dry: bool| {
            Exceeded::new(Layer::Rule, "rate_limited", account)
                .rule(rule)
                .channel(channel)
                .conn(conn)
                .reset(reset)
                .dry_run(dry)
                .emit(self.metrics);
        };
        let mut shadows = Vec::new();
        let verdict = rules::check(
            limits,
            op,
            account,
            channel,
            self.rules,
            conn_rules,
            now,
            &mut shadows,
        );
        for s in shadows {
            event(&s.rule.id, s.wait, true);
        }
        match verdict {
            RuleVerdict::Pass => Ok(()),
            RuleVerdict::Refuse { rule, wait, hold } => {
                event(&rule.id, wait, false);
                Err(Refused {
                    reason: Reason::Rule { hold },
                    retry_after: wait,
                    balance: None,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::frames;

    fn admission(edit: impl FnOnce(&mut Limits)) -> Admission {
        let mut l = Limits::default();
        edit(&mut l);
        Admission::new(Arc::new(l), Instant::now())
    }

    #[test]
    fn prices_follow_the_cost_table() {
        let a = admission(|l| {
            l.costs.publish_per_kib = 2;
            l.costs.recovery = 3;
        });
        let big = format!(
            r#"{{"type":"publish","channel":"a","data":"{}"}}"#,
            "x".repeat(2000)
        );
        assert_eq!(a.price(&frames::parse(&big, 32).unwrap(), |_| 0), 1 + 2 * 2);
        let sub = frames::parse(r#"{"type":"subscribe","channel":"a","since":1}"#, 32).unwrap();
        assert_eq!(a.price(&sub, |_| 0), 4);
        let budget = frames::parse(r#"{"type":"budget"}"#, 32).unwrap();
        assert_eq!(a.price(&budget, |_| 0), 0);
        let refresh = frames::parse(r#"{"type":"refresh","token":"t"}"#, 32).unwrap();
        assert_eq!(a.price(&refresh, |_| 0), 1, "a refresh is not free");
    }

    #[test]
    fn too_costly_is_refused_without_touching_the_bucket() {
        let mut a = admission(|l| l.costs.max_single = 5);
        let now = Instant::now();
        let mut s = None;
        assert_eq!(
            a.admit(6, 10, now, &mut s),
            Verdict::TooCostly { cost: 6, max: 5 }
        );
        assert_eq!(a.balance(now).0, 20.0);
    }

    #[test]
    fn byte_budget_refunds_the_message_token() {
        let mut a = admission(|l| {
            l.bytes_per_sec = 1000;
        });
        let now = Instant::now();
        let mut s = None;
        assert_eq!(a.admit(1, 900, now, &mut s), Verdict::Admit);
        assert!(matches!(
            a.admit(1, 200, now, &mut s),
            Verdict::Drop {
                reason: "bytes_limited",
                ..
            }
        ));
        assert_eq!(
            a.balance(now).0,
            19.0,
            "only the admitted frame was charged"
        );
    }

    #[test]
    fn dry_run_observes_and_admits() {
        let mut a = admission(|l| l.dry_run = vec![LimitName::Messages]);
        let now = Instant::now();
        let mut shadowed = 0;
        for _ in 0..25 {
            let mut s = None;
            assert_eq!(a.admit(1, 10, now, &mut s), Verdict::Admit);
            shadowed += usize::from(s.is_some());
        }
        assert_eq!(shadowed, 5);
    }

    #[test]
    fn reconfigure_applies_new_rate() {
        let mut a = admission(|_| {});
        let now = Instant::now();
        let mut s = None;
        for _ in 0..20 {
            a.admit(1, 1, now, &mut s);
        }
        let l = Limits {
            messages_per_sec: 100.0,
            ..Limits::default()
        };
        a.reconfigure(Arc::new(l), now);
        assert_eq!(a.next_token(now), Duration::from_millis(10));
    }
}
