//! The HTTP side: publish for backend services, and the operations
//! endpoints. Refusals share one body shape (§1, §5).

pub mod keys;
pub mod ops;
pub mod publish;

use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, HttpResponseBuilder};
use serde::Serialize;

use crate::protocol::ErrorCode;

/// The client address of a request: the peer, or the right-most untrusted
/// `X-Forwarded-For` entry when the peer is a trusted proxy (§1).
pub fn request_ip(
    req: &actix_http::RequestHead,
    trusted: &[crate::config::ProxyRange],
) -> std::net::IpAddr {
    let peer = req.peer_addr.map_or([127, 0, 0, 1].into(), |a| a.ip());
    let xff = req
        .headers()
        .get("x-forwarded-for")
        .and_then(|v| v.to_str().ok());
    crate::gate::client_ip(peer, xff, trusted)
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorBody<'a> {
    pub error: &'static str,
    pub message: &'a str,
    /// On every refusal (§1): 0 where waiting cannot help.
    pub retry_after_ms: u64,
}

/// `Retry-After` is whole seconds, rounded up (never 0 for a wait).
pub fn retry_after_secs(d: Duration) -> u64 {
    d.as_millis().div_ceil(1000).max(1) as u64
}

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
