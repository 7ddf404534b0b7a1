//! The socket's side of presence (§13): joining a presence channel on
//! subscribe (refused with `presence_full` past `max_members`), leaving
//! on unsubscribe and close, the `presence`/`presence_stats` reads, and
//! the outbox as the sink of the channel's diffs.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use bytes::Bytes;
use serde_json::value::RawValue;

use super::Socket;
use super::delivery::Congested;
use super::outbox::Outbox;
use crate::config::PresenceRule;
use crate::hub::Reserve;
use crate::metrics::Layer;
use crate::node::dialect::Outlet;
use crate::presence::{Pending, PresenceSink, Read, Update};
use crate::protocol::ErrorCode;
use crate::protocol::presence::{self as frames, Member, PresenceReply};
use crate::protocol::wire::ErrorFrame;

/// Presence frames obey the socket's high-water mark like messages: past
/// it they are dropped and counted, the socket hears `slow_consumer`, and
/// a client that keeps a member set reads it again when it recovers (the
/// SDK does on its resubscribe).
impl PresenceSink for Outbox {
    fn send(&self, frame: &Bytes, _update: &Update<'_>) {
        match self.gauge.try_reserve(frame.len()) {
            Reserve::Queued => Outlet::push_frame(self, frame.clone()),
            Reserve::FirstDrop => self.control.do_send(Congested),
            Reserve::Dropped => {}
        }
    }
}

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

    /// Joins `channel`'s members, then runs `then` (the subscribe); past
    /// `max_members` answers `presence_full` instead.
    pub(super) fn join_presence(
        &mut self,
        rule: PresenceRule,
        id: Option<&RawValue>,
        channel: &str,
        ctx: &mut Context<Self>,
        then: impl FnOnce(&mut Socket, &mut Context<Self>) + 'static,
    ) {
        let sink: Arc<dyn PresenceSink> = self.outbox.clone();
        let id: Option<Box<RawValue>> = id.map(ToOwned::to_owned);
        let channel: Box<str> = channel.into();
        match self.node.presence.join(&channel, rule, self.member(), sink) {
            Pending::Ready(r) => self.joined_presence(r, id.as_deref(), &channel, ctx, then),
            Pending::Later(f) => {
                ctx.spawn(f.into_actor(self).map(move |r, act, ctx| {
                    act.joined_presence(r, id.as_deref(), &channel, ctx, then);
                }));
            }
        }
    }

    fn joined_presence(
        &mut self,
        result: Result<(), crate::presence::Full>,
        id: Option<&RawValue>,
        channel: &str,
        ctx: &mut Context<Self>,
        then: impl FnOnce(&mut Socket, &mut Context<Self>),
    ) {
        if self.closing {
            self.node
                .presence
                .leave(channel, &self.id.account, &self.id.label);
            return;
        }
        match result {
            Ok(()) => then(self, ctx),
            Err(full) => {
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
                        .id(id)
                        .channel(channel)
                        .retry_after_ms(0)
                        .message(&message)
                        .encode(),
                );
            }
        }
    }

    /// This connection left `channel` (if it is a presence channel).
    pub(super) fn leave_presence(&self, channel: &str) {
        if self.presence_rule(channel).is_some() {
            self.node
                .presence
                .leave(channel, &self.id.account, &self.id.label);
        }
    }

    /// `presence` (with `limit`) or, without, `presence_stats`.
    pub(super) fn read_presence(
        &mut self,
        id: Option<&RawValue>,
        channel: &str,
        limit: Option<u32>,
        ctx: &mut Context<Self>,
    ) {
        if !self.id.grants.subscribe.matches(channel) {
            self.forbid(id, channel, "read presence");
            return;
        }
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
