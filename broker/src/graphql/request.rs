//! Reading a GraphQL request over HTTP (GraphQL over HTTP's parameters:
//! `query`, `operationName`, `variables`, `extensions`) from a POST body or
//! a GET query string, and the refusals before anything is priced.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, web};
use async_graphql::{ErrorExtensionValues, ServerError, Variables};
use async_graphql_value::ConstValue;
use bytes::BytesMut;
use futures_util::StreamExt;

use super::caller::Caller;
use super::code::Code;
use crate::node::Node;

/// The largest document (§12: larger is 413).
pub const MAX_DOCUMENT_BYTES: usize = 64 * 1024;

/// How far `{`, `[` and `(` may nest in a document's text before it is
/// parsed (the depth limit refuses far less once parsed; this bounds the
/// parser's own recursion on hostile input).
pub(crate) const MAX_TEXT_NESTING: usize = 128;

/// The request's GraphQL parameters.
pub(super) struct Params {
    pub query: String,
    pub operation_name: Option<String>,
    pub variables: Variables,
}

/// A refusal before execution: status (for `application/json`, where
/// request errors are 200, `json_status`), code, message.
pub(super) struct Refused {
    pub status: StatusCode,
    pub json_status: StatusCode,
    pub code: Code,
    pub message: String,
    pub extra: Vec<(&'static str, ConstValue)>,
    /// The request was read and found unusable (unparsable, invalid, too
    /// deep or too large): it costs the caller `costs.malformed`, as a
    /// malformed frame does on a socket. Nothing before the credential
    /// and no refusal that read nothing (406, 415) is charged.
    pub malformed: bool,
}

impl Refused {
    /// A request error: 400 for `graphql-response+json`, 200 for JSON.
    pub fn request(code: Code, message: impl Into<String>) -> Refused {
        Refused {
            status: StatusCode::BAD_REQUEST,
            json_status: StatusCode::OK,
            code,
            message: message.into(),
            extra: Vec::new(),
            malformed: false,
        }
    }

    /// The same status whatever the media type.
    pub fn status(status: StatusCode, code: Code, message: impl Into<String>) -> Refused {
        Refused {
            status,
            json_status: status,
            code,
            message: message.into(),
            extra: Vec::new(),
            malformed: false,
        }
    }

    /// Charged `costs.malformed` ([`Refused::malformed`]).
    pub fn malformed(mut self) -> Refused {
        self.malformed = true;
        self
    }

    pub fn with(mut self, key: &'static str, value: impl Into<ConstValue>) -> Refused {
        self.extra.push((key, value.into()));
        self
    }

    pub fn error(&self) -> ServerError {
        let mut e = ServerError::new(self.message.clone(), None);
        let mut x = ErrorExtensionValues::default();
        x.set("code", self.code.as_str());
        for (k, v) in &self.extra {
            x.set(*k, v.clone());
        }
        e.extensions = Some(x);
        e
    }
}

pub(super) async fn read_post(
    req: &HttpRequest,
    mut payload: web::Payload,
    node: &Node,
    caller: &Caller,
) -> Result<Params, Refused> {
    let content_type = req
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if essence != "application/json" {
        return Err(Refused::status(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Code::UnsupportedMediaType,
            "send the request as Content-Type: application/json",
        ));
    }
    // The document (64 KiB) plus variables as large as a publish batch.
    let limit = MAX_DOCUMENT_BYTES + node.config.load().http.max_batch_bytes;
    let mut body = BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|e| {
            Refused::status(StatusCode::BAD_REQUEST, Code::BadRequest, e.to_string())
        })?;
        if body.len() + chunk.len() > limit {
            return Err(Refused::status(
                StatusCode::PAYLOAD_TOO_LARGE,
                Code::PayloadTooLarge,
                format!("the request body is larger than {limit} bytes"),
            )
            .malformed());
        }
        body.extend_from_slice(&chunk);
    }
    let depth = caller.limits.max_json_depth.saturating_add(4);
    if crate::protocol::json::depth_exceeds(&body, depth) {
        return Err(bad_params(format!(
            "the request's JSON nests deeper than {depth} levels"
        )));
    }
    let value: serde_json::Value = serde_json::from_slice(&body)
        .map_err(|e| bad_params(format!("the request body is not JSON: {e}")))?;
    let serde_json::Value::Object(mut map) = value else {
        return Err(bad_params(if value.is_array() {
            "one operation per request: a JSON array of operations (batching) is not accepted"
                .to_owned()
        } else {
            "the request body must be a JSON object with a `query`".to_owned()
        }));
    };
    let query = match map.remove("query") {
        Some(serde_json::Value::String(q)) => q,
        Some(_) => return Err(bad_params("`query` must be a string")),
        None => return Err(bad_params("the request has no `query`")),
    };
    let operation_name = match map.remove("operationName") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(s)) => Some(s),
        Some(_) => return Err(bad_params("`operationName` must be a string")),
    };
    let variables = match map.remove("variables") {
        None | Some(serde_json::Value::Null) => Variables::default(),
        Some(v @ serde_json::Value::Object(_)) => Variables::from_json(v),
        Some(_) => return Err(bad_params("`variables` must be an object")),
    };
    match map.remove("extensions") {
        None | Some(serde_json::Value::Null | serde_json::Value::Object(_)) => {}
        Some(_) => return Err(bad_params("`extensions` must be an object")),
    }
    Ok(Params {
        query,
        operation_name,
        variables,
    })
}

pub(super) fn read_get(req: &HttpRequest) -> Result<Params, Refused> {
    let pairs = web::Query::<Vec<(String, String)>>::from_query(req.query_string())
        .map_err(|e| bad_params(format!("the query string is malformed: {e}")))?
        .into_inner();
    let mut query = None;
    let mut operation_name = None;
    let mut variables = Variables::default();
    for (k, v) in pairs {
        match k.as_str() {
            "query" => query = Some(v),
            "operationName" if !v.is_empty() => operation_name = Some(v),
            "variables" if !v.is_empty() => {
                let json: serde_json::Value = serde_json::from_str(&v)
                    .map_err(|e| bad_params(format!("`variables` is not JSON: {e}")))?;
                if !json.is_object() {
                    return Err(bad_params("`variables` must be a JSON object"));
                }
                variables = Variables::from_json(json);
            }
            "extensions" if !v.is_empty() => {
                let json: serde_json::Value = serde_json::from_str(&v)
                    .map_err(|e| bad_params(format!("`extensions` is not JSON: {e}")))?;
                if !json.is_object() {
                    return Err(bad_params("`extensions` must be a JSON object"));
                }
            }
            _ => {}
        }
    }
    let query = query.ok_or_else(|| bad_params("the request has no `query` parameter"))?;
    Ok(Params {
        query,
        operation_name,
        variables,
    })
}

/// Malformed request parameters: 400 whatever the media type, charged
/// `costs.malformed`.
pub(super) fn bad_params(message: impl Into<String>) -> Refused {
    Refused::status(StatusCode::BAD_REQUEST, Code::BadRequest, message).malformed()
}

/// The deepest nesting of `{`, `[` and `(` outside strings and comments.
pub(crate) fn text_nesting(text: &str) -> usize {
    let b = text.as_bytes();
    let (mut depth, mut deepest, mut i) = (0usize, 0usize, 0usize);
    while i < b.len() {
        match b[i] {
            b'#' => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'"' if b[i..].starts_with(b"\"\"\"") => {
                i += 3;
                while i < b.len() && !b[i..].starts_with(b"\"\"\"") {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 2;
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' && b[i] != b'\n' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'{' | b'[' | b'(' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b'}' | b']' | b')' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    deepest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nesting_is_counted_outside_strings_and_comments() {
        assert_eq!(text_nesting("{ a { b(x: [1]) } }"), 4);
        assert_eq!(text_nesting(r#"{ a(s: "{{{{") }"#), 2);
        assert_eq!(text_nesting("{ a # {{{{\n }"), 1);
        assert_eq!(text_nesting(r#"{ a(s: """ {{{ \""" {{ """) }"#), 2);
        assert_eq!(text_nesting(&"{".repeat(1000)), 1000);
    }
}
