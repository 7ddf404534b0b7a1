//! The one `Authorization` parser, for every front that reads the header
//! (`/v1/ws`, SSE, HTTP and client publish, presence, GraphQL and
//! graphql-ws, `/v1/prices`, gRPC metadata, the admin API).

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
