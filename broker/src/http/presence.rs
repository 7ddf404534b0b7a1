//! `GET /v1/presence?channel=doc:1[&limit=N]` (§13): who is in a channel,
//! for a backend whose API key's `sub_channels` allow it, charged to the
//! key's bucket like the socket's `presence` frame.

use std::sync::Arc;

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;

use super::publish::{authenticate, banned, charge, key_pays, rate_limited, unauthorized};
use super::refused::{Refused, refuse_paid, with_rate_headers};
use crate::node::Node;
use crate::protocol::presence::PresenceReply;
use crate::protocol::{ErrorCode, channel, frames};

#[derive(Deserialize)]
pub struct Query {
    channel: Option<String>,
    limit: Option<String>,
}

pub async fn get(
    req: HttpRequest,
    query: Result<web::Query<Query>, actix_web::Error>,
    node: web::Data<Arc<Node>>,
) -> HttpResponse {
    let Some(key) = authenticate(&req, &node) else {
        return unauthorized(&node);
    };
    if let Some(refusal) = banned(&req, &node, &key) {
        return refusal;
    }
    let config = node.config.load_full();
    let limits = config.account_limits(&key.account);
    // A refusal of the input costs `malformed` (`super::refused`).
    let pays = || key_pays(&key, &limits);
    let bad =
        |message: String| Refused::new(StatusCode::BAD_REQUEST, ErrorCode::BadRequest, message);
    let query = match query {
        Ok(q) => q.into_inner(),
        Err(e) => return refuse_paid(&node, pays(), bad(format!("malformed query: {e}"))).await,
    };
    let Some(name) = query.channel else {
        return refuse_paid(&node, pays(), bad("presence needs ?channel=".into())).await;
    };
    if let Err(why) = channel::validate(&name) {
        return refuse_paid(&node, pays(), bad(why.to_string())).await;
    }
    let asked = query.limit.map(|l| l.parse::<u64>().unwrap_or(u64::MAX));
    let limit = match frames::presence_limit(asked) {
        Ok(l) => l,
        Err(why) => return refuse_paid(&node, pays(), bad(why)).await,
    };
    if !key.subscribe.matches(&name) {
        let r = Refused::new(
            StatusCode::FORBIDDEN,
            ErrorCode::Forbidden,
            format!("this API key's sub_channels do not allow {name:?}"),
        );
        return refuse_paid(&node, pays(), r).await;
    }
    if crate::config::presence_rule(&config.namespaces, &name).is_none() {
        let why = format!("presence is not enabled for {name:?}'s namespace");
        return refuse_paid(&node, pays(), bad(why)).await;
    }
    let cost = crate::pricing::presence(&limits.costs, limit);
    let admitted = match charge(&node, &key, &limits, cost).await {
        Ok(a) => a,
        Err(r) => return rate_limited(&r),
    };
    let read = node.presence.read(&name, limit as usize).wait().await;
    let body = serde_json::to_vec(&PresenceReply {
        kind: "presence",
        id: None,
        channel: &name,
        members: &read.members,
        users: read.counts.users,
        connections: read.counts.connections,
        partial: read.partial,
    })
    .unwrap_or_default();
    with_rate_headers(StatusCode::OK, admitted.balance.as_ref(), cost)
        .content_type("application/json")
        .body(body)
}
