//! A connection the connect hook opened (§15): its server-side channels,
//! joined before the `welcome` that lists them, and its hook-given expiry,
//! which the refresh hook extends `refresh_lead_ms` before it passes (told
//! with an `expiry` frame); a refusal, or a failure under `deny`, leaves
//! the expiry as it is, so the socket closes with 4001 at `expiresAt`.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use serde_json::Value;

use super::{Socket, welcome_limits};
use crate::cluster::Pending;
use crate::hooks::{Decision, Event, refresh_lead};
use crate::hub::{Joined, Sink, Subscriber};
use crate::protocol::wire::{self, WelcomeChannel};

impl Socket {
    /// Joins the connect hook's `channels`, then sends the `welcome` with
    /// their positions, then what each join brought.
    pub(super) fn join_server_channels(&mut self, ctx: &mut Context<Self>) {
        let channels = self.id.server_channels.clone();
        let mut joins = Vec::with_capacity(channels.len());
        for channel in channels {
            let sub = Subscriber {
                conn: self.id.conn,
                sink: Sink::Socket(self.outbox.clone()),
                gauge: self.gauge.clone(),
            };
            self.next_join += 1;
            let join = self.next_join;
            self.outbox.joining(&channel, join);
            let pending = self.node.broker.subscribe(&channel, sub, None);
            joins.push(async move {
                let joined: Joined = match pending {
                    Pending::Ready(j) => j,
                    Pending::Later(f) => f.await,
                };
                (channel, join, joined)
            });
        }
        let all = futures_util::future::join_all(joins);
        ctx.spawn(all.into_actor(self).map(|results, act, ctx| {
            let listed: Vec<WelcomeChannel> = results
                .iter()
                .map(|(channel, _, joined)| WelcomeChannel {
                    channel: channel.clone(),
                    seq: joined.position(),
                })
                .collect();
            let config = act.node.config.load();
            let share = act.node.limiter_store.account_share(&act.id.account);
            act.send(wire::welcome(
                &act.id.label,
                &act.id.account,
                &config.node.id,
                &welcome_limits(act.limits(), share),
                act.id.token_expires_at,
                Some(&listed),
            ));
            for (channel, join, joined) in results {
                act.joined(&channel, join, None, joined, ctx);
            }
        }));
    }

    /// Arms the refresh hook's call before a hook-given expiry (replacing
    /// an earlier one); nothing for a token's expiry or without a hook.
    pub(super) fn arm_hook_refresh(&mut self, ctx: &mut Context<Self>) {
        if let Some(h) = self.expiry.hook_refresh.take() {
            ctx.cancel_future(h);
        }
        if self.id.hook_life_ms.is_none() || self.id.token_expires_at == 0 {
            return;
        }
        let Some(hook) = self.node.hooks.hook_for(Event::Refresh, None) else {
            return;
        };
        let now = crate::clock::unix_ms();
        let life = Duration::from_millis(self.id.token_expires_at.saturating_sub(now));
        let wait = life.saturating_sub(refresh_lead(&hook.config, life));
        self.expiry.hook_refresh = Some(ctx.run_later(wait, move |act, ctx| {
            act.expiry.hook_refresh = None;
            let ask = act.hook_ask(Event::Refresh, None);
            let answer = act.node.hooks.ask(&hook, ask);
            ctx.spawn(answer.into_actor(act).map(|decision, act, ctx| {
                if !act.closing {
                    act.refreshed(decision, ctx);
                }
            }));
        }));
    }

    fn refreshed(&mut self, decision: Decision, ctx: &mut Context<Self>) {
        let now = crate::clock::unix_ms();
        let expires_at = match decision {
            Decision::Allowed {
                result,
                failed_open: false,
            } => {
                if let Some(info) = result.get("info").filter(|v| !v.is_null()) {
                    self.id.info = Some(Arc::from(info.to_string()));
                }
                result
                    .get("expiresAt")
                    .and_then(Value::as_u64)
                    .unwrap_or_default()
            }
            // `allow`: extended by the life the last answer gave.
            Decision::Allowed { .. } => self
                .id
                .token_expires_at
                .saturating_add(self.id.hook_life_ms.unwrap_or_default()),
            Decision::Disconnect { code, reason } => {
                return self.close_with(ctx, code, &reason, false);
            }
            // Refused or unavailable: closed with 4001 at the expiry.
            Decision::Refused { .. } | Decision::Unavailable { .. } => return,
        };
        if expires_at <= now {
            return;
        }
        self.id.hook_life_ms = Some(expires_at - now);
        self.id.token_expires_at = expires_at;
        self.id.deadline = expires_at.div_ceil(1000);
        self.send(wire::expiry(expires_at));
        self.arm_expiry(ctx);
    }
}
