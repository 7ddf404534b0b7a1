//! §15's backend hooks on the Pusher front: `subscribe` for a
//! `pusher:subscribe`, `publish` for a client event (`client-*`), on a
//! channel a hook's `channels` cover. Asked through the one machinery every
//! front shares ([`crate::hooks`]: the hook's pacing bucket and in-flight
//! cap, single flight, `cache_ms`, the breaker, `on_error`, `dry_run`), so
//! a Pusher client costs the backend what any client does.
//!
//! - The globs see the channel as the app names it (`private-doc-1`), never
//!   the app-scoped hub name; the backend is told the same name.
//! - Hooks are the node's, apps are tenants: `client.info` is
//!   `{"app":"<app id>"}`, which the backend reads to tell apps apart and
//!   which the hooks' cache and single flight key on, so two apps' answers
//!   are never shared. `client.transport` is `pusher`, `client.connId` the
//!   `socket_id`, `client.sub` the signed-in user's id (`pusher:signin`),
//!   absent before.
//! - Asked after the frame is charged and Pusher's own checks passed (the
//!   name, the subscription cap, the channel's signature; for a client
//!   event, `client_events` and the channel), before the join or the
//!   fan-out: a client whose budget is empty or whose signature is bad
//!   never reaches the backend. `#server-to-user-{id}` is the broker's to
//!   decide (the signed-in user's own), never a hook's.
//! - Answers apply in frame order per channel ([`HookOrder`]), so a
//!   connection's client events on a channel keep their order; a
//!   subscribe unsubscribed while its hook is asked does not happen.
//! - `connect`, `refresh` and `rpc` do not apply: the app's key is the
//!   connection's credential and each private channel carries its own
//!   signature, so there is no token for `connect` to replace.

use std::any::Any;
use std::sync::Arc;

use serde_json::Value;

use super::frames::{self, code};
use super::names;
use super::presence::ChannelData;
use crate::config::PusherApp;
use crate::dialect::Link;
use crate::exceeded::Exceeded;
use crate::hooks::order::HookOrder;
use crate::hooks::{Ask, ChannelHook, Client, Decision, Event};
use crate::metrics::Layer;
use crate::metrics::hooks::hook_reason;

/// What waits for a hook's answer.
pub(super) enum Asked {
    /// A `pusher:subscribe` that passed its checks (`Some`: the presence
    /// member it joins as).
    Subscribe(Option<ChannelData>),
    /// A client event: its name and its `data` as the client sent it.
    ClientEvent { event: String, data: Value },
}

/// A hook's answer, back on the connection (a spawned work's output).
struct Answered {
    channel: Arc<str>,
    ticket: u64,
    asked: Asked,
    decision: Decision,
}

/// An answer whose turn came.
pub(super) struct Ready {
    pub channel: Arc<str>,
    pub asked: Asked,
    pub decision: Decision,
    /// The client unsubscribed the channel after this was asked.
    pub cancelled: bool,
}

/// Who the backend is told the connection is.
pub(super) struct Asker<'a> {
    pub app: &'a PusherApp,
    pub socket_id: &'a str,
    pub user: Option<Arc<str>>,
}

impl Asker<'_> {
    fn client(&self, link: &dyn Link) -> Client {
        let info = serde_json::json!({ "app": self.app.id }).to_string();
        Client {
            conn_id: self.socket_id.into(),
            ip: link.ip(),
            transport: "pusher",
            sub: self.user.clone(),
            plan: None,
            info: Some(info.into()),
        }
    }
}

/// The connection's calls in flight. Bounded by the frames in flight, each
/// charged already and answered within its hook's `timeout_ms`; pending
/// subscribes also count toward the subscription cap (the session).
///
/// The order is made at the first call a hook is asked: most connections
/// never ask one, and each holds its `PusherHooks` for its whole life
/// (issue 40's idle memory).
#[derive(Default)]
pub(super) struct PusherHooks {
    order: Option<Box<HookOrder<(Asked, Decision)>>>,
}

impl PusherHooks {
    /// Asks the hook deciding `asked` on `channel`, if one does: `None`,
    /// the answer comes back through [`PusherHooks::done`]; `Some`, nothing
    /// decides (or a dry-run hook only shadows the app's own checks, which
    /// allowed it): go on at once.
    pub fn ask(
        &mut self,
        link: &mut dyn Link,
        asker: &Asker<'_>,
        channel: &str,
        asked: Asked,
    ) -> Option<Asked> {
        let node = link.node().clone();
        if !node.hooks.any() || names::user_of(channel).is_some() {
            return Some(asked);
        }
        let event = match asked {
            Asked::Subscribe(_) => Event::Subscribe,
            Asked::ClientEvent { .. } => Event::Publish,
        };
        let hook = match node.hooks.for_channel(event, channel) {
            ChannelHook::Token => return Some(asked),
            ChannelHook::Shadow(h) | ChannelHook::Deciding(h) => h,
        };
        let mut ask = Ask::new(event, asker.client(link));
        ask.channel = Some(channel.to_owned());
        if let Asked::ClientEvent { data, .. } = &asked {
            ask.data = serde_json::value::to_raw_value(data).ok();
        }
        if hook.config.dry_run {
            node.hooks.shadow(&hook, ask, true);
            return Some(asked);
        }
        let ticket = self.order.get_or_insert_default().issue(channel);
        let channel: Arc<str> = channel.into();
        let answer = node.hooks.ask(&hook, ask);
        link.spawn(Box::pin(async move {
            let decision = answer.await;
            Box::new(Answered {
                channel,
                ticket,
                asked,
                decision,
            }) as Box<dyn Any>
        }));
        None
    }

    /// A spawned work's output: the answers that may apply now, in order,
    /// if it was a hook's; else the output back.
    pub fn done(&mut self, output: Box<dyn Any>) -> Result<Vec<Ready>, Box<dyn Any>> {
        let a = output.downcast::<Answered>()?;
        let ready = self.order.get_or_insert_default().complete(
            &a.channel,
            a.ticket,
            (a.asked, a.decision),
        );
        Ok(ready
            .into_iter()
            .map(|((asked, decision), cancelled)| Ready {
                channel: a.channel.clone(),
                asked,
                decision,
                cancelled,
            })
            .collect())
    }

    /// The client unsubscribed `channel`: a subscribe asked before it does
    /// not happen.
    pub fn cancel(&mut self, channel: &str) {
        if let Some(order) = &mut self.order {
            order.cancel(channel);
        }
    }

    /// Calls still waiting for their answer or their turn.
    pub fn pending(&self) -> usize {
        self.order.as_ref().map_or(0, |o| o.pending())
    }
}

/// A hook's refusal of a subscription, said as Pusher says one:
/// `pusher:subscription_error` with the hook's code as `error`, status 403
/// (`AuthError`), or 429 (`LimitReached`) when it is temporary (the hook
/// gave `retryAfterMs`, or no answer came under `on_error = "deny"`:
/// `hook_unavailable`); a `disconnect` closes the connection.
pub(super) fn refuse_subscription(
    link: &mut dyn Link,
    app: &PusherApp,
    channel: &str,
    decision: Decision,
) {
    let (kind, error, status) = match decision {
        Decision::Allowed { .. } => return,
        Decision::Disconnect { code, reason } => return disconnect(link, app, code, &reason),
        Decision::Refused {
            code,
            retry_after_ms,
            ..
        } => {
            let status = if retry_after_ms.is_some() { 429 } else { 403 };
            count(link, app, Some(channel), hook_reason(&code));
            let kind = if status == 429 {
                "LimitReached"
            } else {
                "AuthError"
            };
            (kind, code, status)
        }
        Decision::Unavailable { .. } => {
            count(link, app, Some(channel), "hook_unavailable");
            ("LimitReached", "hook_unavailable".to_owned(), 429)
        }
    };
    link.send(&frames::subscription_error(channel, kind, &error, status));
}

/// A hook's refusal of a client event: dropped and answered `pusher:error`
/// 4301 (§16's code for a client event not sent on), naming the hook's
/// code; the connection stays open. A `disconnect` closes it.
pub(super) fn refuse_event(link: &mut dyn Link, app: &PusherApp, channel: &str, d: Decision) {
    let message = match d {
        Decision::Allowed { .. } => return,
        Decision::Disconnect { code, reason } => return disconnect(link, app, code, &reason),
        Decision::Refused { code, message, .. } => {
            count(link, app, Some(channel), hook_reason(&code));
            format!("client event on {channel} refused: {code}: {message}")
        }
        Decision::Unavailable { retry_after } => {
            count(link, app, Some(channel), "hook_unavailable");
            let ms = retry_after.as_millis();
            format!(
                "client event on {channel} refused: hook_unavailable: the backend deciding it did not answer; retry in {ms} ms"
            )
        }
    };
    link.send(&frames::error(Some(code::CLIENT_EVENT_REJECTED), &message));
}

/// A hook's `disconnect`: `pusher:error` with its code, then the close.
fn disconnect(link: &mut dyn Link, app: &PusherApp, code: u16, reason: &str) {
    count(link, app, None, "disconnected");
    link.send(&frames::error(Some(code), reason));
    link.close(code, reason);
}

fn count(link: &dyn Link, app: &PusherApp, channel: Option<&str>, reason: &'static str) {
    let node = link.node().clone();
    let mut e = Exceeded::new(Layer::Hook, reason, &app.account).conn(link.label());
    if let Some(c) = channel {
        e = e.channel(c);
    }
    e.emit(&node.metrics);
}
