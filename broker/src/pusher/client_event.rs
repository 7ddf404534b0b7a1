//! Client events (`client-*`, §16): what one must pass before it is sent
//! on (or asked about, `hooked.rs`), and its fan-out to the channel's
//! other subscribers with the app's `client_event` webhook.

use std::any::Any;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::frames::{self, code};
use super::names::{self, Kind};
use super::sink::publish_data;
use super::subscribe::Sub;
use crate::cluster::Pending;
use crate::config::PusherApp;
use crate::node::Node;
use crate::node::dialect::Link;
use crate::webhook::event::CLIENT_EVENT;

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

/// `event` with `data` (as the client sent it, or as a hook rewrote it)
/// to `sub`'s channel, never echoed to the sender (`socket_id`); carries
/// `user_id` on a presence channel.
pub(super) fn fan_out(
    link: &mut dyn Link,
    node: &Node,
    socket_id: &str,
    (sub, channel): (&Sub, &str),
    event: &str,
    data: &Value,
) {
    let data = frames::data_string(data);
    let user = sub.members.as_ref().map(|m| &*m.me.user_id);
    let frame = frames::channel_event(event, channel, &data, user);
    let published = publish_data(socket_id, &frame);
    let internal = sub.sink.channel.clone();
    node.metrics.published("pusher");
    node.webhooks.pusher_event(&internal, CLIENT_EVENT, || {
        let mut e = json!({"name": CLIENT_EVENT, "channel": channel, "event": event,
            "data": data, "socket_id": socket_id});
        if let Some(user) = user {
            e["user_id"] = json!(user);
        }
        e
    });
    if let Pending::Later(f) = node.bridge.publish(&internal, &published, None) {
        link.spawn(Box::pin(async move {
            f.await;
            Box::new(()) as Box<dyn Any>
        }));
    }
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
