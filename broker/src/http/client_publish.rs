//! `POST /v1/client/publish` (§14): a publish from an SDK client without
//! a socket (its SSE stream is one-way), with the client's own JWT.
//!
//! It is charged like a socket frame: to a bucket per identity (`sub`)
//! with the plan's per-connection numbers (`messages_per_sec`, `burst`),
//! cluster-wide through the bridge as an API key's is, then to the
//! account budget all its sockets share. The answers are §5's: `{"seq"}`,
//! or the error body with `retryAfterMs` (429 `rate_limited` with
//! `Retry-After` when a bucket is empty, 403 `forbidden` outside
//! `pub_channels`, 403 `banned` under an operator's ban). A refusal of
//! the input costs the identity `costs.malformed` (`super::refused`).
//! `X-RateLimit-*` are always the identity bucket's.

use std::sync::Arc;
use std::time::Instant;

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};

use super::body::{One, parse, read_body};
use super::client_hook;
use super::keyed::{duplicate_refund, keyed, keyed_price, publish_key, published_body};
use super::refused::{Refused, refuse, with_rate_headers};
use super::refused::{Whose, rate_limited, refuse_paid};
use crate::charge::{Balance, Payer, Price, Reason};
use crate::config::Limits;
use crate::exceeded::Exceeded;
use crate::hooks::{ChannelHook, Event};
use crate::metrics::Layer;
use crate::node::Node;
use crate::protocol::glob::GlobSet;
use crate::protocol::{ErrorCode, Op};
use crate::refusal::refusal;

/// The path.
pub const PATH: &str = "/v1/client/publish";

/// How a 429 names the identity's bucket.
const IDENTITY: &str = "this identity's";

/// The token's identity as the payer: its own bucket, cluster-wide
/// ([`Payer::Identity`]).
fn identity<'a>(account: &'a str, limits: &'a Limits) -> Payer<'a> {
    Payer::Identity {
        layer: Layer::Http,
        account,
        limits,
    }
}

/// The identity as the payer of its request's refusal.
fn identity_pays<'a>(account: &'a str, limits: &'a Limits) -> Whose<'a> {
    Whose {
        payer: identity(account, limits),
        account,
        costs: &limits.costs,
        name: IDENTITY,
    }
}

fn unauthorized(node: &Node, code: ErrorCode, message: String) -> HttpResponse {
    refuse(
        node,
        None,
        Refused::new(StatusCode::UNAUTHORIZED, code, message),
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
        .and_then(crate::admission::bearer);
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
    // The token's `sub` is the account: one publisher with its API keys.
    let account = claims.sub.as_str();
    let ip = crate::gate::request_ip(req.head(), &config.node.trusted_proxies);
    if let Some(ban) = node.admin.bans.check(Some(account), Some(ip)) {
        Exceeded::new(Layer::Http, ErrorCode::Banned.as_str(), account)
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
        Err(r) => return refuse_paid(&node, identity_pays(account, &limits), r).await,
    };
    let msg: One<'_> = match parse(&body, limits.max_json_depth) {
        Ok(m) => m,
        Err(r) => return refuse_paid(&node, identity_pays(account, &limits), r).await,
    };
    // A hook deciding the channel replaces the token's globs (§15).
    let who = node.hooks.for_channel(Event::Publish, &msg.channel);
    let grants = if matches!(who, ChannelHook::Deciding(_)) {
        // The price's own glob check then passes: the hook decides.
        GlobSet::new(&[msg.channel.as_ref()])
    } else {
        claims.grants().publish
    };
    let token_allows = grants.matches(&msg.channel);
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
        return refuse_paid(&node, identity_pays(account, &limits), r).await;
    }
    let idem = match publish_key(&req, &msg) {
        Ok(k) => k,
        Err(r) => return refuse_paid(&node, identity_pays(account, &limits), r).await,
    };
    let keyed = keyed(account, idem.as_deref());
    let cost = match keyed_price(&node, &msg, &grants, &limits, keyed) {
        Ok(cost) => cost,
        Err(r) => return refuse_paid(&node, identity_pays(account, &limits), r.into()).await,
    };
    let now = Instant::now();
    let price = Price::units(cost, Some(&msg.channel));
    // `X-RateLimit-*` are the identity bucket's on every answer (§14), a
    // 429 of the account's budget included.
    let admitted = match node
        .ledger()
        .charge(identity(account, &limits), price, now)
        .wait()
        .await
    {
        Ok(a) => a,
        Err(r) => return rate_limited(&r, IDENTITY),
    };
    let payer = Payer::Account {
        layer: Layer::Http,
        account,
        limits: &limits,
    };
    // The plan's rules are checked once, with the account's charge, which
    // gives their tokens back itself when its bucket refuses (issue 42:
    // rules hold for every payer).
    let ruled = price.rules_as(Op::Publish);
    if let Err(mut r) = node.ledger().charge(payer, ruled, now).wait().await {
        // Nothing is published: the identity's charge goes back, as a
        // later step's refusal gives back the earlier ones everywhere
        // (issue 42: it was kept, so an account at its limit drained its
        // identities' buckets too).
        let back = identity(account, &limits);
        let remaining = node.ledger().refund_to(back, cost).wait().await;
        r.balance = admitted.balance.map(|b| Balance { remaining, ..b });
        let whose = if matches!(r.reason, Reason::Rule { .. }) {
            IDENTITY
        } else {
            "the account's"
        };
        return rate_limited(&r, whose);
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
        let account_payer = Payer::Account {
            layer: Layer::Http,
            account,
            limits: &limits,
        };
        node.ledger().refund_to(account_payer, back).wait().await;
        let remaining = node
            .ledger()
            .refund_to(identity(account, &limits), back)
            .wait()
            .await;
        balance = balance.map(|b| Balance { remaining, ..b });
    }
    with_rate_headers(StatusCode::OK, balance.as_ref(), cost - back).json(published_body(published))
}
