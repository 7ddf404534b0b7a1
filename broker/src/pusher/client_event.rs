//! What a `client-*` event does once the session admitted it (charged, on
//! a private or presence channel this socket holds, the app allowing
//! them): published on the app's hub channel, never echoed to its sender,
//! told to the app's `client_event` webhook, and counted for the app.

use std::sync::Arc;

use serde_json::json;

use super::frames;
use super::sink::publish_data;
use crate::cluster::Pending;
use crate::idempotency::Published;
use crate::metrics::pusher::AppTally;
use crate::node::Node;
use crate::webhook::event::CLIENT_EVENT;

/// One admitted client event.
pub(super) struct ClientEvent<'a> {
    /// The event's name (`client-...`).
    pub event: &'a str,
    /// The Pusher name of the channel, and the hub's.
    pub channel: &'a str,
    pub internal: &'a Arc<str>,
    /// The data as the client sent it (a string).
    pub data: &'a str,
    pub socket_id: &'a str,
    /// On a presence channel, the sender's user.
    pub user: Option<&'a str>,
}

/// Publishes `e`: the bridge's answer, for the session to wait on when it
/// is not at once.
pub(super) fn publish(
    node: &Node,
    tally: Option<&AppTally>,
    e: &ClientEvent<'_>,
) -> Pending<Published> {
    let frame = frames::channel_event(e.event, e.channel, e.data, e.user);
    let published = publish_data(e.socket_id, &frame);
    node.metrics.published("pusher");
    if let Some(t) = tally {
        t.client_event();
    }
    node.webhooks.pusher_event(e.internal, CLIENT_EVENT, || {
        let mut body = json!({"name": CLIENT_EVENT, "channel": e.channel, "event": e.event,
            "data": e.data, "socket_id": e.socket_id});
        if let Some(user) = e.user {
            body["user_id"] = json!(user);
        }
        body
    });
    node.bridge.publish(e.internal, &published, None)
}
