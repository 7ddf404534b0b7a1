//! How an HTTP refusal looks, whichever route refuses (§1, §5): the body
//! `{"error","message","retryAfterMs"}`, `Retry-After` in whole seconds
//! when waiting helps, and the 404/405 of paths and methods the broker
//! does not serve. Every HTTP front (publish, the handshake, the operator
//! routes, GraphQL over HTTP) answers through these, so they cannot drift.

use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, HttpResponseBuilder, web};
use serde::Serialize;

use crate::protocol::ErrorCode;

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorBody<'a> {
    pub error: &'a str,
    pub message: &'a str,
    /// On every refusal (§1): 0 where waiting cannot help.
    pub retry_after_ms: u64,
}

/// `Retry-After` is whole seconds, rounded up (never 0 for a wait).
pub fn retry_after_secs(d: Duration) -> u64 {
    d.as_millis().div_ceil(1000).max(1) as u64
}

/// `retryAfterMs`: milliseconds, rounded up (never 0 for a wait).
pub fn retry_after_ms(d: Duration) -> u64 {
    (d.as_micros().div_ceil(1000) as u64).max(1)
}

/// A refusal with the contract's body; with `retry_after`, also the
/// `Retry-After` header and a non-zero `retryAfterMs` (0 without: waiting
/// cannot help).
pub fn refusal(
    status: StatusCode,
    code: ErrorCode,
    message: &str,
    retry_after: Option<Duration>,
) -> HttpResponse {
    refusal_builder(HttpResponse::build(status), code, message, retry_after)
}

/// [`refusal`] with a code that is not the broker's own: a backend
/// hook's (§15).
pub fn refusal_code(
    status: StatusCode,
    code: &str,
    message: &str,
    retry_after: Option<Duration>,
) -> HttpResponse {
    let mut builder = HttpResponse::build(status);
    if let Some(d) = retry_after {
        builder.insert_header(("Retry-After", retry_after_secs(d).to_string()));
    }
    builder.json(ErrorBody {
        error: code,
        message,
        retry_after_ms: retry_after.map_or(0, retry_after_ms),
    })
}

pub fn refusal_builder(
    mut builder: HttpResponseBuilder,
    code: ErrorCode,
    message: &str,
    retry_after: Option<Duration>,
) -> HttpResponse {
    if let Some(d) = retry_after {
        builder.insert_header(("Retry-After", retry_after_secs(d).to_string()));
    }
    builder.json(ErrorBody {
        error: code.as_str(),
        message,
        retry_after_ms: retry_after.map_or(0, retry_after_ms),
    })
}

/// A path whose other methods get the contract's refusal body (405), not
/// actix's empty one.
pub fn resource(path: &str) -> actix_web::Resource {
    web::resource(path).default_service(web::to(|| async { method_not_allowed() }))
}

pub fn method_not_allowed() -> HttpResponse {
    refusal(
        StatusCode::METHOD_NOT_ALLOWED,
        ErrorCode::BadRequest,
        "this endpoint does not answer that method",
        None,
    )
}

pub fn not_found() -> HttpResponse {
    refusal(
        StatusCode::NOT_FOUND,
        ErrorCode::NotFound,
        "no such endpoint",
        None,
    )
}
