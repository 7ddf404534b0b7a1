//! The cluster-wide limits through Redis: account budgets, connection caps,
//! the per-identity handshake bucket and API-key buckets, each one script
//! call; locally, at this node's share, while Redis is away.

use std::time::{Duration, Instant};

use super::resharding::invoke_following;
use super::{RedisBridge, ms, scripts};
use crate::cluster::{CapReached, Charged, KeyCharge, Pending};
use crate::config::Limits;
use crate::limiter::sampled::CREDIT_HORIZON;
use crate::protocol::wire::BudgetView;

impl RedisBridge {
    /// The bucket script (`owed`: taken even below zero); `None` when
    /// Redis is away.
    async fn bucket(
        &self,
        key: String,
        capacity: f64,
        rate: f64,
        cost: f64,
        owed: bool,
    ) -> Option<(bool, u64, u64, u64)> {
        let (mut conn, _in_flight) = self.command(&key)?;
        let result: redis::RedisResult<(i64, i64, i64, i64)> = self
            .metrics
            .time_script(
                "bucket",
                invoke_following(
                    scripts::BUCKET
                        .key(&key)
                        .arg(capacity)
                        .arg(rate)
                        .arg(cost)
                        .arg(u8::from(owed)),
                    &mut conn,
                ),
            )
            .await;
        match result {
            Ok((allowed, remaining, retry, full)) => Some((
                allowed == 1,
                remaining.max(0) as u64,
                retry.max(0) as u64,
                full.max(0) as u64,
            )),
            Err(e) => {
                self.failed_at(&key, &e);
                None
            }
        }
    }

    /// The account script (`owed`: taken even below zero); `None` when
    /// Redis is away.
    async fn account_bucket(
        &self,
        key: String,
        capacity: f64,
        rate: f64,
        (units, owed): (u32, bool),
        since: Instant,
    ) -> Option<(bool, u64, u64)> {
        let (mut conn, _in_flight) = self.command(&key)?;
        let age_ms = since.elapsed().as_millis() as u64;
        let result: redis::RedisResult<(i64, i64, i64)> = invoke_following(
            scripts::ACCOUNT
                .key(&key)
                .arg(capacity)
                .arg(rate)
                .arg(units)
                .arg(age_ms)
                .arg(CREDIT_HORIZON.as_millis() as u64)
                .arg(u8::from(owed)),
            &mut conn,
        )
        .await;
        match result {
            Ok((allowed, remaining, retry)) => {
                Some((allowed == 1, remaining.max(0) as u64, retry.max(0) as u64))
            }
            Err(e) => {
                self.failed_at(&key, &e);
                None
            }
        }
    }

    /// A sampled charge of the account budget, or with `owed` a debt
    /// taken even below zero ([`crate::cluster::LimiterStore::owe_account`]);
    /// this node's share of it while Redis is away.
    pub(super) fn charge_account_impl(
        &self,
        account: &str,
        (units, owed): (u32, bool),
        since: Instant,
        limits: &Limits,
    ) -> Pending<Charged> {
        let local = move |this: &RedisBridge, account: &str, limits: &Limits| {
            let share = this.share_at(&this.key("acct", account));
            let now = Instant::now();
            if owed {
                this.local.owe_account(account, units, limits, share, now)
            } else {
                this.local
                    .charge_account(account, units, since, limits, share, now)
            }
        };
        if self.share_at(&self.key("acct", account)) < 1.0 {
            return Pending::Ready(local(self, account, limits));
        }
        let this = self.arc();
        let (account, limits) = (account.to_owned(), limits.clone());
        Pending::later(async move {
            let (cap, rate) = (
                f64::from(limits.account_burst),
                limits.account_messages_per_sec,
            );
            match this
                .account_bucket(this.key("acct", &account), cap, rate, (units, owed), since)
                .await
            {
                Some((allowed, remaining, retry)) => Charged {
                    allowed,
                    retry_after: ms(retry),
                    view: BudgetView {
                        remaining,
                        capacity: cap as u64,
                        refill_per_sec: rate,
                    },
                },
                None => local(&this, &account, &limits),
            }
        })
    }

    pub(super) fn announce_breach_impl(&self, account: &str) {
        let topic = self.control_topic();
        let Some((mut conn, in_flight)) = self.command(&topic) else {
            return;
        };
        let Some(message) = self
            .control
            .seal(&format!("breach:{account}"), super::control::now_ms())
        else {
            return;
        };
        actix_rt::spawn(async move {
            let r: redis::RedisResult<i64> = redis::cmd("PUBLISH")
                .arg(&topic)
                .arg(message)
                .query_async(&mut conn)
                .await;
            if let Err(e) = r {
                in_flight.0.failed_at(&topic, &e);
            }
        });
    }

    pub(super) fn reserve_connection_impl(
        &self,
        account: &str,
        max: u32,
    ) -> Pending<Result<u32, CapReached>> {
        let key = self.key("conns", account);
        if !self.up_at(&key) {
            return Pending::Ready(self.local.reserve_connection(account, max));
        }
        let this = self.arc();
        let account = account.to_owned();
        Pending::later(async move {
            let Some((mut conn, _in_flight)) = this.command(&key) else {
                return this.local.reserve_connection(&account, max);
            };
            let result: redis::RedisResult<(i64, i64)> = this
                .metrics
                .time_script(
                    "reserve_connection",
                    invoke_following(&this.reserve_invocation(&account, max), &mut conn),
                )
                .await;
            match result {
                Ok((1, open)) => {
                    this.local.count_connection(&account);
                    Ok(open as u32)
                }
                Ok((_, open)) => Err(CapReached {
                    open: open as u32,
                    max,
                }),
                Err(e) => {
                    this.failed_at(&key, &e);
                    this.local.reserve_connection(&account, max)
                }
            }
        })
    }

    pub(super) fn release_connection_impl(&self, account: &str) {
        self.local.release_connection(account);
        let key = self.key("conns", account);
        let Some((mut conn, in_flight)) = self.command(&key) else {
            return;
        };
        let invocation = self.release_invocation(account);
        actix_rt::spawn(async move {
            let r: redis::RedisResult<i64> = in_flight
                .0
                .metrics
                .time_script(
                    "release_connection",
                    invoke_following(&invocation, &mut conn),
                )
                .await;
            if let Err(e) = r {
                in_flight.0.failed_at(&key, &e);
            }
        });
    }

    pub(super) fn handshake_impl(
        &self,
        account: &str,
        limits: &Limits,
    ) -> Pending<Result<(), Duration>> {
        let share = self.share_at(&self.key("hs", account));
        if share < 1.0 {
            return Pending::Ready(self.local.handshake(account, limits, share, Instant::now()));
        }
        let this = self.arc();
        let (account, limits) = (account.to_owned(), limits.clone());
        Pending::later(async move {
            let (cap, rate) = (
                f64::from(limits.handshake_burst),
                limits.handshake_refill_per_sec,
            );
            match this
                .bucket(this.key("hs", &account), cap, rate, 1.0, false)
                .await
            {
                Some((true, ..)) => Ok(()),
                Some((false, _, retry, _)) => Err(ms(retry)),
                None => this.local.handshake(
                    &account,
                    &limits,
                    this.share_at(&this.key("hs", &account)),
                    Instant::now(),
                ),
            }
        })
    }

    pub(super) fn charge_key_impl(
        &self,
        key: &str,
        (cost, owed): (f64, bool),
        capacity: f64,
        rate: f64,
    ) -> Pending<KeyCharge> {
        let local = move |this: &RedisBridge, key: &str| {
            let share = this.share_at(&this.key("key", key));
            let now = Instant::now();
            if owed {
                this.local.owe_key(key, cost, capacity, rate, share, now)
            } else {
                this.local.charge_key(key, cost, capacity, rate, share, now)
            }
        };
        if self.share_at(&self.key("key", key)) < 1.0 {
            return Pending::Ready(local(self, key));
        }
        let this = self.arc();
        let key = key.to_owned();
        Pending::later(async move {
            match this
                .bucket(this.key("key", &key), capacity, rate, cost, owed)
                .await
            {
                Some((allowed, remaining, retry, full)) => KeyCharge {
                    allowed,
                    limit: capacity as u64,
                    remaining,
                    reset: ms(full),
                    retry_after: ms(retry),
                },
                None => local(&this, &key),
            }
        })
    }

    /// Gives back `units` to the bucket at `key` (Redis when it answers,
    /// else this node's share of it); the balance after it.
    async fn refund_at(&self, key: String, units: f64, capacity: f64) -> Option<u64> {
        let (mut conn, _in_flight) = self.command(&key)?;
        let result: redis::RedisResult<i64> = self
            .metrics
            .time_script(
                "refund",
                invoke_following(
                    scripts::REFUND.key(&key).arg(capacity).arg(units),
                    &mut conn,
                ),
            )
            .await;
        match result {
            Ok(n) => Some(n.max(0) as u64),
            Err(e) => {
                self.failed_at(&key, &e);
                None
            }
        }
    }

    pub(super) fn refund_key_impl(&self, key: &str, units: f64, capacity: f64) -> Pending<u64> {
        let share = self.share_at(&self.key("key", key));
        if share < 1.0 {
            return Pending::Ready(self.local.refund_key(
                key,
                units,
                capacity,
                share,
                Instant::now(),
            ));
        }
        let this = self.arc();
        let key = key.to_owned();
        Pending::later(async move {
            match this.refund_at(this.key("key", &key), units, capacity).await {
                Some(n) => n,
                None => {
                    let share = this.share_at(&this.key("key", &key));
                    this.local
                        .refund_key(&key, units, capacity, share, Instant::now())
                }
            }
        })
    }

    pub(super) fn refund_account_impl(
        &self,
        account: &str,
        units: u32,
        limits: &Limits,
    ) -> Pending<u64> {
        let cap = f64::from(limits.account_burst);
        let share = self.share_at(&self.key("acct", account));
        let local = move |this: &RedisBridge, account: &str| {
            this.local
                .refund_account(account, f64::from(units), Instant::now())
                .unwrap_or((cap * share) as u64)
        };
        if share < 1.0 {
            return Pending::Ready(local(self, account));
        }
        let this = self.arc();
        let account = account.to_owned();
        Pending::later(async move {
            match this
                .refund_at(this.key("acct", &account), f64::from(units), cap)
                .await
            {
                Some(n) => n,
                None => local(&this, &account),
            }
        })
    }
}
