//! A dialect's upgrade (`dialect.rs`): its subprotocol, the §1
//! layers before the credential, and the credential the request itself
//! names (a Pusher app's key); and a dialect's later credential.

use std::net::IpAddr;
use std::sync::Arc;

use actix_http::RequestHead;
use actix_web::http::StatusCode;

use super::{Admitted, Peer, Refused, admit_peer, admit_who, identity, offered, refused};
use crate::account::AccountSlot;
use crate::admission::Who;
use crate::auth::Grants;
use crate::config::{Config, Limits};
use crate::dialect::{Refusal, Route};
use crate::exceeded::Exceeded;
use crate::metrics::Layer;
use crate::node::Node;
use crate::protocol::ErrorCode;
use crate::protocol::glob::GlobSet;
use crate::socket::Slots;

/// A dialect's upgrade: its subprotocol, then the §1 layers before the
/// credential; then the credential the request names, if any, through the
/// layers after it (the route's `credential`: a Pusher app's key). Without
/// one the socket starts unidentified, with the default plan's limits,
/// until the dialect names a credential.
pub(super) async fn admit_dialect(
    req: &RequestHead,
    node: &Arc<Node>,
    config: &Config,
    route: Route,
) -> Result<Admitted, Refused> {
    if let Some(subprotocol) = route.subprotocol
        && !offered(req).any(|p| p == subprotocol)
    {
        Exceeded::new(Layer::Handshake, ErrorCode::BadRequest.as_str(), "").emit(&node.metrics);
        return Err(refused(
            StatusCode::BAD_REQUEST,
            ErrorCode::BadRequest,
            format!("offer the {subprotocol} subprotocol (Sec-WebSocket-Protocol)"),
            None,
        ));
    }
    let Peer { ip, slot } = admit_peer(req, node, config)?;
    if let Some(who) = (route.credential)(node, req) {
        let conn = node.next_conn();
        let account = admit_who(node, config, ip, &who, conn).await?;
        return Ok(Admitted {
            limits: who.limits.clone(),
            identity: identity(config, conn, ip, who),
            slots: Slots {
                ip: Some(slot),
                account,
            },
        });
    }
    let limits = config
        .limits_for("", None)
        .unwrap_or_else(|_| Arc::new(Limits::default()));
    let who = Who {
        account: String::new(),
        plan: None,
        role: None,
        limits: limits.clone(),
        grants: Grants {
            subscribe: GlobSet::new::<&str>(&[]),
            publish: GlobSet::new::<&str>(&[]),
        },
        token: None,
        info: None,
    };
    Ok(Admitted {
        identity: identity(config, node.next_conn(), ip, who),
        limits,
        slots: Slots {
            ip: Some(slot),
            account: None,
        },
    })
}

/// [`admit_who`] for a dialect's socket, as the dialect hears it.
pub(in crate::socket) async fn admit_later(
    node: &Arc<Node>,
    ip: IpAddr,
    who: &Who,
    conn: u64,
) -> Result<Option<AccountSlot>, Refusal> {
    let config = node.config.load_full();
    admit_who(node, &config, ip, who, conn)
        .await
        .map_err(|r| Refusal {
            code: r.code,
            message: r.message,
            retry: r.retry,
        })
}
