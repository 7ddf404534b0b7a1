//! Operators' state on a node (§10) and how their actions apply here:
//! the ban list every front checks, and disconnects and bans closing this
//! node's sockets and gRPC streams. An action made here is applied at once,
//! then sent over the cluster bridge, where each other node applies it
//! through [`crate::cluster::Events::operator`].

use std::sync::Arc;
use std::time::Instant;

use crate::bans::Bans;
use crate::clock::unix_ms;
use crate::cluster::{Action, BANNED, DISCONNECTED, Envelope, Who};
use crate::exceeded::Exceeded;
use crate::limiter::KeyedBuckets;
use crate::metrics::{History, Layer};
use crate::protocol::CloseCode;

use super::{Node, SocketHandle};
use crate::account::CloseWith;

/// A node's operator state.
#[derive(Debug)]
pub struct Admin {
    pub bans: Bans,
    /// This process among the nodes (skips its own broadcast echoes).
    pub instance: u64,
    /// This node's counters, sampled for the overview's charts.
    pub history: History,
    /// Failed admin-key attempts per client address (bounded by the
    /// sweep: a bucket refilled to full is forgotten).
    pub failures: KeyedBuckets<std::net::IpAddr>,
}

impl Default for Admin {
    fn default() -> Self {
        Admin {
            bans: Bans::default(),
            instance: rand::random(),
            history: History::default(),
            failures: KeyedBuckets::default(),
        }
    }
}

impl Admin {
    pub fn sweep(&self, now: Instant) {
        self.bans.sweep();
        self.failures.sweep(now);
    }
}

/// Closes this node's sockets of `who` with 4003 and `reason`, and ends
/// its gRPC streams of `who` (`Subscribe`, `PublishStream`: each picks its status);
/// how many of both.
pub fn close_local(node: &Node, who: &Who, reason: &'static str) -> usize {
    let ended = end_streams(node, who, reason);
    close_sockets(node, who, reason) + ended
}

/// Tells the guards of this node's matching gRPC streams to end them. A
/// stream has no connection id and signs no user in, so `Who::ConnId` and
/// `Who::User` match none.
fn end_streams(node: &Node, who: &Who, reason: &'static str) -> usize {
    let mut ended = 0usize;
    for s in node.grpc_streams.iter() {
        let hit = match who {
            Who::Account(a) => *s.account == **a,
            Who::ConnId(_) | Who::User { .. } => false,
            Who::Ip(ip) => s.ip == Some(*ip),
        };
        if hit && s.end.send(reason).is_ok() {
            ended += 1;
        }
    }
    ended
}

fn close_sockets(node: &Node, who: &Who, reason: &'static str) -> usize {
    let matches = |s: &SocketHandle| match who {
        Who::Account(a) => *s.account == **a,
        Who::ConnId(c) => *s.label == **c,
        Who::Ip(ip) => s.ip == *ip,
        Who::User { user, .. } => s.user.as_deref() == Some(user.as_str()),
    };
    let mut closed = 0usize;
    for s in node.sockets.iter() {
        if matches(s.value()) {
            s.control.close(CloseWith {
                code: CloseCode::Operator,
                notice: None,
                reason: Some(reason),
            });
            closed += 1;
        }
    }
    if closed > 0 {
        let account = match who {
            Who::Account(a) | Who::User { account: a, .. } => a.as_str(),
            _ => "",
        };
        Exceeded::new(Layer::Connection, reason, account)
            .count(closed as u64)
            .emit(&node.metrics);
    }
    closed
}

/// Applies `action` to this node; the number of its sockets closed.
pub fn apply(node: &Node, action: &Action) -> usize {
    match action {
        Action::Disconnect { who } => close_local(node, who, DISCONNECTED),
        Action::Ban { target, expires_at } => {
            if *expires_at <= unix_ms() {
                return 0;
            }
            // Banned first, so a socket closed now cannot reconnect in
            // between.
            node.admin.bans.insert(target, *expires_at);
            close_local(node, &Who::from(target), BANNED)
        }
        Action::Unban { target } => {
            node.admin.bans.remove(target);
            0
        }
    }
}

/// Applies `action` here and sends it to every other node; with Redis, a
/// ban is also stored there so nodes that start later see it. Returns this
/// node's count of closed sockets.
pub fn perform(node: &Arc<Node>, action: Action) -> usize {
    let closed = apply(node, &action);
    if let Some(store) = node.bridge.admin_store() {
        let envelope = Envelope {
            from: node.admin.instance,
            action,
        };
        actix_rt::spawn(async move {
            let stored = match &envelope.action {
                Action::Ban { target, expires_at } => {
                    store.set_ban(&target.key(), *expires_at).await
                }
                Action::Unban { target } => store.del_ban(&target.key()).await,
                Action::Disconnect { .. } => Ok(()),
            };
            let json = serde_json::to_string(&envelope).expect("actions serialise");
            let sent = match stored {
                Ok(()) => store.broadcast(&json).await,
                Err(e) => Err(e),
            };
            if let Err(e) = sent {
                tracing::warn!(target: "tidegate::admin", error = %e, "an operator action reached this node only");
            }
        });
    }
    closed
}

/// An action another node sent over the bridge.
pub fn on_broadcast(node: &Node, envelope: Envelope) {
    if envelope.from == node.admin.instance {
        return;
    }
    let closed = apply(node, &envelope.action);
    tracing::info!(target: "tidegate::admin", action = ?envelope.action, closed, "operator action from another node");
}
