//! The account supervisor: one actor per account with open sockets. It
//! holds the account's message bucket (fed by sampled charges from its
//! sockets) and its connection count, and closes every socket of the
//! account with 1008 when the account budget is exhausted.
//!
//! Sockets reserve a place before the upgrade, attach when they start and
//! detach when they stop (through [`AccountSlot`]'s drop): the actor
//! lifecycle is the count, so it cannot leak.

mod sampler;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use dashmap::DashMap;

pub use sampler::Sampler;

use crate::config::{LimitName, Limits};
use crate::exceeded::Exceeded;
use crate::limiter::TokenBucket;
use crate::metrics::{Layer, Metrics};
use crate::protocol::wire::BudgetView;
use crate::protocol::{CloseCode, ErrorCode};
use crate::socket::CloseWith;

/// Why a reservation was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapReached {
    pub open: u32,
    pub max: u32,
}

#[derive(Message)]
#[rtype(result = "Result<(), CapReached>")]
struct Reserve {
    conn: u64,
    max: u32,
    dry_run: bool,
}

#[derive(Message)]
#[rtype(result = "()")]
struct Attach {
    conn: u64,
    sink: Recipient<CloseWith>,
}

#[derive(Message)]
#[rtype(result = "()")]
struct Detach {
    conn: u64,
}

/// A socket's sampled charge: `units` admitted since its last one.
#[derive(Message)]
#[rtype(result = "BudgetView")]
pub struct Charge {
    pub units: u32,
    pub limits: Arc<Limits>,
}

/// The account budget as it stands.
#[derive(Message)]
#[rtype(result = "Option<BudgetView>")]
pub struct Balance;

pub struct AccountSupervisor {
    account: Arc<str>,
    registry: Arc<Accounts>,
    members: HashMap<u64, Option<Recipient<CloseWith>>>,
    bucket: Option<TokenBucket>,
    /// Set while a breach is being enforced, so one flood closes the
    /// account once rather than once per late charge.
    closing_since: Option<Instant>,
}

impl Actor for AccountSupervisor {
    type Context = Context<Self>;

    fn stopping(&mut self, ctx: &mut Context<Self>) -> Running {
        let me = ctx.address();
        self.registry.map.remove_if(&self.account, |_, a| *a == me);
        Running::Stop
    }
}

impl AccountSupervisor {
    fn view(&mut self, now: Instant) -> Option<BudgetView> {
        let b = self.bucket.as_mut()?;
        Some(BudgetView {
            remaining: b.remaining(now).max(0.0) as u64,
            capacity: b.capacity() as u64,
            refill_per_sec: b.rate(),
        })
    }

    /// With no sockets left, stay until the bucket has refilled (so an
    /// abusive account cannot reset it by reconnecting), then stop.
    fn schedule_retire(&mut self, ctx: &mut Context<Self>) {
        let wait = self
            .bucket
            .as_mut()
            .map_or(Duration::ZERO, |b| b.time_to_full(Instant::now()));
        ctx.run_later(wait, |act, ctx| {
            if act.members.is_empty() {
                ctx.stop();
            }
        });
    }

    fn breach(&mut self, reset: Duration) {
        let now = Instant::now();
        if self
            .closing_since
            .is_some_and(|t| now - t < Duration::from_secs(1))
        {
            return;
        }
        self.closing_since = Some(now);
        Exceeded::new(
            Layer::Account,
            ErrorCode::AccountRateLimited.as_str(),
            &self.account,
        )
        .count(self.members.len() as u64)
        .reset(reset)
        .emit(&self.registry.metrics);
        for sink in self.members.values().flatten() {
            sink.do_send(CloseWith {
                code: CloseCode::PolicyViolation,
                notice: Some(ErrorCode::AccountRateLimited),
            });
        }
    }
}

impl Handler<Reserve> for AccountSupervisor {
    type Result = Result<(), CapReached>;

    fn handle(&mut self, msg: Reserve, _: &mut Context<Self>) -> Self::Result {
        let open = self.members.len() as u32;
        if open >= msg.max {
            let e = Exceeded::new(
                Layer::Handshake,
                ErrorCode::TooManyConnections.as_str(),
                &self.account,
            )
            .dry_run(msg.dry_run);
            e.emit(&self.registry.metrics);
            if !msg.dry_run {
                return Err(CapReached { open, max: msg.max });
            }
        }
        self.members.insert(msg.conn, None);
        Ok(())
    }
}

impl Handler<Attach> for AccountSupervisor {
    type Result = ();

    fn handle(&mut self, msg: Attach, _: &mut Context<Self>) {
        self.members.insert(msg.conn, Some(msg.sink));
    }
}

impl Handler<Detach> for AccountSupervisor {
    type Result = ();

    fn handle(&mut self, msg: Detach, ctx: &mut Context<Self>) {
        self.members.remove(&msg.conn);
        if self.members.is_empty() {
            self.schedule_retire(ctx);
        }
    }
}

impl Handler<Charge> for AccountSupervisor {
    type Result = MessageResult<Charge>;

    fn handle(&mut self, msg: Charge, _: &mut Context<Self>) -> Self::Result {
        let now = Instant::now();
        let l = &msg.limits;
        let (cap, rate) = (f64::from(l.account_burst), l.account_messages_per_sec);
        let bucket = self
            .bucket
            .get_or_insert_with(|| TokenBucket::new(cap, rate, now));
        if bucket.capacity() != cap || bucket.rate() != rate {
            bucket.reconfigure(cap, rate, now);
        }
        let units = f64::from(msg.units);
        if let Err(wait) = bucket.try_take(units, now) {
            if l.is_dry_run(LimitName::AccountMessages) {
                Exceeded::new(
                    Layer::Account,
                    ErrorCode::AccountRateLimited.as_str(),
                    &self.account,
                )
                .reset(wait)
                .dry_run(true)
                .emit(&self.registry.metrics);
                // Observe only: the account keeps its traffic.
                let left = bucket.remaining(now).max(0.0);
                bucket.force_take(units.min(left), now);
            } else {
                self.breach(wait);
            }
        } else {
            self.closing_since = None;
        }
        MessageResult(self.view(now).unwrap_or(BudgetView {
            remaining: 0,
            capacity: cap as u64,
            refill_per_sec: rate,
        }))
    }
}

impl Handler<Balance> for AccountSupervisor {
    type Result = MessageResult<Balance>;

    fn handle(&mut self, _: Balance, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.view(Instant::now()))
    }
}

/// The node's account supervisors by account id.
pub struct Accounts {
    map: DashMap<Arc<str>, Addr<AccountSupervisor>>,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for Accounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Accounts({})", self.map.len())
    }
}

/// A socket's place in its account; the drop detaches it.
#[derive(Debug)]
pub struct AccountSlot {
    pub addr: Addr<AccountSupervisor>,
    conn: u64,
}

impl AccountSlot {
    /// Registers the started socket for account-wide closes.
    pub fn attach(&self, sink: Recipient<CloseWith>) {
        self.addr.do_send(Attach {
            conn: self.conn,
            sink,
        });
    }
}

impl Drop for AccountSlot {
    fn drop(&mut self) {
        self.addr.do_send(Detach { conn: self.conn });
    }
}

impl Accounts {
    pub fn new(metrics: Arc<Metrics>) -> Arc<Accounts> {
        Arc::new(Accounts {
            map: DashMap::new(),
            metrics,
        })
    }

    fn supervisor(self: &Arc<Self>, account: &str) -> Addr<AccountSupervisor> {
        if let Some(a) = self.map.get(account) {
            return a.clone();
        }
        self.map
            .entry(Arc::from(account))
            .or_insert_with(|| {
                AccountSupervisor {
                    account: Arc::from(account),
                    registry: self.clone(),
                    members: HashMap::new(),
                    bucket: None,
                    closing_since: None,
                }
                .start()
            })
            .clone()
    }

    /// Reserves a connection for `conn` under the account's cap.
    pub async fn reserve(
        self: &Arc<Self>,
        account: &str,
        conn: u64,
        limits: &Limits,
    ) -> Result<AccountSlot, CapReached> {
        let msg = || Reserve {
            conn,
            max: limits.max_connections,
            dry_run: limits.is_dry_run(LimitName::MaxConnections),
        };
        loop {
            let addr = self.supervisor(account);
            match addr.send(msg()).await {
                Ok(result) => return result.map(|()| AccountSlot { addr, conn }),
                // The supervisor retired between lookup and send: forget
                // it and start a fresh one.
                Err(_) => {
                    self.map.remove_if(account, |_, a| *a == addr);
                }
            }
        }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}
