//! The one `Authorization` parser, for every front that reads the header
//! (`/v1/ws`, SSE, HTTP and client publish, presence, GraphQL and
//! graphql-ws, `/v1/prices`, gRPC metadata, the admin API), and what a
//! credential names once verified ([`Who`]).

use std::sync::Arc;

use crate::auth::Grants;
use crate::config::Limits;

/// The credential of an `Authorization` header value in the Bearer
/// scheme, or `None` for another scheme or an empty credential.
///
/// The scheme's name is case-insensitive (RFC 7235 §2.1): `bearer` and
/// `BEARER` are `Bearer`. Whitespace around the credential is not part of
/// it. Every front reads its header through this one function, so a
/// spelling is accepted or refused everywhere alike (issue 42: seven
/// copies disagreed on the case).
pub fn bearer(value: &str) -> Option<&str> {
    let (scheme, credential) = value.trim_start().split_once([' ', '\t'])?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let credential = credential.trim();
    (!credential.is_empty()).then_some(credential)
}

/// Whom a credential names, once verified (a token's signature and plan,
/// or an API key): who is asking, as the §1 layers after the credential
/// take it on every socket (`/v1/ws`'s upgrade and its connect hook, a
/// Pusher app's key, graphql-ws's `connection_init`). It lives with the
/// admission, not with the socket's dialects, because a verified
/// credential is the admission's question on every front, not a socket
/// plug-in's concept.
#[derive(Debug, Clone)]
pub struct Who {
    pub account: String,
    /// The plan claim (`None`: the account's plan).
    pub plan: Option<String>,
    pub role: Option<String>,
    pub limits: Arc<Limits>,
    pub grants: Grants,
    /// A token's times; `None` for an API key, whose connection neither
    /// counts toward the account's connection cap nor takes part in its
    /// message budget (its operations are charged to the key's bucket).
    pub token: Option<TokenTimes>,
    /// The token's `info` claim as compact JSON, what presence shows (§13).
    pub info: Option<Arc<str>>,
}

/// A token's life, as a connection it admitted keeps it.
#[derive(Debug, Clone, Copy)]
pub struct TokenTimes {
    /// `exp`, unix ms.
    pub expires_at_ms: u64,
    /// When the socket closes with 4001 unless refreshed: unix seconds.
    pub deadline: u64,
}

#[cfg(test)]
mod tests {
    use super::bearer;

    #[test]
    fn the_bearer_scheme_is_read_in_any_case() {
        for value in [
            "Bearer t",
            "bearer t",
            "BEARER t",
            "bEaReR   t  ",
            "Bearer\tt",
        ] {
            assert_eq!(bearer(value), Some("t"), "{value:?}");
        }
        for value in ["Basic t", "Bearer", "Bearer ", "Bearert", "Token t", ""] {
            assert_eq!(bearer(value), None, "{value:?}");
        }
    }
}
