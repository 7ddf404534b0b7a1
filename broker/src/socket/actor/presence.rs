//! The socket's side of presence (§13): joining a presence channel on
//! subscribe (refused with `presence_full` past `max_members`), the
//! `presence`/`presence_stats` reads (a subscribe hook deciding the
//! channel decides them, §15), and the outbox as the sink of the
//! channel's diffs.
//!
//! Membership follows the subscription: the socket keeps the presence
//! channels it is a member of, or joining (its subscribe waiting for the
//! join), and every path that ends a subscription (unsubscribe, close for
//! any reason: the client's, a kick, a ban, the drain, a slow consumer;
//! a refresh that no longer grants the channel) ends its membership from
//! that list, not from the config as it is then (a reload may have
//! turned presence off). A join still waiting counts toward
//! `max_subscriptions`, and one ended meanwhile never subscribes.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use serde_json::value::RawValue;

use super::Socket;
use crate::config::PresenceRule;
use crate::hooks::{Decision, Event};
use crate::metrics::Layer;
use crate::presence::{Pending, PresenceSink, Read};
use crate::protocol::ErrorCode;
use crate::protocol::presence::{self as frames, Member, PresenceReply};
use crate::protocol::wire::ErrorFrame;

/// A presence channel this connection is in, or joining.
pub(super) enum Membership {
    /// The join waits for Redis; the subscribe that asked for it (the
    /// latest, if the client asked again meanwhile) goes on when it
    /// answers.
    Joining {
        id: Option<Box<RawValue>>,
        since: Option<u64>,
    },
    /// A member: the channel is one of the socket's subscriptions.
    Member,
}

/// The socket's presence channels. Bounded by the plan's
/// `max_subscriptions`: a member is one of the socket's subscriptions,
/// and a join waiting counts toward the cap.
pub(super) type Memberships = HashMap<Arc<str>, Membership>;

impl Socket {
    /// The presence rule of `channel`'s namespace, if any.
    pub(super) fn presence_rule(&self, channel: &str) -> Option<PresenceRule> {
        crate::config::presence_rule(&self.node.config.load().namespaces, channel)
    }

    fn member(&self) -> Member {
        Member {
            user: self.id.account.clone(),
            conn_id: self.id.label.clone(),
            info: self.id.info.clone(),
        }
    }

    /// Joins waiting for Redis (each counts as a subscription).
    pub(super) fn presence_joining(&self) -> usize {
        self.presence
            .values()
            .filter(|m| matches!(m, Membership::Joining { .. }))
            .count()
    }

    /// A subscribe to `channel` while its join waits: it takes over the
    /// join's continuation (as a later subscribe takes over an earlier
    /// one's join through the bridge). False if no join waits.
    pub(super) fn rejoin_presence(
        &mut self,
        id: Option<&RawValue>,
        channel: &str,
        since: Option<u64>,
    ) -> bool {
        match self.presence.get_mut(channel) {
            Some(Membership::Joining { id: i, since: s }) => {
                *i = id.map(ToOwned::to_owned);
                *s = since;
                true
            }
            _ => false,
        }
    }

    /// Joins `channel`'s members, then subscribes; past `max_members`
    /// answers `presence_full` instead.
    pub(super) fn join_presence(
        &mut self,
        rule: PresenceRule,
        id: Option<&RawValue>,
        channel: &str,
        since: Option<u64>,
        ctx: &mut Context<Self>,
    ) {
        let sink: Arc<dyn PresenceSink> = self.outbox.clone();
        let channel: Arc<str> = channel.into();
        self.presence.insert(
            channel.clone(),
            Membership::Joining {
                id: id.map(ToOwned::to_owned),
                since,
            },
        );
        match self.node.presence.join(&channel, rule, self.member(), sink) {
            Pending::Ready(r) => self.joined_presence(r, &channel, ctx),
            Pending::Later(f) => {
                ctx.spawn(f.into_actor(self).map(move |r, act, ctx| {
                    act.joined_presence(r, &channel, ctx);
                }));
            }
        }
    }

    fn joined_presence(
        &mut self,
        result: Result<(), crate::presence::Full>,
        channel: &Arc<str>,
        ctx: &mut Context<Self>,
    ) {
        // Ended meanwhile (its leave was sent then), or closing (stopping
        // leaves it).
        if self.closing || !matches!(self.presence.get(channel), Some(Membership::Joining { .. })) {
            return;
        }
        match result {
            Ok(()) => {
                let Some(Membership::Joining { id, since }) =
                    self.presence.insert(channel.clone(), Membership::Member)
                else {
                    return;
                };
                self.subscribe_live(id.as_deref(), channel, since, ctx);
            }
            Err(full) => {
                let Some(Membership::Joining { id, .. }) = self.presence.remove(channel) else {
                    return;
                };
                self.exceeded(
                    Layer::Connection,
                    "presence_full",
                    Some(channel),
                    Duration::ZERO,
                    false,
                );
                let message = format!(
                    "{channel:?} already has {} members, its namespace's max_members",
                    full.max
                );
                self.send(
                    ErrorFrame::new(ErrorCode::PresenceFull)
                        .id(id.as_deref())
                        .channel(channel)
                        .retry_after_ms(0)
                        .message(&message)
                        .encode(),
                );
            }
        }
    }

    /// The subscription to `channel` ended: so does its membership (or
    /// its join still waiting). Returns the waiting subscribe's `id`, if
    /// a join was waiting with one.
    pub(super) fn end_presence(&mut self, channel: &str) -> Option<Box<RawValue>> {
        let ended = self.presence.remove(channel)?;
        self.node
            .presence
            .leave(channel, &self.id.account, &self.id.label);
        match ended {
            Membership::Joining { id, .. } => id,
            Membership::Member => None,
        }
    }

    /// Every membership ends (the socket stops).
    pub(super) fn end_all_presence(&mut self) {
        for (channel, _) in std::mem::take(&mut self.presence) {
            self.node
                .presence
                .leave(&channel, &self.id.account, &self.id.label);
        }
    }

    /// `presence` (with `limit`) or, without, `presence_stats`. For a
    /// channel a subscribe hook decides, the hook replaces the token's
    /// `sub_channels` (§15): who is in a channel the client may not
    /// subscribe to is not told. The frame was priced before the call.
    pub(super) fn read_presence(
        &mut self,
        id: Option<&RawValue>,
        channel: &str,
        limit: Option<u32>,
        ctx: &mut Context<Self>,
    ) {
        let hook = self.channel_hook(Event::Subscribe, channel);
        match hook.as_ref().filter(|h| !h.config.dry_run) {
            Some(deciding) => {
                let ask = self.hook_ask(Event::Subscribe, Some(channel));
                let answer = self.node.hooks.ask(deciding, ask);
                let id: Option<Box<RawValue>> = id.map(ToOwned::to_owned);
                let channel: Box<str> = channel.into();
                ctx.spawn(answer.into_actor(self).map(move |decision, act, ctx| {
                    if act.closing {
                        return;
                    }
                    match decision {
                        Decision::Allowed { .. } => {
                            act.read_presence_now(id.as_deref(), &channel, limit, ctx)
                        }
                        other => act.hook_refused(id.as_deref(), Some(&channel), other, ctx),
                    }
                }));
            }
            None => {
                let allowed = self.id.grants.subscribe.matches(channel);
                if let Some(shadowed) = &hook {
                    let ask = self.hook_ask(Event::Subscribe, Some(channel));
                    self.node.hooks.shadow(shadowed, ask, allowed);
                }
                if !allowed {
                    self.forbid(id, channel, "read presence");
                    return;
                }
                self.read_presence_now(id, channel, limit, ctx);
            }
        }
    }

    /// A presence read the caller may make.
    fn read_presence_now(
        &mut self,
        id: Option<&RawValue>,
        channel: &str,
        limit: Option<u32>,
        ctx: &mut Context<Self>,
    ) {
        if self.presence_rule(channel).is_none() {
            self.exceeded(
                Layer::Connection,
                "bad_request",
                Some(channel),
                Duration::ZERO,
                false,
            );
            let message = format!("presence is not enabled for {channel:?}'s namespace");
            self.send(
                ErrorFrame::new(ErrorCode::BadRequest)
                    .id(id)
                    .channel(channel)
                    .message(&message)
                    .encode(),
            );
            return;
        }
        let pending = self
            .node
            .presence
            .read(channel, limit.unwrap_or(0) as usize);
        let id: Option<Box<RawValue>> = id.map(ToOwned::to_owned);
        let channel: Box<str> = channel.into();
        let answer = move |act: &mut Socket, read: Read| {
            let frame = match limit {
                Some(_) => frames::presence(&PresenceReply {
                    kind: "presence",
                    id: id.as_deref(),
                    channel: &channel,
                    members: &read.members,
                    users: read.counts.users,
                    connections: read.counts.connections,
                    partial: read.partial,
                }),
                None => frames::stats(id.as_deref(), &channel, read.counts, read.partial),
            };
            act.send(frame);
        };
        match pending {
            Pending::Ready(read) => answer(self, read),
            Pending::Later(f) => {
                ctx.spawn(
                    f.into_actor(self)
                        .map(move |read, act, _| answer(act, read)),
                );
            }
        }
    }
}
