//! `POST /v1/client/publish`'s publish hook (§15): for a channel a hook
//! decides, the hook replaces the token's `pub_channels`; it is asked
//! after the charge and before the fan-out, once per idempotency key (a
//! duplicate gets the first answer without a call), and may rewrite the
//! message. A dry-run hook is asked and compared; the token decides.

use std::net::IpAddr;
use std::sync::Arc;

use actix_web::HttpResponse;
use serde_json::value::RawValue;

use crate::auth::Claims;
use crate::hooks::{Ask, ChannelHook, Client, Event};
use crate::idempotency::Keyed;
use crate::node::Node;

/// The transport hooks are told (`client.transport`).
const TRANSPORT: &str = "http";

/// The caller as a hook sees it: one id per request (no connection).
fn client(node: &Node, claims: &Claims, ip: IpAddr) -> Client {
    let config = node.config.load();
    let conn_id: Arc<str> = format!("{}-{:x}", config.node.id, node.next_conn()).into();
    Client::of_token(claims, conn_id, ip, TRANSPORT)
}

fn ask(node: &Node, claims: &Claims, ip: IpAddr, channel: &str, data: &RawValue) -> Ask {
    let mut ask = Ask::new(Event::Publish, client(node, claims, ip));
    ask.channel = Some(channel.to_owned());
    ask.data = Some(data.to_owned());
    ask
}

/// Whether the token may publish on `channel` where no hook decides; a
/// dry-run hook is told the token's answer when it refuses (an allowed
/// publish tells it in [`decide`], after the charge).
pub(super) fn token_decides(
    node: &Node,
    claims: &Claims,
    ip: IpAddr,
    who: &ChannelHook,
    channel: &str,
    data: &RawValue,
    token_allows: bool,
) -> bool {
    match who {
        ChannelHook::Deciding(_) => false,
        ChannelHook::Shadow(h) if !token_allows => {
            node.hooks
                .shadow(h, ask(node, claims, ip, channel, data), false);
            true
        }
        _ => true,
    }
}

/// After the charge: the hook's answer for a publish it decides, as the
/// data to publish (`Ok(None)`: as sent) or the refusal to answer.
pub(super) async fn decide(
    node: &Node,
    claims: &Claims,
    ip: IpAddr,
    who: &ChannelHook,
    channel: &str,
    data: &RawValue,
    keyed: Option<Keyed<'_>>,
) -> Result<Option<Box<RawValue>>, HttpResponse> {
    match who {
        ChannelHook::Token => Ok(None),
        ChannelHook::Shadow(h) => {
            node.hooks
                .shadow(h, ask(node, claims, ip, channel, data), true);
            Ok(None)
        }
        // §17: a duplicate gets the first answer without a call.
        ChannelHook::Deciding(_) if node.is_duplicate(channel, keyed) => Ok(None),
        ChannelHook::Deciding(h) => {
            let decision = node
                .hooks
                .ask(h, ask(node, claims, ip, channel, data))
                .await;
            if let Some(r) = decision.http_refusal("this publish") {
                return Err(r.respond(&claims.sub, &node.metrics));
            }
            Ok(decision.replaced_data())
        }
    }
}
