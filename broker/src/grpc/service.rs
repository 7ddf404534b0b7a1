//! `tidegate.v1.Broker`: each handler identifies the caller (an API key in
//! `authorization: Bearer …`), prices the work ([`charge::publish`]),
//! consumes from the key's bucket through the charge primitive
//! ([`crate::charge::Ledger::charge`]) and publishes as HTTP does
//! ([`Node::publish`]).
//!
//! Everything here is `Send + Sync` and runs on the gRPC server's own
//! tokio runtime: the node's state is shared (`Arc<Node>`), and the only
//! actix-bound part, the socket actors the hub delivers to, is reached
//! through the hub's [`crate::hub::Sink`] (a gRPC stream gets a tokio
//! queue instead of an actor mailbox).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use tokio::sync::watch;
use tonic::{Request, Status};

use super::proto::PublishRequest;
use super::status;
use crate::charge::{self, Balance, KeyState, Outcome, Payer, Price, Refusal};
use crate::config::Limits;
use crate::exceeded::Exceeded;
use crate::idempotency::{Keyed, Published};
use crate::metrics::Layer;
use crate::node::Node;
use crate::protocol::{ErrorCode, Op};

/// The shared state of every call.
#[derive(Debug, Clone)]
pub struct BrokerService {
    pub(super) node: Arc<Node>,
    /// Set when the node starts draining: when open streams must have
    /// ended by (staggered within it).
    pub(super) drain: watch::Receiver<Option<tokio::time::Instant>>,
    /// Calls open now (the drain and the stop wait for them).
    pub(super) open: Arc<AtomicUsize>,
}

/// Counts one open call while it lives.
#[derive(Debug)]
pub(super) struct OpenStream(Arc<AtomicUsize>);

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A caller that passed the door: its key and its account's limits.
pub(super) struct Caller {
    pub key: Arc<KeyState>,
    pub limits: Arc<Limits>,
}

impl BrokerService {
    pub fn new(
        node: Arc<Node>,
        drain: watch::Receiver<Option<tokio::time::Instant>>,
        open: Arc<AtomicUsize>,
    ) -> Self {
        BrokerService { node, drain, open }
    }

    pub(super) fn open_stream(&self) -> OpenStream {
        self.open.fetch_add(1, Ordering::AcqRel);
        OpenStream(self.open.clone())
    }

    /// Counts a refusal under `tidegate_rejections_total{layer="grpc"}` and
    /// logs it with the account (sampled, see `exceeded`). The channel, a
    /// name the caller chose, only at DEBUG.
    pub(super) fn count(&self, reason: &'static str, account: &str, channel: Option<&str>) {
        Exceeded::new(Layer::Grpc, reason, account).emit(&self.node.metrics);
        if let Some(channel) = channel {
            tracing::debug!(target: "tidegate::exceeded", reason, account, channel, "gRPC message refused");
        }
    }

    /// Charges a refused message what its refusal costs
    /// ([`crate::admission::refusal_units`]: bad JSON, a bad channel, a
    /// forbidden one cost the plan's malformed price, so refusals of input
    /// are not free, issue 26; `cost_exceeds_max` costs nothing, issue 42)
    /// to the caller's key: the units charged, or the charge's own refusal
    /// when the bucket is empty.
    pub(super) async fn charge_refused(
        &self,
        caller: &Caller,
        code: ErrorCode,
    ) -> Result<u32, charge::Refused> {
        let units = crate::admission::refusal_units(&caller.limits.costs, code);
        if units == 0 {
            return Ok(0);
        }
        let payer = Payer::Key {
            layer: Layer::Grpc,
            key: &caller.key,
            limits: &caller.limits,
        };
        self.node
            .ledger()
            .charge(payer, Price::units(units, None), Instant::now())
            .wait()
            .await
            .map(|_| units)
    }

    /// Draining first (§7: `UNAVAILABLE`, another node answers), then the
    /// key (`UNAUTHENTICATED`), then an operator's ban of its account or of
    /// the peer's address (§10, `PERMISSION_DENIED`).
    pub(super) fn admit<T>(&self, request: &Request<T>) -> Result<Caller, Status> {
        let metadata = request.metadata();
        if self.node.is_draining() {
            self.count(ErrorCode::Draining.as_str(), "", None);
            return Err(status::draining());
        }
        let key = metadata
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(crate::admission::bearer)
            .and_then(|k| self.node.keys.load().get(k));
        let Some(key) = key else {
            self.count(ErrorCode::Unauthorized.as_str(), "", None);
            return Err(status::refused(
                ErrorCode::Unauthorized,
                "send `authorization: Bearer <api key>` with a key from the config",
                None,
            ));
        };
        let ip = request.remote_addr().map(|a| a.ip());
        if let Some(ban) = self.node.admin.bans.check(Some(&key.account), ip) {
            self.count(ErrorCode::Banned.as_str(), &key.account, None);
            return Err(status::banned(&ban));
        }
        let limits = self.node.config.load().account_limits(&key.account);
        Ok(Caller { key, limits })
    }

    /// Checks and prices one message (its data as JSON, its idempotency
    /// key, then `charge::publish::price`; a key held here is a duplicate
    /// and costs the base price, §17); nothing is charged yet.
    pub(super) fn price(&self, caller: &Caller, msg: &PublishRequest) -> Result<u32, Refusal> {
        // JSON first, as HTTP parses its body before anything else.
        charge::publish::check_json(&msg.data_json, caller.limits.max_json_depth)?;
        let keyed = keyed(caller, msg)?;
        let subscribers = self.node.broker.subscribers(&msg.channel);
        let cost = charge::publish::price(
            &msg.channel,
            &msg.data_json,
            &caller.key.publish,
            &caller.limits,
            subscribers,
        )?;
        if self.node.is_duplicate(&msg.channel, keyed) {
            return Ok(caller.limits.costs.publish);
        }
        Ok(cost)
    }

    /// Publishes a message charged `cost`; a duplicate another node
    /// published gives back what it paid over the base price. The outcome,
    /// what it cost after all, and the key's balance after a refund.
    pub(super) async fn publish_message(
        &self,
        caller: &Caller,
        msg: &PublishRequest,
        cost: u32,
        balance: Option<Balance>,
    ) -> (Published, u32, Option<Balance>) {
        // Checked by `price` already.
        let keyed = keyed(caller, msg).ok().flatten();
        let published = self
            .node
            .publish(&msg.channel, &msg.data_json, "grpc", keyed)
            .await;
        let base = caller.limits.costs.publish;
        let back = if published.duplicate {
            cost.saturating_sub(base)
        } else {
            0
        };
        if back == 0 {
            return (published, cost, balance);
        }
        let payer = Payer::Key {
            layer: Layer::Grpc,
            key: &caller.key,
            limits: &caller.limits,
        };
        let remaining = self.node.ledger().refund_to(payer, back).wait().await;
        let balance = balance.map(|b| Balance { remaining, ..b });
        (published, cost - back, balance)
    }

    /// Takes `cost` from the caller's key (a refusal is counted under
    /// `layer="grpc"` by the charge layer).
    pub(super) async fn charge(
        &self,
        caller: &Caller,
        cost: u32,
        channel: Option<&str>,
    ) -> Outcome {
        let payer = Payer::Key {
            layer: Layer::Grpc,
            key: &caller.key,
            limits: &caller.limits,
        };
        self.node
            .ledger()
            .charge(payer, Price::units(cost, channel), Instant::now())
            .wait()
            .await
    }

    /// Takes one message's `cost` from the caller's key, the plan's rules
    /// for a `publish` on `channel` first (issue 42: rules hold for every
    /// payer).
    pub(super) async fn charge_publish(
        &self,
        caller: &Caller,
        cost: u32,
        channel: &str,
    ) -> Outcome {
        let payer = Payer::Key {
            layer: Layer::Grpc,
            key: &caller.key,
            limits: &caller.limits,
        };
        let price = Price::units(cost, Some(channel)).rules_as(Op::Publish);
        self.node
            .ledger()
            .charge(payer, price, Instant::now())
            .wait()
            .await
    }

    /// The key's balance, read without charging.
    pub(super) async fn balance(&self, caller: &Caller) -> Balance {
        self.node
            .ledger()
            .balance(&caller.key, &caller.limits)
            .wait()
            .await
    }

    /// The status for a refusal that ends a unary call, with the key's
    /// balance (read without charging) in its trailers.
    pub(super) async fn refuse_call(&self, caller: &Caller, r: &Refusal, channel: &str) -> Status {
        self.count(r.code.as_str(), &caller.key.account, Some(channel));
        let units = match self.charge_refused(caller, r.code).await {
            Ok(units) => units,
            Err(refused) => return status::rate_limited(&refused, 0),
        };
        let balance = self.balance(caller).await;
        status::refused(r.code, &r.message, Some((&balance, u64::from(units))))
    }
}

/// A message's idempotency key (§17), checked; `""` is no key.
fn keyed<'a>(caller: &'a Caller, msg: &'a PublishRequest) -> Result<Option<Keyed<'a>>, Refusal> {
    if msg.idempotency_key.is_empty() {
        return Ok(None);
    }
    Keyed::new(&caller.key.account, &msg.idempotency_key)
        .map(Some)
        .map_err(|e| Refusal::new(ErrorCode::BadRequest, e.to_string()))
}
