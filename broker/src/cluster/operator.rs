//! Operator actions (§10) as they travel between nodes: the admin routes
//! make them, the bridge carries them over the control channel, and each
//! node applies them to its own connections ([`crate::node`]). The bridge
//! only reads the envelope and hands it to [`super::Events::operator`].

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::bans::BanTarget;

/// The close reason of an operator close (§4).
pub const DISCONNECTED: &str = "disconnected";
pub const BANNED: &str = "banned";

/// Whose sockets a disconnect closes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Who {
    Account(String),
    ConnId(String),
    Ip(IpAddr),
    /// A user signed in on a dialect (a Pusher app's `pusher:signin`,
    /// keyed with its app: `SocketHandle::user`), of `account`: the
    /// Pusher HTTP API's `terminate_connections`.
    User {
        account: String,
        user: String,
    },
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
pub struct Envelope {
    pub from: u64,
    pub action: Action,
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
        let u = Action::Disconnect {
            who: Who::User {
                account: "acme".into(),
                user: "pusher|1|user|u1".into(),
            },
        };
        let json = serde_json::to_string(&u).unwrap();
        assert_eq!(
            json,
            r#"{"op":"disconnect","who":{"user":{"account":"acme","user":"pusher|1|user|u1"}}}"#
        );
        assert_eq!(serde_json::from_str::<Action>(&json).unwrap(), u);
    }
}
