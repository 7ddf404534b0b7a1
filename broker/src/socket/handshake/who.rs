//! The §1 layers after the credential (the identity's handshake bucket, a
//! token's account connection cap, bans), shared by `/v1/ws`'s upgrade and
//! a dialect's later credential (`socket/actor/link.rs`).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use actix_web::http::StatusCode;

use super::{Refused, refused};
use crate::account::AccountSlot;
use crate::admission::Who;
use crate::cluster::scale_cap;
use crate::config::{Config, LimitName};
use crate::exceeded::Exceeded;
use crate::metrics::Layer;
use crate::node::Node;
use crate::protocol::ErrorCode;

/// The §1 layers after the credential, in order: the identity's handshake
/// bucket (cluster-wide), for a token the account's connection cap, then
/// an operator's ban. A token's connection joins its account's supervisor
/// (the returned slot gives both back). Emits one exceeded event per
/// refusal.
pub(super) async fn admit_who(
    node: &Arc<Node>,
    config: &Config,
    ip: IpAddr,
    who: &Who,
    conn: u64,
) -> Result<Option<AccountSlot>, Refused> {
    let (account, limits) = (who.account.as_str(), &who.limits);
    let ip_text = ip.to_string();
    let cap_retry = Duration::from_millis(config.handshake.cap_retry_after_ms);
    // After the credential, before any session state: the per-identity
    // bucket (cluster-wide through the bridge).
    if let Err(wait) = node.limiter_store.handshake(account, limits).wait().await {
        let dry = limits.is_dry_run(LimitName::Handshake);
        Exceeded::new(
            Layer::Handshake,
            ErrorCode::HandshakeRateLimited.as_str(),
            account,
        )
        .reset(wait)
        .dry_run(dry)
        .emit(&node.metrics);
        if !dry {
            return Err(refused(
                StatusCode::TOO_MANY_REQUESTS,
                ErrorCode::HandshakeRateLimited,
                format!(
                    "too many handshakes for account {account:?}: burst {}, then {} per second",
                    limits.handshake_burst, limits.handshake_refill_per_sec
                ),
                Some(wait),
            ));
        }
    }
    // An API key's connection is not the account's: no cap, no supervisor.
    if who.token.is_none() {
        return match node.admin.bans.check(Some(account), Some(ip)) {
            Some(ban) => Err(banned(node, account, &ip_text, &ban)),
            None => Ok(None),
        };
    }
    // The account's connection cap (cluster-wide; a share of it while the
    // cluster is unreachable).
    let max = scale_cap(
        limits.max_connections,
        node.limiter_store.account_share(account),
    );
    let dry = limits.is_dry_run(LimitName::MaxConnections);
    let reserved = node
        .limiter_store
        .reserve_connection(account, if dry { u32::MAX } else { max })
        .wait()
        .await;
    if reserved.map_or(true, |open| dry && open > max) {
        Exceeded::new(
            Layer::Handshake,
            ErrorCode::TooManyConnections.as_str(),
            account,
        )
        .reset(cap_retry)
        .dry_run(dry)
        .emit(&node.metrics);
    }
    if let Err(cap) = reserved {
        node.webhooks
            .limit_exceeded(account, ErrorCode::TooManyConnections.as_str(), None);
        return Err(refused(
            StatusCode::TOO_MANY_REQUESTS,
            ErrorCode::TooManyConnections,
            format!(
                "account {account:?} has {} of {} connections open",
                cap.open, cap.max
            ),
            Some(cap_retry),
        ));
    }
    // Last in §1's order: an operator's ban of the account or the address
    // (cluster-wide, checked in this node's copy of the ban list).
    if let Some(ban) = node.admin.bans.check(Some(account), Some(ip)) {
        node.limiter_store.release_connection(account);
        return Err(banned(node, account, &ip_text, &ban));
    }
    Ok(Some(
        node.accounts
            .register(account, conn, &node.limiter_store)
            .await,
    ))
}

fn banned(node: &Node, account: &str, ip: &str, ban: &crate::bans::Ban) -> Refused {
    Exceeded::new(Layer::Handshake, ErrorCode::Banned.as_str(), account)
        .conn(ip)
        .reset(ban.remaining)
        .emit(&node.metrics);
    refused(
        StatusCode::FORBIDDEN,
        ErrorCode::Banned,
        ban.message(),
        Some(ban.remaining),
    )
}
