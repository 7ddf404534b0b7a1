//! Every error code and close code of the wire contract, in one table.
//!
//! The TypeScript SDK keeps a copy in `client-sdk-ts/src/codes.ts`;
//! `broker/tests/codes_sync.rs` fails when the two drift apart. Each entry
//! says whether retrying can help (`temporary`), the distinction
//! centrifuge draws between "reconnect" and "do not reconnect".

/// A stable, machine-readable error code (`"error"` in HTTP bodies, `"code"`
/// in `error` frames).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    RateLimited,
    AccountRateLimited,
    TooManySubscriptions,
    Forbidden,
    CostExceedsMax,
    BadRequest,
    SlowConsumer,
    Unauthorized,
    UnknownPlan,
    Draining,
    NodeOverloaded,
    IpRateLimited,
    IpTooManyConnections,
    HandshakeRateLimited,
    TooManyConnections,
    PayloadTooLarge,
    NotFound,
    Internal,
    Banned,
    PresenceFull,
    /// A backend hook (§15) could not answer and its `on_error` is `deny`.
    HookUnavailable,
    /// A tokenless handshake from a page of another site (§15).
    ForbiddenOrigin,
    /// An `rpc` frame no hook answers (§15).
    UnknownMethod,
}

impl ErrorCode {
    /// Every code, in table order (used by the SDK sync test and docs).
    pub const ALL: [ErrorCode; 23] = [
        ErrorCode::RateLimited,
        ErrorCode::AccountRateLimited,
        ErrorCode::TooManySubscriptions,
        ErrorCode::Forbidden,
        ErrorCode::CostExceedsMax,
        ErrorCode::BadRequest,
        ErrorCode::SlowConsumer,
        ErrorCode::Unauthorized,
        ErrorCode::UnknownPlan,
        ErrorCode::Draining,
        ErrorCode::NodeOverloaded,
        ErrorCode::IpRateLimited,
        ErrorCode::IpTooManyConnections,
        ErrorCode::HandshakeRateLimited,
        ErrorCode::TooManyConnections,
        ErrorCode::PayloadTooLarge,
        ErrorCode::NotFound,
        ErrorCode::Internal,
        ErrorCode::Banned,
        ErrorCode::PresenceFull,
        ErrorCode::HookUnavailable,
        ErrorCode::ForbiddenOrigin,
        ErrorCode::UnknownMethod,
    ];

    /// The wire spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorCode::RateLimited => "rate_limited",
            ErrorCode::AccountRateLimited => "account_rate_limited",
            ErrorCode::TooManySubscriptions => "too_many_subscriptions",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::CostExceedsMax => "cost_exceeds_max",
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::SlowConsumer => "slow_consumer",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::UnknownPlan => "unknown_plan",
            ErrorCode::Draining => "draining",
            ErrorCode::NodeOverloaded => "node_overloaded",
            ErrorCode::IpRateLimited => "ip_rate_limited",
            ErrorCode::IpTooManyConnections => "ip_too_many_connections",
            ErrorCode::HandshakeRateLimited => "handshake_rate_limited",
            ErrorCode::TooManyConnections => "too_many_connections",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::NotFound => "not_found",
            ErrorCode::Internal => "internal",
            ErrorCode::Banned => "banned",
            ErrorCode::PresenceFull => "presence_full",
            ErrorCode::HookUnavailable => "hook_unavailable",
            ErrorCode::ForbiddenOrigin => "forbidden_origin",
            ErrorCode::UnknownMethod => "unknown_method",
        }
    }

    /// Whether the same request can succeed later without the client
    /// changing it (a limit that refills, a node that comes back).
    pub const fn temporary(self) -> bool {
        matches!(
            self,
            ErrorCode::RateLimited
                | ErrorCode::AccountRateLimited
                | ErrorCode::SlowConsumer
                | ErrorCode::Draining
                | ErrorCode::NodeOverloaded
                | ErrorCode::IpRateLimited
                | ErrorCode::IpTooManyConnections
                | ErrorCode::HandshakeRateLimited
                | ErrorCode::TooManyConnections
                | ErrorCode::Internal
                | ErrorCode::Banned
                | ErrorCode::HookUnavailable
        )
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a client should do after the server closed its socket with a code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reconnect {
    /// Reconnect with jittered backoff from the minimum delay.
    Jittered,
    /// Reconnect, but back off long: the account was abusive.
    LongBackoff,
    /// Reconnecting with the same frames will fail the same way.
    Fix,
}

/// A WebSocket close code the broker sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CloseCode {
    GoingAway,
    ProtocolError,
    InvalidUtf8,
    PolicyViolation,
    MessageTooBig,
    InternalError,
    ServiceRestart,
    TryAgainLater,
    TokenExpired,
    Operator,
    SlowConsumer,
    ConnectionCap,
}

impl CloseCode {
    pub const ALL: [CloseCode; 12] = [
        CloseCode::GoingAway,
        CloseCode::ProtocolError,
        CloseCode::InvalidUtf8,
        CloseCode::PolicyViolation,
        CloseCode::MessageTooBig,
        CloseCode::InternalError,
        CloseCode::ServiceRestart,
        CloseCode::TryAgainLater,
        CloseCode::TokenExpired,
        CloseCode::Operator,
        CloseCode::SlowConsumer,
        CloseCode::ConnectionCap,
    ];

    /// The numeric code on the wire.
    pub const fn code(self) -> u16 {
        match self {
            CloseCode::GoingAway => 1001,
            CloseCode::ProtocolError => 1002,
            CloseCode::InvalidUtf8 => 1007,
            CloseCode::PolicyViolation => 1008,
            CloseCode::MessageTooBig => 1009,
            CloseCode::InternalError => 1011,
            CloseCode::ServiceRestart => 1012,
            CloseCode::TryAgainLater => 1013,
            CloseCode::TokenExpired => 4001,
            CloseCode::Operator => 4003,
            CloseCode::SlowConsumer => 4008,
            CloseCode::ConnectionCap => 4029,
        }
    }

    /// The SCREAMING_SNAKE name used by the SDK table.
    pub const fn name(self) -> &'static str {
        match self {
            CloseCode::GoingAway => "GOING_AWAY",
            CloseCode::ProtocolError => "PROTOCOL_ERROR",
            CloseCode::InvalidUtf8 => "INVALID_UTF8",
            CloseCode::PolicyViolation => "POLICY_VIOLATION",
            CloseCode::MessageTooBig => "MESSAGE_TOO_BIG",
            CloseCode::InternalError => "INTERNAL_ERROR",
            CloseCode::ServiceRestart => "SERVICE_RESTART",
            CloseCode::TryAgainLater => "TRY_AGAIN_LATER",
            CloseCode::TokenExpired => "TOKEN_EXPIRED",
            CloseCode::Operator => "OPERATOR",
            CloseCode::SlowConsumer => "SLOW_CONSUMER",
            CloseCode::ConnectionCap => "CONNECTION_CAP",
        }
    }

    /// The short reason sent in the close frame (≤ 123 bytes by RFC 6455).
    pub const fn reason(self) -> &'static str {
        match self {
            CloseCode::GoingAway => "server going away",
            CloseCode::ProtocolError => "WebSocket protocol error",
            CloseCode::InvalidUtf8 => "invalid UTF-8 in a text frame",
            CloseCode::PolicyViolation => "account message budget exceeded",
            CloseCode::MessageTooBig => "message larger than the payload limit",
            CloseCode::InternalError => "internal error",
            CloseCode::ServiceRestart => "service restart: reconnect with jittered backoff",
            CloseCode::TryAgainLater => "node overloaded: try again later",
            CloseCode::TokenExpired => "token expired: reconnect with a new token",
            // The generic one; operator closes send `disconnected` or
            // `banned` instead (§4: the reason says which).
            CloseCode::Operator => "disconnected",
            CloseCode::SlowConsumer => "slow consumer: stayed above the outbound high-water mark",
            CloseCode::ConnectionCap => "account connection cap reached",
        }
    }

    pub const fn reconnect(self) -> Reconnect {
        match self {
            CloseCode::PolicyViolation => Reconnect::LongBackoff,
            CloseCode::InvalidUtf8 | CloseCode::MessageTooBig | CloseCode::ProtocolError => {
                Reconnect::Fix
            }
            _ => Reconnect::Jittered,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn codes_are_unique() {
        let names: HashSet<_> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(names.len(), ErrorCode::ALL.len());
        let nums: HashSet<_> = CloseCode::ALL.iter().map(|c| c.code()).collect();
        assert_eq!(nums.len(), CloseCode::ALL.len());
        for c in CloseCode::ALL {
            assert!(
                c.reason().len() <= 123,
                "{c:?} reason too long for a close frame"
            );
        }
    }
}
