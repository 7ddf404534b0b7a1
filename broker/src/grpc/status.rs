//! How the gRPC API says an outcome (§8): status codes for the contract's
//! error codes, the balance trailers every finished call carries, and the
//! `RESOURCE_EXHAUSTED` a rate limit ends a call with (trailing
//! `retry-after-ms`, `grpc-retry-pushback-ms` and a `google.rpc.RetryInfo`
//! detail, all the same delay; never `UNAVAILABLE`, which clients retry at
//! once).

use std::collections::HashMap;
use std::time::Duration;

use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::charge::{Balance, Reason, Refused};
use crate::protocol::ErrorCode;
use crate::refusal::{retry_after_ms, retry_after_secs};

/// The `domain` of every `google.rpc.ErrorInfo` detail; its `reason` is
/// the contract's error code (`forbidden`, `slow_consumer`, …).
pub const DOMAIN: &str = "tidegate.v1";

/// Trailer names of §8.
pub const LIMIT: &str = "ratelimit-limit";
pub const REMAINING: &str = "ratelimit-remaining";
pub const RESET: &str = "ratelimit-reset";
pub const COST: &str = "tidegate-cost";
pub const RETRY_AFTER_MS: &str = "retry-after-ms";
/// gRFC A6: honoured by stock clients whose retry policy lists the code.
pub const PUSHBACK_MS: &str = "grpc-retry-pushback-ms";

/// The trailers of a finished call that has a balance to show:
/// `ratelimit-*` (as `X-RateLimit-*`) and `tidegate-cost`, the units the
/// whole call was charged.
pub fn balance(map: &mut MetadataMap, charge: &Balance, cost: u64) {
    map.insert(LIMIT, MetadataValue::from(charge.limit));
    map.insert(REMAINING, MetadataValue::from(charge.remaining));
    map.insert(RESET, MetadataValue::from(retry_after_secs(charge.reset)));
    map.insert(COST, MetadataValue::from(cost));
}

/// The status for a contract error code.
pub fn code_for(code: ErrorCode) -> Code {
    match code {
        ErrorCode::Unauthorized => Code::Unauthenticated,
        ErrorCode::Forbidden | ErrorCode::Banned => Code::PermissionDenied,
        ErrorCode::CostExceedsMax => Code::FailedPrecondition,
        ErrorCode::RateLimited | ErrorCode::SlowConsumer | ErrorCode::TooManyConnections => {
            Code::ResourceExhausted
        }
        ErrorCode::Draining | ErrorCode::NodeOverloaded => Code::Unavailable,
        ErrorCode::Internal => Code::Internal,
        _ => Code::InvalidArgument,
    }
}

fn details(code: ErrorCode) -> ErrorDetails {
    let mut d = ErrorDetails::new();
    d.set_error_info(code.as_str(), DOMAIN, HashMap::new());
    d
}

/// A refusal ending a call: its status code, the sentence, an `ErrorInfo`
/// naming the contract code, and the balance trailers when known.
pub fn refused(code: ErrorCode, message: &str, balance_of: Option<(&Balance, u64)>) -> Status {
    let mut md = MetadataMap::new();
    if let Some((charge, cost)) = balance_of {
        balance(&mut md, charge, cost);
    }
    Status::with_error_details_and_metadata(code_for(code), message, details(code), md)
}

/// The key's budget is empty: `RESOURCE_EXHAUSTED` with the delay in
/// `retry-after-ms`, `grpc-retry-pushback-ms` and `RetryInfo`.
pub fn rate_limited(refused: &Refused, cost: u64) -> Status {
    let ms = retry_after_ms(refused.retry_after);
    let mut md = MetadataMap::new();
    if let Some(b) = &refused.balance {
        balance(&mut md, b, cost);
    }
    md.insert(RETRY_AFTER_MS, MetadataValue::from(ms));
    md.insert(PUSHBACK_MS, MetadataValue::from(ms));
    let mut d = details(ErrorCode::RateLimited);
    d.set_retry_info(Some(Duration::from_millis(ms)));
    let message = match refused.reason {
        Reason::Rule { .. } => {
            format!(
                "a rule of this plan limits this operation on this channel; retry after {ms} ms"
            )
        }
        _ => format!("this API key's budget is empty; retry after {ms} ms"),
    };
    Status::with_error_details_and_metadata(Code::ResourceExhausted, message, d, md)
}

/// The end of a stream that finished well, carrying its trailers.
pub fn finished(charge: Option<&Balance>, cost: u64) -> Status {
    let mut status = Status::ok("");
    if let Some(c) = charge {
        balance(status.metadata_mut(), c, cost);
    } else {
        status
            .metadata_mut()
            .insert(COST, MetadataValue::from(cost));
    }
    status
}

/// `PERMISSION_DENIED` `banned` while an operator's ban on the key's
/// account or the caller's address lasts (§10), its remaining time in
/// `retry-after-ms` and `RetryInfo`.
pub fn banned(ban: &crate::bans::Ban) -> Status {
    let ms = retry_after_ms(ban.remaining);
    let mut md = MetadataMap::new();
    md.insert(RETRY_AFTER_MS, MetadataValue::from(ms));
    let mut d = details(ErrorCode::Banned);
    d.set_retry_info(Some(Duration::from_millis(ms)));
    Status::with_error_details_and_metadata(Code::PermissionDenied, ban.message(), d, md)
}

/// `UNAVAILABLE` while the node drains (§7): another node will answer.
pub fn draining() -> Status {
    let mut d = details(ErrorCode::Draining);
    d.set_retry_info(Some(Duration::from_secs(1)));
    Status::with_error_details(
        Code::Unavailable,
        "this node is shutting down; call another node",
        d,
    )
}

/// `ABORTED` with `ErrorInfo` reason `disconnected`: an operator's
/// disconnect (§10) ended the stream. The contract names no gRPC status
/// for it; `ABORTED` says "call again at a higher level" (the socket's
/// 4003: reconnect with the normal backoff), where `UNAVAILABLE` would be
/// retried at once by stock clients and is kept for the drain.
pub fn disconnected() -> Status {
    let mut d = ErrorDetails::new();
    d.set_error_info(crate::cluster::DISCONNECTED, DOMAIN, HashMap::new());
    Status::with_error_details(
        Code::Aborted,
        "this stream was ended by an operator's disconnect; call again with the normal backoff",
        d,
    )
}
