//! A socket's frames that a backend hook decides (§15): `subscribe` and
//! `publish` on a channel a hook covers, and `rpc`. The frame was charged
//! already (`handle.rs`); the call runs on the hooks' runtime and its
//! answer comes back to the actor as a future's output, so other frames
//! go on meanwhile; answers on one channel apply in frame order
//! (`hooks/order.rs`).

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use serde_json::Value;
use serde_json::value::RawValue;

use super::Socket;
use crate::hooks::{Ask, Client, Decision, Event, Hook};
use crate::metrics::Layer;
use crate::metrics::hooks::hook_reason;
use crate::protocol::ErrorCode;
use crate::protocol::wire::{self, ErrorFrame};

/// A hooked frame waiting for its turn on its channel.
pub(super) enum Hooked {
    Subscribe {
        id: Option<Box<RawValue>>,
        since: Option<u64>,
        decision: Decision,
    },
    Publish {
        id: Option<Box<RawValue>>,
        data: Box<RawValue>,
        key: Option<String>,
        decision: Decision,
    },
}

impl Socket {
    /// What the hooks are told of this connection.
    pub(super) fn hook_client(&self) -> Client {
        let transport = if self.sse.is_some() {
            "sse"
        } else {
            "websocket"
        };
        self.id.hook_client(transport)
    }

    pub(super) fn hook_ask(&self, event: Event, channel: Option<&str>) -> Ask {
        let mut ask = Ask::new(event, self.hook_client());
        ask.channel = channel.map(str::to_owned);
        ask
    }

    /// The hook deciding `event` on `channel`, and whether it only
    /// shadows the token (dry run).
    pub(super) fn channel_hook(&self, event: Event, channel: &str) -> Option<Arc<Hook>> {
        if !self.node.hooks.any() {
            return None;
        }
        self.node.hooks.hook_for(event, Some(channel))
    }

    /// Asks `hook` about a frame on `channel`; the answer is applied with
    /// the channel's earlier ones.
    pub(super) fn ask_in_order(
        &mut self,
        hook: &Arc<Hook>,
        ask: Ask,
        channel: &str,
        ctx: &mut Context<Self>,
        then: impl FnOnce(Decision) -> Hooked + 'static,
    ) {
        let ticket = self.hook_order.issue(channel);
        let channel: Arc<str> = channel.into();
        let answer = self.node.hooks.ask(hook, ask);
        ctx.spawn(answer.into_actor(self).map(move |decision, act, ctx| {
            for (ready, cancelled) in act.hook_order.complete(&channel, ticket, then(decision)) {
                if act.closing {
                    return;
                }
                // A subscribe the client unsubscribed meanwhile does not
                // happen (as a presence join waiting for Redis).
                if cancelled && matches!(ready, Hooked::Subscribe { .. }) {
                    continue;
                }
                act.apply_hooked(&channel, ready, ctx);
            }
        }));
    }

    fn apply_hooked(&mut self, channel: &str, hooked: Hooked, ctx: &mut Context<Self>) {
        match hooked {
            Hooked::Subscribe {
                id,
                since,
                decision,
            } => match decision {
                Decision::Allowed { .. } => {
                    self.subscribe_allowed(id.as_deref(), channel, since, ctx)
                }
                other => self.hook_refused(id.as_deref(), Some(channel), other, ctx),
            },
            Hooked::Publish {
                id,
                data,
                key,
                decision,
            } => match decision {
                allowed @ Decision::Allowed { .. } => {
                    let data = allowed.replaced_data().unwrap_or(data);
                    self.publish_now(id.as_deref(), channel, &data, key.as_deref(), ctx);
                }
                other => self.hook_refused(id.as_deref(), Some(channel), other, ctx),
            },
        }
    }

    /// A hook's refusal, disconnect or failure as this socket says it.
    pub(super) fn hook_refused(
        &mut self,
        id: Option<&RawValue>,
        channel: Option<&str>,
        decision: Decision,
        ctx: &mut Context<Self>,
    ) {
        match decision {
            Decision::Allowed { .. } => {}
            Decision::Refused {
                code,
                message,
                retry_after_ms,
            } => {
                self.exceeded(
                    Layer::Hook,
                    hook_reason(&code),
                    channel,
                    Duration::ZERO,
                    false,
                );
                let mut frame = ErrorFrame::custom(&code).id(id).message(&message);
                if let Some(c) = channel {
                    frame = frame.channel(c);
                }
                if let Some(ms) = retry_after_ms {
                    frame = frame.retry_after_ms(ms);
                }
                self.send(frame.encode());
            }
            Decision::Disconnect { code, reason } => {
                self.exceeded(Layer::Hook, "disconnected", channel, Duration::ZERO, false);
                self.close_with(ctx, code, &reason, false);
            }
            Decision::Unavailable { retry_after } => {
                let code = ErrorCode::HookUnavailable;
                self.exceeded(Layer::Hook, code.as_str(), channel, retry_after, false);
                let mut frame = ErrorFrame::new(code)
                    .id(id)
                    .message("the backend deciding this did not answer; try again later")
                    .retry_after_ms(super::handle::retry_ms(retry_after));
                if let Some(c) = channel {
                    frame = frame.channel(c);
                }
                self.send(frame.encode());
            }
        }
    }

    /// An `rpc` frame (§15): the backend's `data`, or an error naming `id`.
    pub(super) fn rpc(
        &mut self,
        id: Option<&RawValue>,
        method: &str,
        data: Option<&RawValue>,
        ctx: &mut Context<Self>,
    ) {
        let Some(hook) = self.node.hooks.hook_for(Event::Rpc, None) else {
            self.exceeded(
                Layer::Connection,
                ErrorCode::UnknownMethod.as_str(),
                None,
                Duration::ZERO,
                false,
            );
            let message = format!("no backend answers rpc (method {method:?})");
            self.send(
                ErrorFrame::new(ErrorCode::UnknownMethod)
                    .id(id)
                    .message(&message)
                    .encode(),
            );
            return;
        };
        let mut ask = self.hook_ask(Event::Rpc, None);
        ask.method = Some(method.to_owned());
        ask.data = data.map(ToOwned::to_owned);
        let id: Option<Box<RawValue>> = id.map(ToOwned::to_owned);
        let answer = self.node.hooks.ask(&hook, ask);
        ctx.spawn(answer.into_actor(self).map(move |decision, act, ctx| {
            if act.closing {
                return;
            }
            match decision {
                Decision::Allowed { result, .. } => {
                    let data = result.get("data").cloned().unwrap_or(Value::Null);
                    act.send(wire::rpc_reply(id.as_deref(), &data));
                }
                other => act.hook_refused(id.as_deref(), None, other, ctx),
            }
        }));
    }
}
