//! The Pusher Channels front (§16): pusher-js, Laravel Echo and the Pusher
//! server libraries, on the broker's shared layers.
//!
//! - `/app/{key}` is a [`Dialect`](crate::dialect::Dialect) of the
//!   socket machinery (`session.rs`), so the §1 handshake layers, the
//!   connection's buckets, the outbound queue and its mark, the drain and
//!   an operator's closes are the socket's own; the app's key is the
//!   route's credential, admitted at the upgrade (the account's connection
//!   cap is a 429 before it). The socket's closes are said in Pusher's
//!   codes ([`Dialect::close_code`](crate::dialect::Dialect::close_code)).
//! - Channels are the hub's, under a name no Tidegate client can give
//!   ([`names::internal`]): the app's id between `|`s, outside §2's
//!   alphabet, so two apps never share a channel and `/v1/ws` cannot reach
//!   one.
//! - A subscription is a hub subscriber of its own (`sink.rs`) that
//!   queues Pusher frames published whole.
//! - A `presence-` subscription is also one §13 member (`presence.rs`),
//!   under a rule that counts and tells members by user; the machinery
//!   hands its watcher the member list and each window's users, which it
//!   renders as Pusher's frames on the subscription's sink.
//! - A `pusher:signin` makes the connection its user's (`user.rs`): the
//!   user's handshake bucket and connection count are the shared layers'
//!   under a key beside the app's channels, `#server-to-user-{id}` is a hub
//!   channel only that user's connections may hold, and the HTTP API's
//!   `terminate_connections` (`users_api.rs`) is an operator's disconnect
//!   of the user (§10's, on every node).

mod activity;
pub mod api;
pub mod auth;
mod client_event;
pub mod frames;
mod hooked;
mod md5;
pub mod names;
mod opening;
pub mod presence;
mod session;
pub mod sign;
mod signed;
pub mod sink;
#[cfg(test)]
mod sizes;
mod subscribe;
mod user;
mod users_api;
mod watchlist;

use std::sync::Arc;

use actix_http::RequestHead;

use crate::admission::{TokenTimes, Who};
use crate::config::PusherApp;
use crate::dialect::Route;
use crate::node::Node;

/// WebSockets are served on `/app/{key}`.
pub const WS_PREFIX: &str = "/app/";

/// `/app/{key}`: Pusher's protocol over the socket machinery.
pub const ROUTE: Route = Route {
    path: WS_PREFIX,
    prefix: true,
    subprotocol: None,
    credential,
    open: session::open,
    refusal: crate::refusal::refusal,
};

/// The app a request's path names by its key.
pub fn app_by_key(node: &Node, key: &str) -> Option<Arc<PusherApp>> {
    let config = node.config.load();
    config.pusher_apps.iter().find(|a| a.key == key).cloned()
}

/// The app `/apps/{id}/...` names.
pub fn app_by_id(node: &Node, id: &str) -> Option<Arc<PusherApp>> {
    let config = node.config.load();
    config.pusher_apps.iter().find(|a| a.id == id).cloned()
}

/// The app's account, admitted at the upgrade like a token's: it counts
/// toward the account's connection cap and takes part in its budget. An
/// unknown key names none: the socket opens and says 4001 (pusher-js then
/// stops).
fn credential(node: &Arc<Node>, head: &RequestHead) -> Option<Who> {
    let key = head.uri.path().strip_prefix(WS_PREFIX)?;
    let app = app_by_key(node, key)?;
    let config = node.config.load();
    let limits = config.account_limits(&app.account);
    Some(Who {
        account: app.account.clone(),
        plan: None,
        role: None,
        limits,
        grants: crate::auth::Grants {
            subscribe: crate::protocol::glob::GlobSet::new::<&str>(&[]),
            publish: crate::protocol::glob::GlobSet::new::<&str>(&[]),
        },
        // Never expires: the app's key is not a token.
        token: Some(TokenTimes {
            expires_at_ms: 0,
            deadline: u64::MAX,
        }),
        info: None,
    })
}
