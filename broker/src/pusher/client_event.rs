//! What a `client-*` event does once the session admitted it (charged, on
//! a private or presence channel this socket holds, the app allowing
//! them): published on the app's hub channel, never echoed to its sender,
//! told to the app's `client_event` webhook, and counted for the app.

use std::any::Any;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::frames::{self, code};
use super::names::{self, Kind};
use super::sink::publish_data;
use super::subscribe::Sub;
use crate::cluster::Pending;
use crate::config::PusherApp;
use crate::dialect::Link;
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
    node.broker.publish(e.internal, &published, None)
}

/// A client event (its hook's `data`, if one rewrote it) published on
/// `sub`'s channel; the bridge's answer awaited off the connection.
pub(super) fn send_on(
    (link, node, tally): (&mut dyn Link, &Node, Option<&AppTally>),
    (sub, channel, socket_id): (&Sub, &str, &str),
    event: &str,
    data: &Value,
) {
    let data = frames::data_string(data);
    let e = ClientEvent {
        event,
        channel,
        internal: &sub.sink.channel,
        data: &data,
        socket_id,
        user: sub.members.as_ref().map(|m| &*m.me.user_id),
    };
    if let Pending::Later(f) = publish(node, tally, &e) {
        link.spawn(Box::pin(async move {
            f.await;
            Box::new(()) as Box<dyn Any>
        }));
    }
}

/// Why a client event is not sent on.
pub(super) enum Refused {
    /// `pusher:error` 4301, at most one a second (the session's notice).
    Notice(&'static str),
    /// `pusher:error` without a code: a mistake about the frame.
    Error(String),
}

/// The app allows client events, the socket holds `channel`, and the
/// channel is private, encrypted or presence.
pub(super) fn check(app: &PusherApp, held: bool, channel: &str) -> Result<(), Refused> {
    if !app.client_events {
        return Err(Refused::Notice("client events are disabled for this app"));
    }
    if !held {
        return Err(Refused::Error(format!(
            "client event on {channel:?}, which this socket is not subscribed to"
        )));
    }
    if !matches!(
        names::kind(channel),
        Kind::Private | Kind::Encrypted | Kind::Presence
    ) {
        return Err(Refused::Error(
            "client events are only for private and presence channels".into(),
        ));
    }
    Ok(())
}

/// At most one `pusher:error` 4301 a second (§3's `rate_limited`).
const NOTICE_INTERVAL: Duration = Duration::from_secs(1);

/// A connection's `pusher:error` 4301 notices: a client event its bucket
/// refused (or the app's settings) is dropped with at most one a second.
#[derive(Default)]
pub(super) struct Notices {
    /// When the last one went out.
    last: Option<Instant>,
}

impl Notices {
    pub fn send(&mut self, link: &mut dyn Link, message: &str) {
        let now = Instant::now();
        if self
            .last
            .is_some_and(|t| now.duration_since(t) < NOTICE_INTERVAL)
        {
            return;
        }
        self.last = Some(now);
        link.send(&frames::error(Some(code::CLIENT_EVENT_REJECTED), message));
    }
}
