//! A socket's publish (§2), once per idempotency key (§17): the frame was
//! charged already (the base price only when its key is held here, see
//! `handle.rs`); a key this node has not seen goes to the bridge with the
//! message, which in a cluster may answer that another node published it
//! (the difference to the base price is then given back).

use actix::prelude::*;
use serde_json::value::RawValue;

use super::Socket;
use super::hooked::Hooked;
use crate::cluster::Pending;
use crate::hooks::Event;
use crate::idempotency::{Keyed, Published};
use crate::node::Begun;
use crate::protocol::wire;

/// The `via` and `api` label of socket publishes.
const VIA: &str = "ws";

impl Socket {
    pub(super) fn publish(
        &mut self,
        id: Option<&RawValue>,
        channel: &str,
        data: &RawValue,
        key: Option<&str>,
        ctx: &mut Context<Self>,
    ) {
        // A hook deciding this channel replaces the token's globs (§15).
        let hook = self.channel_hook(Event::Publish, channel);
        match hook.filter(|h| !h.config.dry_run) {
            Some(hook) => {
                // §17: a duplicate of a key gets the first answer, no call.
                let keyed = key.map(|key| Keyed {
                    publisher: &self.id.account,
                    key,
                });
                if keyed.is_none() || !self.node.is_duplicate(channel, keyed) {
                    let mut ask = self.hook_ask(Event::Publish, Some(channel));
                    ask.data = Some(data.to_owned());
                    let id: Option<Box<RawValue>> = id.map(ToOwned::to_owned);
                    let (data, key) = (data.to_owned(), key.map(str::to_owned));
                    self.ask_in_order(&hook, ask, channel, ctx, move |decision| Hooked::Publish {
                        id,
                        data,
                        key,
                        decision,
                    });
                    return;
                }
            }
            None => {
                let allows = self.id.grants.publish.matches(channel);
                if let Some(h) = self.channel_hook(Event::Publish, channel) {
                    let mut ask = self.hook_ask(Event::Publish, Some(channel));
                    ask.data = Some(data.to_owned());
                    self.node.hooks.shadow(&h, ask, allows);
                }
                if !allows {
                    self.forbid(id, channel, "publish");
                    return;
                }
            }
        }
        self.publish_now(id, channel, data, key, ctx);
    }

    /// A publish allowed (by the token or a hook), to the bridge once per
    /// idempotency key.
    pub(super) fn publish_now(
        &mut self,
        id: Option<&RawValue>,
        channel: &str,
        data: &RawValue,
        key: Option<&str>,
        ctx: &mut Context<Self>,
    ) {
        let keyed = key.map(|key| Keyed {
            publisher: &self.id.account,
            key,
        });
        match self.node.begin_publish(channel, data.get(), VIA, keyed) {
            Begun::Now(published) => self.ack_published(id, published),
            Begun::Publishing(first, Pending::Ready(published)) => {
                let published =
                    self.node
                        .finish_publish(channel, data.get(), VIA, key, first, published);
                self.ack_published(id, published);
            }
            Begun::Publishing(first, Pending::Later(f)) => {
                let id: Option<Box<RawValue>> = id.map(ToOwned::to_owned);
                let (channel, data) = (channel.to_owned(), data.to_owned());
                let key = key.map(str::to_owned);
                ctx.spawn(f.into_actor(self).map(move |published, act, _| {
                    let published = act.node.finish_publish(
                        &channel,
                        data.get(),
                        VIA,
                        key.as_deref(),
                        first,
                        published,
                    );
                    if published.duplicate {
                        act.refund_duplicate(&channel, data.get().len());
                    }
                    act.ack_published(id.as_deref(), published);
                }));
            }
            Begun::Waiting(waiter) => {
                // Charged the base price: the first one is in flight. If it
                // is given up (its connection closed mid-publish), this one
                // publishes in its place at that price.
                let id: Option<Box<RawValue>> = id.map(ToOwned::to_owned);
                let (channel, data) = (channel.to_owned(), data.to_owned());
                let key = key.map(str::to_owned);
                ctx.spawn(
                    waiter
                        .wait()
                        .into_actor(self)
                        .map(move |seq, act, ctx| match seq {
                            Some(seq) => {
                                let published = act.node.waited(VIA, seq);
                                act.ack_published(id.as_deref(), published);
                            }
                            None => {
                                act.publish_now(id.as_deref(), &channel, &data, key.as_deref(), ctx)
                            }
                        }),
                );
            }
        }
    }

    fn ack_published(&mut self, id: Option<&RawValue>, published: Published) {
        if let Some(id) = id {
            self.send(wire::published_ack(id, published.seq, published.duplicate));
        }
    }

    /// A publish priced in full turned out a duplicate another node
    /// published: it owes the base price only (§17).
    fn refund_duplicate(&mut self, channel: &str, data_len: usize) {
        let costs = &self.charging.admission.limits().costs;
        let full = crate::pricing::publish(costs, data_len, self.node.broker.subscribers(channel));
        let over = full.saturating_sub(costs.publish);
        if over > 0 {
            self.charging.admission.refund(over, 0);
        }
    }
}
