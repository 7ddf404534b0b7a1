//! The channel operations of a socket: subscribe (with recovery) and
//! unsubscribe, through the bridge (publish: `publish.rs`).
//!
//! In a cluster, a subscribe completes only once delivery from every node
//! is live (and the history after `since` has been read), so it is
//! asynchronous. Until then the subscription is `Joining`: live messages
//! that arrive meanwhile are held, and when the join completes the socket
//! sends the ack, then the recovered history, then the held messages,
//! skipping any `seq` already sent. Single-node mode completes at once.

use std::time::Duration;

use actix::prelude::*;
use serde_json::value::RawValue;

use super::Socket;
use super::hooked::Hooked;
use crate::admission::{Cap, subscription_cap};
use crate::charge::{self, Admitted};
use crate::cluster::Pending;
use crate::hooks::Event;
use crate::hub::{Joined, Sink, Subscriber};
use crate::metrics::Layer;
use crate::protocol::ErrorCode;
use crate::protocol::wire::{self, ErrorFrame};

impl Socket {
    pub(super) fn subscribe(
        &mut self,
        id: Option<&RawValue>,
        channel: &str,
        since: Option<u64>,
        ctx: &mut Context<Self>,
    ) {
        // A hook deciding this channel replaces the token's globs (§15);
        // a dry-run one is asked too, and the token decides.
        let hook = self.channel_hook(Event::Subscribe, channel);
        let deciding = hook.as_ref().filter(|h| !h.config.dry_run).cloned();
        if deciding.is_none() && !self.id.grants.subscribe.matches(channel) {
            if let Some(h) = &hook {
                let ask = self.hook_ask(Event::Subscribe, Some(channel));
                self.node.hooks.shadow(h, ask, false);
            }
            self.forbid(id, channel, "subscribe");
            return;
        }
        // A join of this channel waiting for Redis: this subscribe goes
        // on in its place when it answers.
        if self.rejoin_presence(id, channel, since) {
            return;
        }
        let (count, already) = self.outbox.subscriptions(channel);
        // Joins waiting for Redis or a hook are subscriptions to be: they
        // count.
        let held = count + self.presence_joining() + self.hook_order.pending() + 1;
        let cap = subscription_cap(self.limits(), held);
        if !already && cap.is_over() {
            self.exceeded(
                Layer::Connection,
                "too_many_subscriptions",
                Some(channel),
                Duration::ZERO,
                cap.is_dry_run(),
            );
            if let Cap::Refused { max } = cap {
                self.refused_input(ErrorCode::TooManySubscriptions);
                let message = format!("a connection may hold at most {max} subscriptions");
                self.send(
                    ErrorFrame::new(ErrorCode::TooManySubscriptions)
                        .id(id)
                        .channel(channel)
                        .message(&message)
                        .encode(),
                );
                return;
            }
        }
        if let Some(hook) = deciding {
            let ask = self.hook_ask(Event::Subscribe, Some(channel));
            let id: Option<Box<RawValue>> = id.map(ToOwned::to_owned);
            self.ask_in_order(&hook, ask, channel, ctx, move |decision| {
                Hooked::Subscribe {
                    id,
                    since,
                    decision,
                }
            });
            return;
        }
        if let Some(h) = &hook {
            let ask = self.hook_ask(Event::Subscribe, Some(channel));
            self.node.hooks.shadow(h, ask, true);
        }
        self.subscribe_allowed(id, channel, since, ctx);
    }

    /// A subscribe the token or the hook allowed: presence first where the
    /// channel has it, then the join.
    pub(super) fn subscribe_allowed(
        &mut self,
        id: Option<&RawValue>,
        channel: &str,
        since: Option<u64>,
        ctx: &mut Context<Self>,
    ) {
        let (_, already) = self.outbox.subscriptions(channel);
        if !already && let Some(rule) = self.presence_rule(channel) {
            // Members are counted before the subscription exists, so a
            // full channel refuses without subscribing.
            self.join_presence(rule, id, channel, since, ctx);
            return;
        }
        self.subscribe_live(id, channel, since, ctx);
    }

    /// Subscribes through the bridge (after any presence join).
    pub(super) fn subscribe_live(
        &mut self,
        id: Option<&RawValue>,
        channel: &str,
        since: Option<u64>,
        ctx: &mut Context<Self>,
    ) {
        let sub = Subscriber {
            conn: self.id.conn,
            sink: Sink::Socket(self.outbox.clone()),
            gauge: self.gauge.clone(),
        };
        if since.is_some() {
            self.report_dropped_before_recovery();
        }
        self.next_join += 1;
        let join = self.next_join;
        self.outbox.joining(channel, join);
        let id: Option<Box<RawValue>> = id.map(ToOwned::to_owned);
        match self.node.broker.subscribe(channel, sub, since) {
            Pending::Ready(joined) => self.joined(channel, join, id.as_deref(), joined, ctx),
            Pending::Later(f) => {
                let channel: Box<str> = channel.into();
                ctx.spawn(f.into_actor(self).map(move |joined, act, ctx| {
                    act.joined(&channel, join, id.as_deref(), joined, ctx);
                }));
            }
        }
    }

    /// The ack first, then the recovered history, then what arrived live
    /// while joining: each `seq` once, in order (see [`Outbox::joined`](crate::socket::outbox::Outbox::joined)).
    pub(super) fn joined(
        &mut self,
        channel: &str,
        join: u64,
        id: Option<&RawValue>,
        joined: Joined,
        ctx: &mut Context<Self>,
    ) {
        let ack = id.map(|id| wire::ack(id, Some(joined.position()), joined.recovered));
        self.charge_recovered(joined.backlog.bytes(), ctx);
        self.outbox.joined(channel, join, ack, joined);
    }

    /// Charges the history a recovery delivers, `bytes` of it, once known
    /// at the join and before any of it is queued: recovery's one meaning
    /// ([`crate::charge::recovery`]), owed by the connection (taken even
    /// below zero: the connection's next frames wait for the refill) and
    /// sampled into the account budget as its frames are. Issue 42: it
    /// stopped at the connection's bucket, so an SSE stream, which sends no
    /// frames, recovered 30.6 MB with its account budget untouched.
    pub(super) fn charge_recovered(&mut self, bytes: usize, ctx: &mut Context<Self>) {
        let payer = self.charging.payer(&self.id, true, None);
        let charge::Pending::Ready(taken) =
            self.node
                .ledger()
                .recovery(payer, bytes, std::time::Instant::now())
        else {
            unreachable!("a connection's own buckets answer at once")
        };
        if let Some((
            _,
            Admitted {
                sample: Some(sample),
                ..
            },
        )) = taken
        {
            self.charge_account(sample, ctx);
        }
    }

    pub(super) fn unsubscribe(&mut self, id: Option<&RawValue>, channel: &str) {
        // A subscribe still waiting for its hook ends here too.
        self.hook_order.cancel(channel);
        if let Some(name) = self.outbox.leave(channel) {
            self.node.broker.unsubscribe(&name, self.id.conn);
        }
        // Its membership, or its join still waiting (whose subscribe then
        // never happens).
        self.end_presence(channel);
        if let Some(id) = id {
            self.send(wire::ack(id, None, None));
        }
    }
}
