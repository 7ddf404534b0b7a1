//! What a `pusher:subscribe` must pass before it reaches the hub, and
//! what a held subscription is.
//!
//! The checks are pure (the app, the socket and the frame's `data`), so
//! each refusal is decided in one place with its Pusher `type`, message
//! and status; the session only charges the frame first and sends the
//! answer.

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use serde_json::Value;

use super::names::{self, Kind};
use super::presence::{self, ChannelData, PusherMembers};
use super::sign;
use super::sink::PusherSink;
use crate::config::PusherApp;
use crate::node::Node;

/// One subscribed channel. The session holds them in a set found by the
/// Pusher name, which is the tail of the sink's hub name
/// ([`names::external`]): no second copy of the name a subscription
/// (issue 40's idle memory).
pub(super) struct Sub {
    pub sink: Arc<PusherSink>,
    /// A presence channel's member (its user, its watcher).
    pub members: Option<Arc<PusherMembers>>,
}

impl Borrow<str> for Sub {
    fn borrow(&self) -> &str {
        self.name()
    }
}

/// By the Pusher name, as [`Borrow`] requires: a `&str` finds its `Sub`.
impl Hash for Sub {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.name().hash(state);
    }
}

impl PartialEq for Sub {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}

impl Eq for Sub {}

impl Sub {
    /// The channel's Pusher name.
    pub fn name(&self) -> &str {
        names::external(&self.sink.channel)
    }

    /// Ends the subscription: the hub's, and the presence membership.
    pub fn leave(&self, node: &Node, socket_id: &str) {
        self.sink.end();
        node.broker.unsubscribe(&self.sink.channel, self.sink.conn);
        if let Some(m) = &self.members {
            node.presence
                .leave(&self.sink.channel, &m.me.user_id, socket_id);
        }
    }
}

/// A name a Pusher client may not give.
pub(super) fn invalid_name() -> Refused {
    Refused {
        kind: "InvalidChannel",
        error: "a channel name is 1-200 bytes of [A-Za-z0-9_-=@,.;]".into(),
        status: 400,
        reason: "bad_request",
    }
}

/// A subscription refused before the hub: `pusher:subscription_error`'s
/// `type`, `error` and `status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Refused {
    pub kind: &'static str,
    pub error: String,
    pub status: u16,
    /// Counted under `tidegate_rejections_total` as this reason.
    pub reason: &'static str,
}

/// Checks a subscription to `channel` (a valid name) for `socket_id`: its
/// signature (private, encrypted and presence channels, in constant time)
/// and a presence channel's `channel_data`. `Ok(Some)` is the member a
/// presence subscription joins as.
pub(super) fn check(
    app: &PusherApp,
    socket_id: &str,
    channel: &str,
    data: &Value,
) -> Result<Option<ChannelData>, Refused> {
    let kind = names::kind(channel);
    let channel_data = (kind == Kind::Presence).then(|| {
        data.get("channel_data")
            .and_then(Value::as_str)
            .unwrap_or("")
    });
    if kind != Kind::Public {
        let auth = data.get("auth").and_then(Value::as_str).unwrap_or("");
        if !sign::channel_auth_ok(
            &app.key,
            &app.secret,
            socket_id,
            channel,
            channel_data,
            auth,
        ) {
            return Err(Refused {
                kind: "AuthError",
                error: format!(
                    "Invalid signature: the auth of {channel} does not sign it for this socket"
                ),
                status: 401,
                reason: "unauthorized",
            });
        }
    }
    channel_data
        .map(presence::channel_data)
        .transpose()
        .map_err(|bad| Refused {
            kind: "InvalidChannelData",
            error: bad.to_string(),
            status: 400,
            reason: "bad_request",
        })
}
