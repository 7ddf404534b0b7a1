//! Operator actions (§10) and how they reach every node: applied here at
//! once, then sent over the cluster bridge, where each other node applies
//! them to its own sockets and its copy of the ban list.

use std::net::IpAddr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::bans::{BanTarget, unix_ms};
use crate::exceeded::Exceeded;
use crate::metrics::Layer;
use crate::node::Node;
use crate::protocol::CloseCode;
use crate::socket::CloseWith;

/// Whose sockets a disconnect closes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Who {
    Account(String),
    ConnId(String),
    Ip(IpAddr),
}

impl From<&BanTarget> for Who {
    fn from(t: &BanTarget) -> Who {
        match t {
            BanTarget::Account(a) => Who::Account(a.clone()),
            BanTarget::Ip(ip) => Who::Ip(*ip),
        }
    }
}

/// What an operator did, as sent to the other nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase")]
pub enum Action {
    Disconnect { who: Who },
    Ban { target: BanTarget, expires_at: u64 },
    Unban { target: BanTarget },
}

/// An action on the control channel, with the process that made it (which
/// has applied it already and skips its own echo).
#[derive(Debug, Serialize, Deserialize)]
struct Envelope {
    from: u64,
    action: Action,
}

/// The close reason of an operator close (§4).
pub const DISCONNECTED: &str = "disconnected";
pub const BANNED: &str = "banned";

/// Closes this node's sockets of `who` with 4003 and `reason`, and ends
/// its gRPC streams of `who` (`Subscribe`, `PublishStream`: each picks its status);
/// how many of both.
pub fn close_local(node: &Node, who: &Who, reason: &'static str) -> usize {
    let ended = end_streams(node, who, reason);
    close_sockets(node, who, reason) + ended
}

/// Tells the guards of this node's matching gRPC streams to end them. A
/// stream has no connection id, so `Who::ConnId` matches none.
fn end_streams(node: &Node, who: &Who, reason: &'static str) -> usize {
    let mut ended = 0usize;
    for s in node.grpc_streams.iter() {
        let hit = match who {
            Who::Account(a) => *s.account == **a,
            Who::ConnId(_) => false,
            Who::Ip(ip) => s.ip == Some(*ip),
        };
        if hit && s.end.send(reason).is_ok() {
            ended += 1;
        }
    }
    ended
}

fn close_sockets(node: &Node, who: &Who, reason: &'static str) -> usize {
    let matches = |s: &crate::node::SocketHandle| match who {
        Who::Account(a) => *s.account == **a,
        Who::ConnId(c) => *s.label == **c,
        Who::Ip(ip) => s.ip == *ip,
    };
    let mut closed = 0usize;
    for s in node.sockets.iter() {
        if matches(s.value()) {
            s.addr.do_send(CloseWith {
                code: CloseCode::Operator,
                notice: None,
                reason: Some(reason),
            });
            closed += 1;
        }
    }
    if closed > 0 {
        let account = match who {
            Who::Account(a) => a.as_str(),
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
pub fn on_broadcast(node: &Node, payload: &str) {
    match serde_json::from_str::<Envelope>(payload) {
        Ok(e) if e.from == node.admin.instance => {}
        Ok(e) => {
            let closed = apply(node, &e.action);
            tracing::info!(target: "tidegate::admin", action = ?e.action, closed, "operator action from another node");
        }
        Err(e) => {
            tracing::warn!(target: "tidegate::admin", error = %e, "unreadable operator action ignored")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_have_a_stable_wire_form() {
        let a = Action::Ban {
            target: BanTarget::Account("acme".into()),
            expires_at: 5,
        };
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(
            json,
            r#"{"op":"ban","target":{"account":"acme"},"expires_at":5}"#
        );
        assert_eq!(serde_json::from_str::<Action>(&json).unwrap(), a);
        let d = Action::Disconnect {
            who: Who::ConnId("n1-8f3a".into()),
        };
        let json = serde_json::to_string(&d).unwrap();
        assert_eq!(json, r#"{"op":"disconnect","who":{"connId":"n1-8f3a"}}"#);
    }
}
