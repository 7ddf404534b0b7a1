//! A refusal of an identified caller's request, charged by the one rule of
//! what a refusal costs ([`crate::admission::refusal_units`], issue 42):
//! garbage, forbidden and invalid input costs `costs.malformed` from the
//! payer (an API key's bucket, a token identity's), as a socket's garbage
//! frame does and as gRPC and GraphQL charge it; `cost_exceeds_max` costs
//! nothing. When the payer cannot pay even that, the answer is the 429,
//! as on gRPC and GraphQL: an empty bucket is a 429 whatever was sent.

use std::time::Instant;

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, HttpResponseBuilder};

use crate::charge::{self, Balance, KeyState, Payer, Price, Reason, Refusal};
use crate::config::Costs;
use crate::exceeded::Exceeded;
use crate::metrics::Layer;
use crate::node::Node;
use crate::protocol::ErrorCode;
use crate::refusal::{refusal_builder, retry_after_ms};

/// Whose bucket a refusal is charged to, as the 429's sentence names it.
pub(super) struct Whose<'a> {
    pub payer: Payer<'a>,
    pub account: &'a str,
    pub costs: &'a Costs,
    /// "this API key's", "this identity's".
    pub name: &'a str,
}

/// Counts `r`, charges what it costs (see the module) and answers it, with
/// `X-RateLimit-*` of the bucket charged and `Tidegate-Cost`.
pub(super) async fn refuse_paid(node: &Node, whose: Whose<'_>, r: Refused) -> HttpResponse {
    Exceeded::new(Layer::Http, r.code.as_str(), whose.account).emit(&node.metrics);
    let units = crate::admission::refusal_units(whose.costs, r.code);
    if units == 0 {
        return refusal_builder(HttpResponse::build(r.status), r.code, &r.message, None);
    }
    let price = Price::units(units, None);
    match node
        .ledger()
        .charge(whose.payer, price, Instant::now())
        .wait()
        .await
    {
        Ok(admitted) => {
            let builder = with_rate_headers(r.status, admitted.balance.as_ref(), units);
            refusal_builder(builder, r.code, &r.message, None)
        }
        Err(refused) => rate_limited(&refused, whose.name),
    }
}

/// A bucket refused the charge (counted by the charge layer): 429 with
/// `Retry-After`, `retryAfterMs` and the bucket's balance.
pub(super) fn rate_limited(refused: &charge::Refused, whose: &str) -> HttpResponse {
    let builder = with_rate_headers(StatusCode::TOO_MANY_REQUESTS, refused.balance.as_ref(), 0);
    let wait = retry_after_ms(refused.retry_after);
    let message = match refused.reason {
        Reason::Rule { .. } => {
            format!(
                "a rule of this plan limits this operation on this channel; retry after {wait} ms"
            )
        }
        _ => format!("{whose} budget is empty; retry after {wait} ms"),
    };
    refusal_builder(
        builder,
        ErrorCode::RateLimited,
        &message,
        Some(refused.retry_after),
    )
}

/// A refusal of one message: status, code and a sentence.
pub(super) struct Refused {
    pub(super) status: StatusCode,
    pub(super) code: ErrorCode,
    pub(super) message: String,
}

impl Refused {
    pub(super) fn new(status: StatusCode, code: ErrorCode, message: impl Into<String>) -> Refused {
        Refused {
            status,
            code,
            message: message.into(),
        }
    }
}

impl From<Refusal> for Refused {
    fn from(r: Refusal) -> Refused {
        let status = match r.code {
            ErrorCode::Forbidden => StatusCode::FORBIDDEN,
            ErrorCode::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::CostExceedsMax => StatusCode::UNPROCESSABLE_ENTITY,
            _ => StatusCode::BAD_REQUEST,
        };
        Refused::new(status, r.code, r.message)
    }
}

/// `X-RateLimit-*` from the key's balance, and `Tidegate-Cost`: the units
/// this request was charged.
pub(super) fn with_rate_headers(
    status: StatusCode,
    balance: Option<&Balance>,
    cost: u32,
) -> HttpResponseBuilder {
    let mut b = HttpResponse::build(status);
    b.insert_header(("Tidegate-Cost", cost.to_string()));
    if let Some(balance) = balance {
        for header in balance.rate_limit_headers() {
            b.insert_header(header);
        }
    }
    b
}

/// A refusal of the request before anything was charged: counted here.
pub(super) fn refuse(node: &Node, key: Option<&KeyState>, r: Refused) -> HttpResponse {
    Exceeded::new(
        Layer::Http,
        r.code.as_str(),
        key.map_or("", |k| k.account.as_str()),
    )
    .emit(&node.metrics);
    refusal_builder(HttpResponse::build(r.status), r.code, &r.message, None)
}
