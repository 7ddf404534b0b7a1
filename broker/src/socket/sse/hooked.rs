//! The stream's channels a backend hook decides (§15): asked when the
//! request is admitted, priced and under the subscription cap, before the
//! stream starts, so a refusal is the response (403 with the hook's code,
//! 503 `hook_unavailable`; `hooks::HttpRefusal`) rather than an event on
//! a stream the client cannot answer. For those channels the hook
//! replaces the token's `sub_channels`; the actor then joins them without
//! asking again (`socket/actor/sse.rs`).

use std::collections::HashSet;
use std::sync::Arc;

use actix_web::HttpResponse;
use futures_util::future::join_all;

use crate::hooks::{Ask, Event, Hook};
use crate::node::Node;
use crate::socket::Identity;

/// The transport hooks are told (`client.transport`).
pub(super) const TRANSPORT: &str = "sse";

/// The hook deciding a subscribe on `channel` for this stream, unless it
/// only shadows the token (dry run; the actor's subscribe asks it then).
pub(super) fn deciding(node: &Node, channel: &str) -> Option<Arc<Hook>> {
    if !node.hooks.any() {
        return None;
    }
    node.hooks
        .hook_for(Event::Subscribe, Some(channel))
        .filter(|h| !h.config.dry_run)
}

fn ask(identity: &Identity, channel: &str) -> Ask {
    let mut ask = Ask::new(Event::Subscribe, identity.hook_client(TRANSPORT));
    ask.channel = Some(channel.to_owned());
    ask
}

/// A channel the token refuses: a dry-run hook covering it is told (the
/// token's refusal is enforced by the caller).
pub(super) fn shadow_refused(node: &Node, identity: &Identity, channel: &str) {
    if let Some(h) = node.hooks.hook_for(Event::Subscribe, Some(channel)) {
        node.hooks.shadow(&h, ask(identity, channel), false);
    }
}

/// Asks each hooked channel's hook, all at once (a stream names at most
/// `max_subscriptions` channels, checked before): `Ok` with the channels
/// allowed, or the first refusal in the request's order as the response.
pub(super) async fn ask_all(
    node: &Node,
    identity: &Identity,
    hooked: Vec<(Arc<Hook>, String)>,
) -> Result<HashSet<String>, HttpResponse> {
    let asks = hooked
        .iter()
        .map(|(hook, channel)| node.hooks.ask(hook, ask(identity, channel)));
    let decisions = join_all(asks).await;
    let mut allowed = HashSet::with_capacity(hooked.len());
    for ((_, channel), decision) in hooked.into_iter().zip(decisions) {
        let what = format!("this stream's subscribe on {channel:?}");
        if let Some(r) = decision.http_refusal(&what) {
            return Err(r.respond(&identity.account, &node.metrics));
        }
        allowed.insert(channel);
    }
    Ok(allowed)
}
