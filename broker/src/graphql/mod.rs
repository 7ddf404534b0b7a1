//! The GraphQL API (§12, seed 004's fourth protocol): a document is
//! priced by static analysis before anything executes, taken from the
//! caller's bucket in one atomic step, refunded what its lists did not
//! return, and every response says what it cost.
//!
//! A front like `socket`, `http` and `grpc`: it imports only the layers
//! below them (node, bridge, backend, pricing, config, protocol, metrics)
//! and never another front; `server.rs` mounts its routes.
//!
//! - [`schema`]: the §12 schema (async-graphql), one resolver file per
//!   root type; [`code`]: the `extensions.code` of its errors.
//! - [`pricing`]: the cost function, pure: the parsed document, its
//!   variables and the plan's cost table in, the price out; and the
//!   actual cost after execution.
//! - [`caller`]: identity (API key or JWT); [`charge`]: the one place that
//!   takes from and gives back to a bucket; [`admission`]: the charge
//!   between validation and execution.
//! - [`documents`]: parsed documents kept by their text (bounded).
//! - [`operation`]: one operation's way (price, refuse, charge, execute,
//!   refund), over HTTP and the socket alike, run on the GraphQL runtime
//!   ([`executor`]) off the actix workers.
//! - [`over_http`]: `POST`/`GET /v1/graphql` after GraphQL over HTTP
//!   (`request.rs` reads its parameters and bounds the document);
//!   [`reply`]: media types, statuses and the runtime signal.
//! - [`sdl`]: `GET /v1/graphql/schema.graphql` with cost directives;
//!   [`prices`]: `GET /v1/prices`.
//! - [`transport_ws`]: `graphql-transport-ws` as a pure state machine;
//!   [`ws`]: that protocol on the socket machinery (subscriptions, and
//!   queries and mutations over the socket).

pub mod admission;
pub mod caller;
pub mod charge;
pub mod code;
pub mod documents;
pub mod executor;
mod hooked;
mod operation;
pub mod over_http;
pub mod prices;
pub mod pricing;
pub mod reply;
mod request;
pub mod schema;
pub mod sdl;
pub mod transport_ws;
pub mod ws;

use std::sync::Arc;

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};

use crate::node::Node;
use crate::protocol::ErrorCode;

pub const PATH: &str = "/v1/graphql";
pub const SCHEMA_PATH: &str = "/v1/graphql/schema.graphql";
pub const PRICES_PATH: &str = "/v1/prices";

fn authorization(req: &HttpRequest) -> Option<&str> {
    req.headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
}

/// `GET /v1/graphql/schema.graphql`: the SDL with the caller's prices (the
/// default plan's without a credential).
pub async fn schema_sdl(req: HttpRequest, node: web::Data<Arc<Node>>) -> HttpResponse {
    let costs = match caller::Caller::identify(&node, authorization(&req)) {
        Ok(c) => c.limits.costs.clone(),
        Err(_) => {
            let config = node.config.load();
            config
                .limits_for("", None)
                .map_or_else(|_| crate::config::Costs::default(), |l| l.costs.clone())
        }
    };
    HttpResponse::Ok()
        .insert_header(("content-type", "text/plain; charset=utf-8"))
        .body(sdl::document(&costs))
}

/// `GET /v1/prices` (any API key or JWT): the caller's price list.
pub async fn prices(req: HttpRequest, node: web::Data<Arc<Node>>) -> HttpResponse {
    match caller::Caller::identify(&node, authorization(&req)) {
        Ok(c) => HttpResponse::Ok().json(prices::document(&node, &c)),
        Err(e) => crate::refusal::refusal(
            StatusCode::UNAUTHORIZED,
            ErrorCode::Unauthorized,
            &e.to_string(),
            None,
        ),
    }
}
