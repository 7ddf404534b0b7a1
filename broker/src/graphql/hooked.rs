//! §15's hooks for GraphQL: the subscribe hook for a `messages`
//! subscription over graphql-ws, the publish hook for the `publish` and
//! `publishBatch` mutations of a token (an API key is the backend itself
//! and never calls one). Each runs in its resolver: the operation was
//! priced and charged (and a subscription held to the cap) before it ran.
//! For a channel a hook decides, it replaces the token's globs; a
//! dry-run hook is asked and compared, the token decides. A refusal is a
//! GraphQL error whose `extensions.code` is the hook's code
//! (`HOOK_UNAVAILABLE` for a failure under `deny`), counted under
//! `layer="hook"`. A `disconnect` closes a graphql-ws socket with its
//! code; over HTTP (a mutation) it is `FORBIDDEN`.

use std::time::Duration;

use async_graphql::{Error, ErrorExtensions};

use super::admission::{Start, Ticket};
use crate::exceeded::Exceeded;
use crate::hooks::{Ask, ChannelHook, Decision, Event};
use crate::idempotency::Keyed;
use crate::metrics::Layer;

/// Who decides `event` on `channel` for this operation's caller.
pub(super) fn who(t: &Ticket, event: Event, channel: &str) -> ChannelHook {
    if t.caller.hook_client().is_none() {
        return ChannelHook::Token;
    }
    t.node.hooks.for_channel(event, channel)
}

fn ask(t: &Ticket, event: Event, channel: &str, data: Option<&str>) -> Option<Ask> {
    let mut ask = Ask::new(event, t.caller.hook_client()?);
    ask.channel = Some(channel.to_owned());
    ask.data = data.and_then(|d| serde_json::value::RawValue::from_string(d.to_owned()).ok());
    Some(ask)
}

/// Tells a dry-run hook what the token decided (nothing otherwise).
pub(super) fn shadow(
    t: &Ticket,
    who: &ChannelHook,
    event: Event,
    channel: &str,
    data: Option<&str>,
    token_allows: bool,
) {
    if let ChannelHook::Shadow(h) = who
        && let Some(a) = ask(t, event, channel, data)
    {
        t.node.hooks.shadow(h, a, token_allows);
    }
}

/// A decision that does not allow, as a GraphQL error (counted).
fn refusal(t: &Ticket, decision: Decision, what: &str) -> Error {
    let (code, message, retry, reason) = match decision {
        Decision::Allowed { .. } => unreachable!("only refusals are worded"),
        Decision::Refused {
            code,
            message,
            retry_after_ms,
        } => {
            let reason = crate::metrics::hooks::hook_reason(&code);
            (
                code,
                message,
                retry_after_ms.map(Duration::from_millis),
                reason,
            )
        }
        Decision::Disconnect { reason, .. } => (
            "FORBIDDEN".to_owned(),
            if reason.is_empty() {
                format!("the backend refused {what}")
            } else {
                reason
            },
            None,
            "disconnected",
        ),
        Decision::Unavailable { retry_after } => (
            "HOOK_UNAVAILABLE".to_owned(),
            format!("the backend deciding {what} did not answer; try again later"),
            Some(retry_after),
            crate::protocol::ErrorCode::HookUnavailable.as_str(),
        ),
    };
    let mut e = Exceeded::new(Layer::Hook, reason, &t.caller.account);
    if let Some(d) = retry {
        e = e.reset(d);
    }
    e.emit(&t.node.metrics);
    Error::new(message).extend_with(|_, x| {
        x.set("code", code.as_str());
        x.set(
            "retryAfterMs",
            retry.map_or(0, crate::refusal::retry_after_ms),
        );
    })
}

/// The subscribe hook's answer for a channel it decides: `Ok(true)` when
/// it decided (allowed), `Ok(false)` when the token decides.
pub(super) async fn subscribe(t: &Ticket, channel: &str) -> Result<bool, Error> {
    let who = who(t, Event::Subscribe, channel);
    let ChannelHook::Deciding(h) = &who else {
        shadow(
            t,
            &who,
            Event::Subscribe,
            channel,
            None,
            t.caller.may_read(channel),
        );
        return Ok(false);
    };
    let Some(a) = ask(t, Event::Subscribe, channel, None) else {
        return Ok(false);
    };
    match t.node.hooks.ask(h, a).await {
        Decision::Allowed { .. } => Ok(true),
        other => {
            if let Decision::Disconnect { code, reason } = &other {
                // The socket closes with the hook's code (`ws/mod.rs`).
                *t.subscribe.lock() = Some(Start::Disconnect {
                    code: *code,
                    reason: reason.clone(),
                });
            }
            Err(refusal(t, other, &format!("subscribes on {channel:?}")))
        }
    }
}

/// The publish hook's answer for a checked message on a channel it
/// decides: the text to publish (the hook's rewrite, or as sent). A
/// duplicate of a key gets the first answer without a call (§17).
pub(super) async fn publish(
    t: &Ticket,
    who: &ChannelHook,
    channel: &str,
    text: String,
    keyed: Option<Keyed<'_>>,
) -> Result<String, Error> {
    match who {
        ChannelHook::Token => Ok(text),
        ChannelHook::Shadow(_) => {
            shadow(t, who, Event::Publish, channel, Some(&text), true);
            Ok(text)
        }
        ChannelHook::Deciding(_) if t.node.is_duplicate(channel, keyed) => Ok(text),
        ChannelHook::Deciding(h) => {
            let Some(a) = ask(t, Event::Publish, channel, Some(&text)) else {
                return Ok(text);
            };
            let decision = t.node.hooks.ask(h, a).await;
            if !decision.allows() {
                return Err(refusal(t, decision, &format!("publishes on {channel:?}")));
            }
            Ok(decision
                .replaced_data()
                .map_or(text, |d| d.get().to_owned()))
        }
    }
}
