//! `POST /v1/client/publish` (§14): a publish from an SDK client without
//! a socket (its SSE stream is one-way), with the client's own JWT.
//!
//! It is charged like a socket frame: to a bucket per identity (`sub`)
//! with the plan's per-connection numbers (`messages_per_sec`, `burst`),
//! cluster-wide through the bridge as an API key's is, then to the
//! account budget all its sockets share. The answers are §5's: `{"seq"}`,
//! or the error body with `retryAfterMs` (429 `rate_limited` with
//! `Retry-After` when a bucket is empty, 403 `forbidden` outside
//! `pub_channels`, 403 `banned` under an operator's ban).

use std::sync::Arc;
use std::time::Instant;

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};

use super::client_hook;
use super::keyed::{duplicate_refund, keyed, keyed_price, publish_key, published_body, refund};
use super::publish::{One, Refused, parse, read_body, refuse, with_rate_headers};
use crate::charge::{self, KeyState, Payer, Price};
use crate::config::Limits;
use crate::exceeded::Exceeded;
use crate::hooks::{ChannelHook, Event};
use crate::metrics::Layer;
use crate::node::Node;
use crate::protocol::ErrorCode;
use crate::protocol::glob::GlobSet;
use crate::refusal::{refusal, refusal_builder, retry_after_ms};

/// The path.
pub const PATH: &str = "/v1/client/publish";

/// The token's identity as a payer: the bucket is named after the
/// account (`sub`), so every node of a cluster charges the same one.
fn identity(account: &str, publish: GlobSet) -> KeyState {
    KeyState {
        account: account.to_owned(),
        publish,
        subscribe: GlobSet::new::<&str>(&[]),
        id: format!("sub:{account}"),
    }
}

/// The plan's per-connection numbers as the bucket's capacity and rate.
fn per_identity(limits: &Limits) -> Limits {
    Limits {
        account_burst: limits.burst,
        account_messages_per_sec: limits.messages_per_sec,
        ..limits.clone()
    }
}

fn unauthorized(node: &Node, code: ErrorCode, message: String) -> HttpResponse {
    refuse(
        node,
        None,
        Refused::new(StatusCode::UNAUTHORIZED, code, message),
    )
}

/// A bucket was empty (counted by the charge layer): 429 with
/// `Retry-After` and `retryAfterMs`.
fn rate_limited(refused: &charge::Refused, whose: &str) -> HttpResponse {
    let wait = retry_after_ms(refused.retry_after);
    let builder = with_rate_headers(StatusCode::TOO_MANY_REQUESTS, refused.balance.as_ref(), 0);
    let message = format!("{whose} budget is empty; retry after {wait} ms");
    refusal_builder(
        builder,
        ErrorCode::RateLimited,
        &message,
        Some(refused.retry_after),
    )
}

pub async fn publish(
    req: HttpRequest,
    payload: web::Payload,
    node: web::Data<Arc<Node>>,
) -> HttpResponse {
    let token = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(crate::auth::bearer);
    let Some(token) = token else {
        let message = "send `Authorization: Bearer <JWT>`".to_owned();
        return unauthorized(&node, ErrorCode::Unauthorized, message);
    };
    let claims = match node.auth.load().verify(token) {
        Ok(c) => c,
        Err(e) => return unauthorized(&node, ErrorCode::Unauthorized, e.to_string()),
    };
    let config = node.config.load_full();
    let limits = match config.limits_for(&claims.sub, claims.plan.as_deref()) {
        Ok(l) => l,
        Err(e) => {
            let message = format!("{e}: the token's plan claim must name a plan in the config");
            return unauthorized(&node, ErrorCode::UnknownPlan, message);
        }
    };
    let key = identity(&claims.sub, claims.grants().publish);
    let ip = crate::gate::request_ip(req.head(), &config.node.trusted_proxies);
    if let Some(ban) = node.admin.bans.check(Some(&key.account), Some(ip)) {
        Exceeded::new(Layer::Http, ErrorCode::Banned.as_str(), &key.account)
            .reset(ban.remaining)
            .emit(&node.metrics);
        let status = StatusCode::FORBIDDEN;
        return refusal(
            status,
            ErrorCode::Banned,
            &ban.message(),
            Some(ban.remaining),
        );
    }
    // Room for the envelope around a maximal `data`.
    let body = match read_body(payload, limits.max_payload_bytes + 1024).await {
        Ok(b) => b,
        Err(r) => return refuse(&node, Some(&key), r),
    };
    let msg: One<'_> = match parse(&body, limits.max_json_depth) {
        Ok(m) => m,
        Err(r) => return refuse(&node, Some(&key), r),
    };
    // A hook deciding the channel replaces the token's globs (§15).
    let who = node.hooks.for_channel(Event::Publish, &msg.channel);
    let mut key = key;
    if matches!(who, ChannelHook::Deciding(_)) {
        // The price's own glob check then passes: the hook decides.
        key.publish = GlobSet::new(&[msg.channel.as_ref()]);
    }
    let token_allows = key.publish.matches(&msg.channel);
    if crate::protocol::channel::validate(&msg.channel).is_ok()
        && !token_allows
        && client_hook::token_decides(
            &node,
            &claims,
            ip,
            &who,
            &msg.channel,
            msg.data,
            token_allows,
        )
    {
        let message = format!("this token may not publish on {:?}", msg.channel);
        let r = Refused::new(StatusCode::FORBIDDEN, ErrorCode::Forbidden, message);
        return refuse(&node, Some(&key), r);
    }
    let idem = match publish_key(&req, &msg) {
        Ok(k) => k,
        Err(r) => return refuse(&node, Some(&key), r),
    };
    // The token's `sub` is the account: one publisher with its API keys.
    let keyed = keyed(&key.account, idem.as_deref());
    let cost = match keyed_price(&node, &msg, &key, &limits, keyed) {
        Ok(cost) => cost,
        Err(r) => return refuse(&node, Some(&key), r.into()),
    };
    let now = Instant::now();
    let bucket = per_identity(&limits);
    let payer = Payer::Key {
        layer: Layer::Http,
        key: &key,
        limits: &bucket,
    };
    let price = Price::units(cost, Some(&msg.channel));
    let admitted = match node.ledger().charge(payer, price, now).wait().await {
        Ok(a) => a,
        Err(r) => return rate_limited(&r, "this identity's"),
    };
    let payer = Payer::Account {
        layer: Layer::Http,
        account: &key.account,
        limits: &limits,
    };
    if let Err(r) = node.ledger().charge(payer, price, now).wait().await {
        // Nothing is published: the identity's charge goes back, as a
        // later step's refusal gives back the earlier ones everywhere
        // (issue 42: it was kept, so an account at its limit drained its
        // identities' buckets too).
        let identity = Payer::Key {
            layer: Layer::Http,
            key: &key,
            limits: &bucket,
        };
        node.ledger().refund_to(identity, cost).wait().await;
        return rate_limited(&r, "the account's");
    }
    let hooked = client_hook::decide(&node, &claims, ip, &who, &msg.channel, msg.data, keyed).await;
    let data = match hooked {
        Ok(replaced) => replaced.unwrap_or_else(|| msg.data.to_owned()),
        Err(refused) => return refused,
    };
    let published = node
        .publish(&msg.channel, data.get(), "client", keyed)
        .await;
    let back = duplicate_refund(published, cost, &limits);
    let mut balance = admitted.balance;
    if back > 0 {
        let account = Payer::Account {
            layer: Layer::Http,
            account: &key.account,
            limits: &limits,
        };
        node.ledger().refund_to(account, back).wait().await;
        balance = refund(&node, &key, &bucket, back, balance).await;
    }
    with_rate_headers(StatusCode::OK, balance.as_ref(), cost - back).json(published_body(published))
}
