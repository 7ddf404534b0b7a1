//! The codes GraphQL errors carry in `extensions.code` (§12), shared by
//! the resolvers, the admission and the transports that refuse before a
//! document runs.

use async_graphql::ErrorExtensions;

/// The error codes GraphQL errors carry in `extensions.code` (§12).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    BadRequest,
    Forbidden,
    PayloadTooLarge,
    Unauthenticated,
    RateLimited,
    QueryTooExpensive,
    QueryTooDeep,
    QueryTooComplex,
    Draining,
    NotAcceptable,
    UnsupportedMediaType,
    MethodNotAllowed,
    Banned,
}

impl Code {
    pub const fn as_str(self) -> &'static str {
        match self {
            Code::BadRequest => "BAD_REQUEST",
            Code::Forbidden => "FORBIDDEN",
            Code::PayloadTooLarge => "PAYLOAD_TOO_LARGE",
            Code::Unauthenticated => "UNAUTHENTICATED",
            Code::RateLimited => "RATE_LIMITED",
            Code::QueryTooExpensive => "QUERY_TOO_EXPENSIVE",
            Code::QueryTooDeep => "QUERY_TOO_DEEP",
            Code::QueryTooComplex => "QUERY_TOO_COMPLEX",
            Code::Draining => "DRAINING",
            Code::NotAcceptable => "NOT_ACCEPTABLE",
            Code::UnsupportedMediaType => "UNSUPPORTED_MEDIA_TYPE",
            Code::MethodNotAllowed => "METHOD_NOT_ALLOWED",
            Code::Banned => "BANNED",
        }
    }

    /// The `tidegate_rejections_total` reason (the contract's lower-case
    /// codes where one exists).
    pub const fn reason(self) -> &'static str {
        match self {
            Code::BadRequest => "bad_request",
            Code::Forbidden => "forbidden",
            Code::PayloadTooLarge => "payload_too_large",
            Code::Unauthenticated => "unauthorized",
            Code::RateLimited => "rate_limited",
            Code::QueryTooExpensive => "query_too_expensive",
            Code::QueryTooDeep => "query_too_deep",
            Code::QueryTooComplex => "query_too_complex",
            Code::Draining => "draining",
            Code::NotAcceptable => "not_acceptable",
            Code::UnsupportedMediaType => "unsupported_media_type",
            Code::MethodNotAllowed => "method_not_allowed",
            Code::Banned => "banned",
        }
    }

    /// A resolver's error with this code.
    pub fn error(self, message: impl Into<String>) -> async_graphql::Error {
        async_graphql::Error::new(message.into()).extend_with(|_, e| e.set("code", self.as_str()))
    }
}
