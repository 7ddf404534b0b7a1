//! `POST /v1/publish` and `/v1/publish/batch` for backend services (§5).

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use serde::Serialize;

use super::body::{Batch, One, parse, read_body};
use super::keyed::{
    body_key, duplicate_refund, keyed, keyed_price, publish_key, published_body, refund,
};
use super::refused::{Refused, Whose, refuse, refuse_paid, with_rate_headers};
use crate::charge::{self, KeyState, Payer, Price, Refusal, publish::price};
use crate::config::Limits;
use crate::exceeded::Exceeded;
use crate::metrics::Layer;
use crate::node::Node;
use crate::protocol::{ErrorCode, Op};

/// A batch message's price and idempotency key, or its refusal.
type Checked<'a> = Result<(u32, Option<Cow<'a, str>>), Refusal>;

/// One entry of a batch answer.
#[derive(Serialize)]
#[serde(untagged)]
enum Outcome {
    Ok {
        seq: u64,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        duplicate: bool,
    },
    Err {
        error: &'static str,
        message: String,
    },
}

/// The key named by `Authorization: Bearer <key>`.
pub(super) fn authenticate(req: &HttpRequest, node: &Node) -> Option<Arc<KeyState>> {
    let value = req.headers().get("authorization")?.to_str().ok()?;
    node.keys.load().get(crate::admission::bearer(value)?)
}

/// The key's bucket refused the charge (counted by the charge layer): 429
/// with `Retry-After`, `retryAfterMs` and the balance.
pub(super) fn rate_limited(refused: &charge::Refused) -> HttpResponse {
    super::refused::rate_limited(refused, KEYS)
}

/// How a 429 names an API key's bucket.
const KEYS: &str = "this API key's";

/// An API key as the payer of its request's refusal
/// ([`super::refused::refuse_paid`]).
pub(super) fn key_pays<'a>(key: &'a KeyState, limits: &'a Limits) -> Whose<'a> {
    Whose {
        payer: Payer::Key {
            layer: Layer::Http,
            key,
            limits,
        },
        account: &key.account,
        costs: &limits.costs,
        name: KEYS,
    }
}

/// Takes `cost` from the key's bucket through the charge primitive.
pub(super) async fn charge(
    node: &Node,
    key: &KeyState,
    limits: &Limits,
    cost: u32,
) -> charge::Outcome {
    let payer = Payer::Key {
        layer: Layer::Http,
        key,
        limits,
    };
    node.ledger()
        .charge(payer, Price::units(cost, None), Instant::now())
        .wait()
        .await
}

/// Takes one message's `cost` from the key's bucket, the plan's rules for
/// a `publish` on `channel` first (issue 42: rules hold for every payer).
pub(super) async fn charge_publish(
    node: &Node,
    key: &KeyState,
    limits: &Limits,
    cost: u32,
    channel: &str,
) -> charge::Outcome {
    let payer = Payer::Key {
        layer: Layer::Http,
        key,
        limits,
    };
    let price = Price::units(cost, Some(channel)).rules_as(Op::Publish);
    node.ledger()
        .charge(payer, price, Instant::now())
        .wait()
        .await
}

/// 403 `banned` when an operator banned the key's account or the caller's
/// address (§10), with `Retry-After` = the ban's remaining time.
pub(super) fn banned(req: &HttpRequest, node: &Node, key: &KeyState) -> Option<HttpResponse> {
    let ip = crate::gate::request_ip(req.head(), &node.config.load().node.trusted_proxies);
    let ban = node.admin.bans.check(Some(&key.account), Some(ip))?;
    Some(ban.http_refusal(&key.account, &node.metrics))
}

pub(super) fn unauthorized(node: &Node) -> HttpResponse {
    refuse(
        node,
        None,
        Refused::new(
            StatusCode::UNAUTHORIZED,
            ErrorCode::Unauthorized,
            "send `Authorization: Bearer <api key>` with a key from the config",
        ),
    )
}

pub async fn publish(
    req: HttpRequest,
    payload: web::Payload,
    node: web::Data<Arc<Node>>,
) -> HttpResponse {
    let Some(key) = authenticate(&req, &node) else {
        return unauthorized(&node);
    };
    if let Some(refusal) = banned(&req, &node, &key) {
        return refusal;
    }
    let limits = node.config.load().account_limits(&key.account);
    // Room for the envelope around a maximal `data`.
    let body = match read_body(payload, limits.max_payload_bytes + 1024).await {
        Ok(b) => b,
        Err(r) => return refuse_paid(&node, key_pays(&key, &limits), r).await,
    };
    let msg: One<'_> = match parse(&body, limits.max_json_depth) {
        Ok(m) => m,
        Err(r) => return refuse_paid(&node, key_pays(&key, &limits), r).await,
    };
    let idem = match publish_key(&req, &msg) {
        Ok(k) => k,
        Err(r) => return refuse_paid(&node, key_pays(&key, &limits), r).await,
    };
    let keyed = keyed(&key.account, idem.as_deref());
    let cost = match keyed_price(&node, &msg, &key.publish, &limits, keyed) {
        Ok(cost) => cost,
        Err(r) => return refuse_paid(&node, key_pays(&key, &limits), r.into()).await,
    };
    let admitted = match charge_publish(&node, &key, &limits, cost, &msg.channel).await {
        Ok(a) => a,
        Err(r) => return rate_limited(&r),
    };
    let published = node
        .publish(&msg.channel, msg.data.get(), "http", keyed)
        .await;
    let back = duplicate_refund(published, cost, &limits);
    let balance = refund(&node, &key, &limits, back, admitted.balance).await;
    with_rate_headers(StatusCode::OK, balance.as_ref(), cost - back).json(published_body(published))
}

pub async fn publish_batch(
    req: HttpRequest,
    payload: web::Payload,
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
    let body = match read_body(payload, config.http.max_batch_bytes).await {
        Ok(b) => b,
        Err(r) => return refuse_paid(&node, key_pays(&key, &limits), r).await,
    };
    let batch: Batch<'_> = match parse(&body, limits.max_json_depth.saturating_add(2)) {
        Ok(b) => b,
        Err(r) => return refuse_paid(&node, key_pays(&key, &limits), r).await,
    };
    let n = batch.messages.len();
    if n == 0 || n > config.http.max_batch {
        let r = Refused::new(
            StatusCode::BAD_REQUEST,
            ErrorCode::BadRequest,
            format!(
                "a batch holds 1 to {} messages, this one has {n}",
                config.http.max_batch
            ),
        );
        return refuse_paid(&node, key_pays(&key, &limits), r).await;
    }
    // A batch costs the sum of its messages' prices, all or nothing; a
    // message refused on its own is charged what its refusal costs
    // (`admission::refusal_units`: `malformed` for bad input, nothing over
    // `max_single`; with the default prices a batch costs the number of
    // its messages, §5) and gets its error in place.
    // A key held here, or one an earlier message of this batch carries,
    // is a duplicate: the base price (§17).
    let mut seen = std::collections::HashSet::new();
    let checked: Vec<Checked<'_>> = batch
        .messages
        .iter()
        .map(|m| {
            let idem = body_key(m.key)?;
            let subscribers = node.broker.subscribers(&m.channel);
            let cost = price(&m.channel, m.data.get(), &key.publish, &limits, subscribers)?;
            let duplicate = idem.as_deref().is_some_and(|k| {
                !seen.insert((m.channel.as_ref(), k.to_owned()))
                    || node.is_duplicate(&m.channel, keyed(&key.account, Some(k)))
            });
            Ok((
                if duplicate {
                    limits.costs.publish
                } else {
                    cost
                },
                idem,
            ))
        })
        .collect();
    // The plan's rules, message by message (issue 42: rules hold for every
    // payer): a message a rule refuses gets `rate_limited` in place and
    // costs nothing; the others' tokens go back if the batch is refused.
    let ledger = node.ledger();
    let mut passed = Vec::new();
    let checked: Vec<Checked<'_>> = checked
        .into_iter()
        .zip(&batch.messages)
        .map(|(c, m)| {
            let ok = c?;
            let ruled = ledger.rules_alone(
                &key.account,
                &limits,
                Op::Publish,
                &m.channel,
                Instant::now(),
            );
            match ruled {
                Ok(p) => {
                    passed.push(p);
                    Ok(ok)
                }
                Err(r) => Err(Refusal::new(
                    ErrorCode::RateLimited,
                    format!(
                        "a rule of this plan limits publishes on {:?}; retry after {} ms",
                        m.channel,
                        crate::refusal::retry_after_ms(r.retry_after)
                    ),
                )),
            }
        })
        .collect();
    let cost: u32 = checked
        .iter()
        .map(|c| match c {
            Ok((cost, _)) => *cost,
            Err(r) => crate::admission::refusal_units(&limits.costs, r.code),
        })
        .fold(0, u32::saturating_add);
    let admitted = match charge(&node, &key, &limits, cost).await {
        Ok(a) => a,
        Err(r) => {
            for p in passed {
                ledger.give_back_rules(p);
            }
            return rate_limited(&r);
        }
    };
    // In order: each publish is awaited before the next, so a batch's
    // messages to one channel get increasing seqs.
    let mut results = Vec::with_capacity(n);
    let mut back = 0u32;
    for (msg, checked) in batch.messages.iter().zip(checked) {
        results.push(match checked {
            Ok((cost, idem)) => {
                let keyed = keyed(&key.account, idem.as_deref());
                let published = node
                    .publish(&msg.channel, msg.data.get(), "http", keyed)
                    .await;
                back = back.saturating_add(duplicate_refund(published, cost, &limits));
                Outcome::Ok {
                    seq: published.seq,
                    duplicate: published.duplicate,
                }
            }
            Err(r) => {
                // A rule's refusal was counted by the charge layer.
                if r.code != ErrorCode::RateLimited {
                    Exceeded::new(Layer::Http, r.code.as_str(), &key.account)
                        .channel(&msg.channel)
                        .emit(&node.metrics);
                }
                Outcome::Err {
                    error: r.code.as_str(),
                    message: r.message,
                }
            }
        });
    }
    let balance = refund(&node, &key, &limits, back, admitted.balance).await;
    with_rate_headers(StatusCode::OK, balance.as_ref(), cost.saturating_sub(back))
        .json(serde_json::json!({ "results": results }))
}
