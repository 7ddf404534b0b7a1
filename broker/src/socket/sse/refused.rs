//! A refusal of an admitted stream request (its token known, its account
//! known), charged by the one rule of what a refusal costs
//! ([`crate::admission::refusal_units`], issue 42): a channel that is not
//! one, a forbidden channel and more channels than `max_subscriptions`
//! cost `costs.malformed`, as the same input costs on `/v1/ws`, HTTP and
//! gRPC; `cost_exceeds_max` costs nothing. The request holds no connection
//! buckets of its own (the stream never started), so its account budget
//! pays at once ([`Payer::Account`]), where a socket's frames end up too.
//! When the budget cannot pay even that, the answer is the 429, as on the
//! HTTP fronts: an empty budget is a 429 whatever was sent.

use std::time::Instant;

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, HttpResponseBuilder};

use crate::charge::{Balance, Payer, Price};
use crate::config::Limits;
use crate::exceeded::Exceeded;
use crate::metrics::Layer;
use crate::node::Node;
use crate::protocol::ErrorCode;
use crate::refusal::{refusal_builder, retry_after_ms};

/// One refusal of a stream request: what the client is told.
pub(super) struct Refusal {
    pub(super) status: StatusCode,
    pub(super) code: ErrorCode,
    pub(super) message: String,
}

/// Counts `r` under the handshake's layer (unless `counted` already),
/// charges `account` what it costs and answers it, with `Tidegate-Cost`
/// and the account budget's `X-RateLimit-*` when it cost something.
pub(super) async fn refuse_paid(
    node: &Node,
    account: &str,
    limits: &Limits,
    r: Refusal,
    counted: bool,
) -> HttpResponse {
    if !counted {
        Exceeded::new(Layer::Handshake, r.code.as_str(), account).emit(&node.metrics);
    }
    let units = crate::admission::refusal_units(&limits.costs, r.code);
    if units == 0 {
        return refusal_builder(HttpResponse::build(r.status), r.code, &r.message, None);
    }
    let payer = Payer::Account {
        layer: Layer::Handshake,
        account,
        limits,
    };
    let charged = node
        .ledger()
        .charge(payer, Price::units(units, None), Instant::now())
        .wait()
        .await;
    match charged {
        Ok(admitted) => {
            let builder = rate_headers(r.status, admitted.balance.as_ref(), units);
            refusal_builder(builder, r.code, &r.message, None)
        }
        Err(refused) => {
            let builder = rate_headers(StatusCode::TOO_MANY_REQUESTS, refused.balance.as_ref(), 0);
            let wait = retry_after_ms(refused.retry_after);
            let message = format!("this account's budget is empty; retry after {wait} ms");
            refusal_builder(
                builder,
                ErrorCode::RateLimited,
                &message,
                Some(refused.retry_after),
            )
        }
    }
}

/// `Tidegate-Cost` and the account budget as `X-RateLimit-*`, the headers
/// the HTTP fronts answer a charged request with.
fn rate_headers(status: StatusCode, balance: Option<&Balance>, cost: u32) -> HttpResponseBuilder {
    let mut b = HttpResponse::build(status);
    b.insert_header(("Tidegate-Cost", cost.to_string()));
    if let Some(balance) = balance {
        for header in balance.rate_limit_headers() {
            b.insert_header(header);
        }
    }
    b
}
