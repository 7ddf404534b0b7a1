//! How this dialect says no: a refused upgrade (before the credential),
//! a close code's rejection reason, and an `error` message's payload.

use std::time::Duration;

use actix_web::HttpResponse;
use actix_web::http::StatusCode;

use crate::charge::{Reason, Refused};
use crate::graphql::admission::{retry_ms, retry_secs};
use crate::protocol::ErrorCode;

/// A refused upgrade (§1's layers before the credential): the statuses and
/// headers of `/v1/ws`, with a GraphQL response as the body (§1).
pub(super) fn refusal(
    status: StatusCode,
    code: ErrorCode,
    message: &str,
    retry: Option<Duration>,
) -> HttpResponse {
    let body = serde_json::json!({"errors": [{
        "message": message,
        "extensions": {
            "code": code.as_str().to_ascii_uppercase(),
            "retryAfterMs": retry.map_or(0, retry_ms),
        },
    }]});
    let mut b = HttpResponse::build(status);
    b.insert_header(("content-type", "application/json; charset=utf-8"));
    if let Some(d) = retry {
        b.insert_header(("Retry-After", retry_secs(d).to_string()));
    }
    b.body(body.to_string())
}

/// A close code's `tidegate_rejections_total` reason.
pub(super) fn close_reason(code: u16) -> &'static str {
    use crate::graphql::transport_ws::close;
    match code {
        close::INVALID_MESSAGE => "bad_request",
        close::UNAUTHORIZED => "subscribe_before_ack",
        close::INIT_TIMEOUT => "init_timeout",
        close::DUPLICATE_ID => "duplicate_id",
        close::TOO_MANY_INITS => "too_many_inits",
        _ => "forbidden",
    }
}

/// An `error` message's payload: one GraphQL error with `extensions`.
pub(super) fn error_payload(code: &str, message: &str, extra: serde_json::Value) -> String {
    let mut x = serde_json::json!({ "code": code });
    if let (Some(x), serde_json::Value::Object(more)) = (x.as_object_mut(), extra) {
        x.extend(more);
    }
    serde_json::json!([{ "message": message, "extensions": x }]).to_string()
}

/// A `subscribe` the connection's frame bucket refused: over `max_single`,
/// `QUERY_TOO_EXPENSIVE` (`cost`, `max`), as every front refuses a
/// subscription no wait can help; else `RATE_LIMITED` with the wait.
pub(super) fn frame(units: u32, r: &Refused) -> String {
    match r.reason {
        Reason::CostExceedsMax { cost, max } => too_expensive(
            &format!("a subscription costs {cost} units, above the largest single charge of {max}"),
            cost,
            max,
        ),
        _ => {
            let wait = r.retry_after;
            error_payload(
                "RATE_LIMITED",
                "rate limit exceeded: this connection's message budget is empty",
                serde_json::json!({"cost": units, "remaining": 0,
                    "retryAfter": retry_secs(wait), "retryAfterMs": retry_ms(wait)}),
            )
        }
    }
}

/// `QUERY_TOO_EXPENSIVE` for a subscription over `max_single`.
pub(super) fn too_expensive(message: &str, cost: u32, max: u32) -> String {
    error_payload(
        "QUERY_TOO_EXPENSIVE",
        message,
        serde_json::json!({ "cost": cost, "max": max }),
    )
}
