//! The channel operations of a socket: subscribe (with recovery),
//! unsubscribe and publish, through the bridge.
//!
//! In a cluster, a subscribe completes only once delivery from every node
//! is live (and the history after `since` has been read), so it is
//! asynchronous. Until then the subscription is `Joining`: live messages
//! that arrive meanwhile are held, and when the join completes the socket
//! sends the ack, then the recovered history, then the held messages,
//! skipping any `seq` already sent. Single-node mode completes at once.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use bytes::Bytes;
use serde_json::value::RawValue;

use super::Socket;
use super::queue::Keyed;
use crate::cluster::Pending;
use crate::config::LimitName;
use crate::hub::{Joined, Reserve, Subscriber};
use crate::metrics::Layer;
use crate::protocol::ErrorCode;
use crate::protocol::wire::{self, ErrorFrame};

/// A subscription as the socket holds it.
#[derive(Debug)]
pub(super) enum Sub {
    /// Waiting for the bridge; live messages are held in `held`.
    Joining { join: u64, held: Vec<Held> },
    /// Delivering; the last `seq` sent.
    Live(u64),
}

/// A live message that arrived while its subscription was joining.
#[derive(Debug)]
pub(super) struct Held {
    seq: u64,
    frame: Bytes,
    key: Option<Arc<str>>,
}

impl Socket {
    pub(super) fn subscribe(
        &mut self,
        id: Option<&RawValue>,
        channel: &str,
        since: Option<u64>,
        ctx: &mut Context<Self>,
    ) {
        if !self.id.grants.subscribe.matches(channel) {
            self.forbid(id, channel, "subscribe");
            return;
        }
        let max = self.limits().max_subscriptions as usize;
        if !self.subs.contains_key(channel) && self.subs.len() >= max {
            let dry = self.limits().is_dry_run(LimitName::Subscriptions);
            self.exceeded(
                Layer::Connection,
                "too_many_subscriptions",
                Some(channel),
                Duration::ZERO,
                dry,
            );
            if !dry {
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
        let sub = Subscriber {
            conn: self.id.conn,
            sink: self.self_recipient.clone().into(),
            gauge: self.gauge.clone(),
        };
        self.next_join += 1;
        let join = self.next_join;
        self.subs.insert(
            channel.into(),
            Sub::Joining {
                join,
                held: Vec::new(),
            },
        );
        let id: Option<Box<RawValue>> = id.map(ToOwned::to_owned);
        match self.node.bridge.subscribe(channel, sub, since) {
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
    /// while joining: each `seq` once, in order.
    fn joined(
        &mut self,
        channel: &str,
        join: u64,
        id: Option<&RawValue>,
        joined: Joined,
        ctx: &mut Context<Self>,
    ) {
        let held = match self.subs.get_mut(channel) {
            Some(Sub::Joining { join: j, held }) if *j == join => std::mem::take(held),
            // Unsubscribed (or subscribed again) meanwhile: a later join
            // or the unsubscribe has the last word.
            _ => return,
        };
        if self.closing {
            return;
        }
        // The ack says where the subscription stands (§11); the backlog is
        // everything after `since`, in order; live messages then continue
        // above both it and the position the subscription went live at.
        let mut last = joined.position();
        if let Some(id) = id {
            self.send(wire::ack(id, Some(last), joined.recovered));
        }
        for (_, frame) in joined.backlog {
            self.send(frame);
        }
        let channel: Arc<str> = channel.into();
        for h in held {
            if h.seq > last {
                last = h.seq;
                self.queue_live(&channel, h.frame, h.key, ctx);
            } else {
                self.gauge.release(h.frame.len());
            }
        }
        self.subs.insert(channel, Sub::Live(last));
    }

    /// Queues a live message the hub counted in the gauge: behind the
    /// others on a queueing channel, in place of the unsent one with the
    /// same key on a conflating channel.
    fn queue_live(
        &mut self,
        channel: &Arc<str>,
        frame: Bytes,
        key: Option<Arc<str>>,
        ctx: &mut Context<Self>,
    ) {
        let Some(key) = key else {
            self.outbox.push_reserved(frame);
            return;
        };
        match self.outbox.push_conflated(channel, key, frame) {
            Keyed::Queued(_) => {}
            Keyed::Replaced { .. } => {
                self.node.metrics.messages_superseded.inc();
            }
            Keyed::Refused if self.closing => {}
            Keyed::Refused => {
                self.node.metrics.reject(Layer::Outbound, "slow_consumer");
                if self.gauge.record_drop() == Reserve::FirstDrop {
                    self.congested(ctx);
                }
            }
        }
    }

    pub(super) fn unsubscribe(&mut self, id: Option<&RawValue>, channel: &str) {
        if let Some((name, sub)) = self.subs.remove_entry(channel) {
            if let Sub::Joining { held, .. } = sub {
                self.gauge.release(held.iter().map(|h| h.frame.len()).sum());
            }
            self.node.bridge.unsubscribe(&name, self.id.conn);
        }
        if let Some(id) = id {
            self.send(wire::ack(id, None, None));
        }
    }

    pub(super) fn publish(
        &mut self,
        id: Option<&RawValue>,
        channel: &str,
        data: &RawValue,
        ctx: &mut Context<Self>,
    ) {
        if !self.id.grants.publish.matches(channel) {
            self.forbid(id, channel, "publish");
            return;
        }
        self.node.metrics.published("ws");
        match self.node.bridge.publish(channel, data.get()) {
            Pending::Ready(seq) => {
                self.node.published(channel, seq, data.get());
                if let Some(id) = id {
                    self.send(wire::ack(id, Some(seq), None));
                }
            }
            Pending::Later(f) => {
                let id: Option<Box<RawValue>> = id.map(ToOwned::to_owned);
                let (channel, data) = (channel.to_owned(), data.to_owned());
                ctx.spawn(f.into_actor(self).map(move |seq, act, _| {
                    act.node.published(&channel, seq, data.get());
                    if let Some(id) = id {
                        act.send(wire::ack(&id, Some(seq), None));
                    }
                }));
            }
        }
    }

    /// A live message from the hub (its bytes already counted in the gauge).
    pub(super) fn deliver(
        &mut self,
        channel: &Arc<str>,
        seq: u64,
        frame: Bytes,
        key: Option<Arc<str>>,
        ctx: &mut Context<Self>,
    ) {
        match self.subs.get_mut(channel) {
            // Deduplicate by seq: a message already sent as recovered
            // history, or from an earlier subscription, is not resent.
            Some(Sub::Live(last)) if seq > *last && !self.closing => {
                *last = seq;
                self.queue_live(channel, frame, key, ctx);
            }
            Some(Sub::Joining { held, .. }) if !self.closing => {
                held.push(Held { seq, frame, key });
            }
            _ => {
                self.gauge.release(frame.len());
            }
        }
    }
}
