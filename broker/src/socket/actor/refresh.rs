//! A token replaced on an open socket (§2's `refresh`), and the socket's
//! deadline: closed with 4001 once its token's `exp` (plus
//! `auth.leeway_secs`) passes without a refresh, so a leaked token's
//! session ends with the token, not only with a ban.
//!
//! A refresh is verified like a handshake's token (signature, `exp`,
//! `nbf`, issuer, audience, plan). It must be for the same account (else
//! `forbidden`); a token that does not verify is `bad_request`; either way
//! the old token stays in force. An accepted one applies from then on:
//! its plan's limits (balances kept, as on a reload), its role, its
//! channel globs. A subscription the new token no longer allows ends: the
//! socket leaves the channel, and its presence membership (§13) with it,
//! and says so with a `forbidden` error naming it (no `id`: no request of
//! the client's caused it; except a subscribe whose presence join was
//! still waiting, which this answers).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use actix::prelude::*;
use serde_json::value::RawValue;

use super::Socket;
use super::presence::Membership;
use crate::account::Reconfigure;
use crate::metrics::Layer;
use crate::protocol::wire::{self, ErrorFrame};
use crate::protocol::{CloseCode, ErrorCode};

/// The longest single wait of the expiry timer; a later deadline is
/// waited for in steps (timer wheels cap far deadlines).
const MAX_WAIT: Duration = Duration::from_secs(24 * 3600);

fn unix_now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Socket {
    /// Arms the close at the token's deadline, replacing an earlier one.
    pub(super) fn arm_expiry(&mut self, ctx: &mut Context<Self>) {
        if let Some(h) = self.expiry.close.take() {
            ctx.cancel_future(h);
        }
        self.arm_hook_refresh(ctx);
        let deadline_ms = self.id.deadline.saturating_mul(1000);
        let wait = Duration::from_millis(deadline_ms.saturating_sub(unix_now_ms())).min(MAX_WAIT);
        self.expiry.close = Some(ctx.run_later(wait, |act, ctx| {
            act.expiry.close = None;
            if act.id.deadline.saturating_mul(1000) > unix_now_ms() {
                return act.arm_expiry(ctx);
            }
            act.socket_event(Layer::Connection, "token_expired");
            act.close(ctx, CloseCode::TokenExpired);
        }));
    }

    pub(super) fn refresh(&mut self, id: Option<&RawValue>, token: &str, ctx: &mut Context<Self>) {
        let auth = self.node.auth.load();
        let claims = match auth.verify(token) {
            Ok(c) => c,
            Err(e) => {
                let message = format!("refresh refused, the current token stays in force: {e}");
                return self.refuse_refresh(id, ErrorCode::BadRequest, &message);
            }
        };
        if *claims.sub != *self.id.account {
            let message = format!(
                "a refreshed token must be for this connection's account ({:?}), not {:?}; the current token stays in force",
                self.id.account, claims.sub
            );
            return self.refuse_refresh(id, ErrorCode::Forbidden, &message);
        }
        let config = self.node.config.load();
        let limits = match config.limits_for(&claims.sub, claims.plan.as_deref()) {
            Ok(l) => l,
            Err(e) => {
                let message = format!(
                    "refresh refused, the current token stays in force: {e}: the token's plan claim must name a plan in the config"
                );
                return self.refuse_refresh(id, ErrorCode::BadRequest, &message);
            }
        };
        self.id.deadline = auth.deadline(&claims);
        // A token's expiry from now on, not a hook's (§15).
        self.id.hook_life_ms = None;
        self.id.token_expires_at = claims.expires_at_ms();
        self.id.grants = claims.grants();
        self.id.role = claims.role;
        if self.id.plan != claims.plan {
            self.id.plan = claims.plan;
            if let Some(mut handle) = self.node.sockets.get_mut(&self.id.conn) {
                handle.plan = self.id.plan.clone();
            }
        }
        // New limits keep the balances; the role may change which rules apply.
        <Self as Handler<Reconfigure>>::handle(self, Reconfigure { limits }, ctx);
        self.arm_expiry(ctx);
        // Every subscription the new token does not grant ends, and its
        // presence membership with it; a presence join still waiting for
        // Redis is cancelled, its subscribe answered `forbidden`.
        let grants = &self.id.grants;
        let mut ended: Vec<(Arc<str>, Option<Box<RawValue>>)> = self
            .outbox
            .leave_unless(|c| grants.subscribe.matches(c))
            .into_iter()
            .map(|c| (c, None))
            .collect();
        for (channel, _) in &ended {
            self.node.broker.unsubscribe(channel, self.id.conn);
        }
        // A join still waiting is not a subscription yet (a member's is).
        ended.extend(
            self.presence
                .iter()
                .filter(|(c, m)| {
                    matches!(m, Membership::Joining { .. }) && !grants.subscribe.matches(c)
                })
                .map(|(c, _)| (c.clone(), None))
                .collect::<Vec<_>>(),
        );
        for (channel, id) in &mut ended {
            *id = self.end_presence(channel);
        }
        for (channel, id) in ended {
            self.exceeded(
                Layer::Connection,
                "forbidden",
                Some(&channel),
                Duration::ZERO,
                false,
            );
            let message = format!(
                "the refreshed token does not allow subscribing to {channel:?}: the subscription ended"
            );
            self.send(
                ErrorFrame::new(ErrorCode::Forbidden)
                    .id(id.as_deref())
                    .channel(&channel)
                    .message(&message)
                    .encode(),
            );
        }
        let _e = self.span().entered();
        tracing::debug!(expires_at = self.id.token_expires_at, "token refreshed");
        if let Some(id) = id {
            self.send(wire::refresh_ack(id, self.id.token_expires_at));
        }
    }

    fn refuse_refresh(&mut self, id: Option<&RawValue>, code: ErrorCode, message: &str) {
        self.exceeded(
            Layer::Connection,
            code.as_str(),
            None,
            Duration::ZERO,
            false,
        );
        self.send(ErrorFrame::new(code).id(id).message(message).encode());
    }
}
