//! The idempotency key of an HTTP publish (§17): where it is read from
//! (the `Idempotency-Key` header, a message's `"key"`), the price of a
//! keyed message, the answer's `duplicate`, and what a duplicate another
//! node published gives back.

use std::borrow::Cow;

use actix_web::HttpRequest;
use actix_web::http::StatusCode;
use serde_json::value::RawValue;

use super::body::One;
use super::refused::Refused;
use crate::charge::{Balance, KeyState, Payer, Refusal, publish::price};
use crate::config::Limits;
use crate::idempotency::{Keyed, Published};
use crate::metrics::Layer;
use crate::node::Node;
use crate::protocol::ErrorCode;
use crate::protocol::glob::GlobSet;

/// A publish's idempotency key (§17): the `Idempotency-Key` header, else
/// the body's `"key"`; checked ([`crate::idempotency::validate`]).
pub(super) fn publish_key<'a>(
    req: &'a HttpRequest,
    msg: &One<'a>,
) -> Result<Option<Cow<'a, str>>, Refused> {
    let bad =
        |message: String| Refused::new(StatusCode::BAD_REQUEST, ErrorCode::BadRequest, message);
    match req.headers().get("idempotency-key") {
        Some(value) => {
            // A valid key is visible ASCII: checked once, then read as text
            // (the checks below only say what is wrong).
            if let Ok(key) = std::str::from_utf8(value.as_bytes())
                && crate::idempotency::validate(key).is_ok()
            {
                return Ok(Some(Cow::Borrowed(key)));
            }
            let key = value
                .to_str()
                .map_err(|_| bad("Idempotency-Key must be visible ASCII".into()))?;
            crate::idempotency::validate(key).map_err(|e| bad(e.to_string()))?;
            Ok(Some(Cow::Borrowed(key)))
        }
        None => body_key(msg.key).map_err(|r| bad(r.message)),
    }
}

/// A message's `"key"` (§17): a string of 1–64 allowed bytes, or absent.
pub(super) fn body_key(raw: Option<&RawValue>) -> Result<Option<Cow<'_, str>>, Refusal> {
    let Some(raw) = raw.filter(|r| r.get() != "null") else {
        return Ok(None);
    };
    if let Some(key) = crate::idempotency::unquoted(raw.get()) {
        return Ok(Some(Cow::Borrowed(key)));
    }
    let key: Cow<'_, str> = serde_json::from_str(raw.get())
        .map_err(|_| Refusal::new(ErrorCode::BadRequest, "key must be a string"))?;
    crate::idempotency::validate(&key)
        .map_err(|e| Refusal::new(ErrorCode::BadRequest, e.to_string()))?;
    Ok(Some(key))
}

/// `key` as the account's idempotency key (§17).
pub(super) fn keyed<'a>(account: &'a str, key: Option<&'a str>) -> Option<Keyed<'a>> {
    key.map(|key| Keyed {
        publisher: account,
        key,
    })
}

/// [`price`] of one message, or the base price when its idempotency key
/// is held here (a duplicate, §17): the checks run either way.
pub(super) fn keyed_price(
    node: &Node,
    msg: &One<'_>,
    grants: &GlobSet,
    limits: &Limits,
    keyed: Option<Keyed<'_>>,
) -> Result<u32, Refusal> {
    let subscribers = node.broker.subscribers(&msg.channel);
    let cost = price(&msg.channel, msg.data.get(), grants, limits, subscribers)?;
    Ok(if node.is_duplicate(&msg.channel, keyed) {
        limits.costs.publish
    } else {
        cost
    })
}

/// The answer body of a publish: `{"seq"}`, with `"duplicate":true` when
/// its key was published already (§17).
pub(super) fn published_body(published: Published) -> serde_json::Value {
    if published.duplicate {
        serde_json::json!({ "seq": published.seq, "duplicate": true })
    } else {
        serde_json::json!({ "seq": published.seq })
    }
}

/// What a publish priced in full gives back when it turned out a
/// duplicate (§17: a duplicate pays the base price only).
pub(super) fn duplicate_refund(published: Published, charged: u32, limits: &Limits) -> u32 {
    if published.duplicate {
        charged.saturating_sub(limits.costs.publish)
    } else {
        0
    }
}

/// Gives `units` back to the key's bucket; the balance after it.
pub(super) async fn refund(
    node: &Node,
    key: &KeyState,
    limits: &Limits,
    units: u32,
    balance: Option<Balance>,
) -> Option<Balance> {
    if units == 0 {
        return balance;
    }
    let payer = Payer::Key {
        layer: Layer::Http,
        key,
        limits,
    };
    let remaining = node.ledger().refund_to(payer, units).wait().await;
    balance.map(|b| Balance { remaining, ..b })
}
