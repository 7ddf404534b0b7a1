//! The account supervisor: one actor per account with sockets on this node.
//! It turns its sockets' sampled charges into account-budget charges
//! through the bridge (local in single-node mode, Redis in a cluster), and
//! closes every socket of the account with 1008 when the budget is
//! exhausted — on this node, and through the bridge on every other node.
//!
//! Sockets register at the handshake and detach when they stop (through
//! [`AccountSlot`]'s drop, which also gives back the connection counted
//! against the account's cap): the actor lifecycle is the count, so it
//! cannot leak.

mod control;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::WeakAddr;
use actix::prelude::*;
use dashmap::DashMap;

/// The socket's side of the sampled budget, a limiter primitive.
pub use crate::limiter::{Sample, Sampler};
pub use control::{CloseWith, Control, Reconfigure};

use crate::cluster::{Charged, Pending, SharedLimiterStore};
use crate::config::{LimitName, Limits};
use crate::exceeded::Exceeded;
use crate::metrics::{Layer, Metrics};
use crate::protocol::wire::BudgetView;
use crate::protocol::{CloseCode, ErrorCode};

/// How long a supervisor with no sockets lingers before it stops.
const RETIRE_AFTER: Duration = Duration::from_secs(5);

#[derive(Message)]
#[rtype(result = "()")]
struct Register {
    conn: u64,
}

#[derive(Message)]
#[rtype(result = "()")]
struct Attach {
    conn: u64,
    sink: Control,
}

#[derive(Message)]
#[rtype(result = "()")]
struct Detach {
    conn: u64,
}

/// A socket's sampled charge: `units` admitted since its last one, the
/// first of them at `since`.
#[derive(Message)]
#[rtype(result = "BudgetView")]
pub struct Charge {
    pub units: u32,
    pub since: Instant,
    pub limits: Arc<Limits>,
}

/// The account budget as of the last charge.
#[derive(Message)]
#[rtype(result = "Option<BudgetView>")]
pub struct Balance;

/// Another node saw this account breach its budget.
#[derive(Message)]
#[rtype(result = "()")]
struct Breach;

pub struct AccountSupervisor {
    account: Arc<str>,
    store: SharedLimiterStore,
    metrics: Arc<Metrics>,
    registry: Arc<Accounts>,
    members: HashMap<u64, Option<Control>>,
    last_view: Option<BudgetView>,
    /// Set while a breach is being enforced, so one flood closes the
    /// account once rather than once per late charge.
    closing_since: Option<Instant>,
    /// Counts this actor in `tidegate_actors{kind="account_supervisor"}`.
    _alive: crate::alive::ActorGuard,
}

impl Actor for AccountSupervisor {
    type Context = Context<Self>;

    fn stopping(&mut self, ctx: &mut Context<Self>) -> Running {
        if !self.members.is_empty() {
            return Running::Continue;
        }
        let me = ctx.address();
        self.registry.map.remove_if(&self.account, |_, a| *a == me);
        self.registry.views.remove(&self.account);
        Running::Stop
    }
}

impl AccountSupervisor {
    /// Closes every socket of the account on this node.
    fn close_all(&mut self) {
        let now = Instant::now();
        if self
            .closing_since
            .is_some_and(|t| now - t < Duration::from_secs(1))
        {
            return;
        }
        self.closing_since = Some(now);
        for sink in self.members.values().flatten() {
            sink.close(CloseWith {
                code: CloseCode::PolicyViolation,
                notice: Some(ErrorCode::AccountRateLimited),
                reason: None,
            });
        }
    }

    fn on_charged(&mut self, c: Charged, limits: &Limits) {
        self.last_view = Some(c.view);
        self.registry.views.insert(self.account.clone(), c.view);
        if c.allowed {
            self.closing_since = None;
            return;
        }
        let dry = limits.is_dry_run(LimitName::AccountMessages);
        Exceeded::new(
            Layer::Account,
            ErrorCode::AccountRateLimited.as_str(),
            &self.account,
        )
        .count(if dry {
            1
        } else {
            self.members.len().max(1) as u64
        })
        .reset(c.retry_after)
        .dry_run(dry)
        .emit(&self.metrics);
        if !dry {
            self.close_all();
            self.store.announce_breach(&self.account);
        }
    }

    fn retire_if_idle(&mut self, ctx: &mut Context<Self>) {
        if self.members.is_empty() {
            ctx.run_later(RETIRE_AFTER, |act, ctx| {
                if act.members.is_empty() {
                    ctx.stop();
                }
            });
        }
    }
}

impl Handler<Register> for AccountSupervisor {
    type Result = ();

    fn handle(&mut self, msg: Register, _: &mut Context<Self>) {
        self.members.insert(msg.conn, None);
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
        self.retire_if_idle(ctx);
    }
}

impl Handler<Charge> for AccountSupervisor {
    type Result = ResponseActFuture<Self, BudgetView>;

    fn handle(&mut self, msg: Charge, _: &mut Context<Self>) -> Self::Result {
        match self
            .store
            .charge_account(&self.account, msg.units, msg.since, &msg.limits)
        {
            Pending::Ready(c) => {
                self.on_charged(c, &msg.limits);
                Box::pin(fut::ready(c.view))
            }
            Pending::Later(f) => Box::pin(f.into_actor(self).map(move |c, act, _| {
                act.on_charged(c, &msg.limits);
                c.view
            })),
        }
    }
}

impl Handler<Balance> for AccountSupervisor {
    type Result = Option<BudgetView>;

    fn handle(&mut self, _: Balance, _: &mut Context<Self>) -> Self::Result {
        self.last_view
    }
}

impl Handler<Breach> for AccountSupervisor {
    type Result = ();

    fn handle(&mut self, _: Breach, _: &mut Context<Self>) {
        self.close_all();
    }
}

/// The node's account supervisors by account id.
pub struct Accounts {
    map: DashMap<Arc<str>, Addr<AccountSupervisor>>,
    metrics: Arc<Metrics>,
    /// Each account's budget as of its last charge, for the admin page's
    /// "nearest their limits" (read without messaging the actors).
    pub views: DashMap<Arc<str>, BudgetView>,
}

impl std::fmt::Debug for Accounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Accounts({})", self.map.len())
    }
}

/// A socket's place in its account: a member of the supervisor and one
/// connection counted against the cap. The drop gives both back.
pub struct AccountSlot {
    /// Weak, like [`Control`]: a strong `Addr` is a sender of its own
    /// (two allocations per socket). The supervisor outlives its members
    /// (it retires only with none: `stopping`), so this upgrades for as
    /// long as the slot exists, short of the system stopping.
    addr: WeakAddr<AccountSupervisor>,
    conn: u64,
    account: Arc<str>,
    store: SharedLimiterStore,
}

impl std::fmt::Debug for AccountSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AccountSlot({}, {})", self.account, self.conn)
    }
}

impl AccountSlot {
    /// Registers the started socket for account-wide closes.
    pub fn attach(&self, sink: Control) {
        if let Some(addr) = self.addr.upgrade() {
            addr.do_send(Attach {
                conn: self.conn,
                sink,
            });
        }
    }

    /// The supervisor, for a charge or a balance (`None` only once the
    /// system is stopping).
    pub fn supervisor(&self) -> Option<Addr<AccountSupervisor>> {
        self.addr.upgrade()
    }
}

impl Drop for AccountSlot {
    fn drop(&mut self) {
        if let Some(addr) = self.addr.upgrade() {
            addr.do_send(Detach { conn: self.conn });
        }
        self.store.release_connection(&self.account);
    }
}

impl Accounts {
    pub fn new(metrics: Arc<Metrics>) -> Arc<Accounts> {
        Arc::new(Accounts {
            map: DashMap::new(),
            metrics,
            views: DashMap::new(),
        })
    }

    fn supervisor(
        self: &Arc<Self>,
        account: &str,
        store: &SharedLimiterStore,
    ) -> Addr<AccountSupervisor> {
        if let Some(a) = self.map.get(account) {
            return a.clone();
        }
        self.map
            .entry(Arc::from(account))
            .or_insert_with(|| {
                AccountSupervisor {
                    account: Arc::from(account),
                    store: store.clone(),
                    metrics: self.metrics.clone(),
                    registry: self.clone(),
                    members: HashMap::new(),
                    last_view: None,
                    closing_since: None,
                    _alive: self
                        .metrics
                        .alive
                        .actor(crate::alive::ActorKind::AccountSupervisor),
                }
                .start()
            })
            .clone()
    }

    /// Makes `conn` a member of its account's supervisor. The caller has
    /// already counted the connection against the cap through `store`;
    /// the slot gives it back when dropped.
    pub async fn register(
        self: &Arc<Self>,
        account: &str,
        conn: u64,
        store: &SharedLimiterStore,
    ) -> AccountSlot {
        loop {
            let addr = self.supervisor(account, store);
            match addr.send(Register { conn }).await {
                Ok(()) => {
                    return AccountSlot {
                        addr: addr.downgrade(),
                        conn,
                        account: account.into(),
                        store: store.clone(),
                    };
                }
                // The supervisor retired between lookup and send: forget
                // it and start a fresh one.
                Err(_) => {
                    self.map.remove_if(account, |_, a| *a == addr);
                }
            }
        }
    }

    /// Another node closed this account: close its sockets here too.
    pub fn breach(&self, account: &str) {
        if let Some(a) = self.map.get(account) {
            a.do_send(Breach);
        }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}
