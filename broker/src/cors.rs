//! Cross-origin pages for the two routes a browser SDK client calls
//! without a socket (PROTOCOL.md §14): `GET /v1/sse` and
//! `POST /v1/client/publish`. Only the origins in `[http] cors_origins`
//! (default none: same origin only) are allowed; their preflight is
//! answered here, before routing, with `Authorization` (the JWT),
//! `Content-Type`, `Last-Event-ID` and `Idempotency-Key` (§17) allowed.
//! Every other route and origin is left as it is: the browser then refuses
//! the cross-origin read itself.

use std::sync::Arc;

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::RequestHead;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{self, HeaderMap, HeaderValue};
use actix_web::http::{Method, StatusCode};
use actix_web::middleware::Next;
use actix_web::{HttpResponse, web};

use crate::node::Node;

/// The paths cross-origin pages may call, when their origin is allowed.
const PATHS: [&str; 2] = ["/v1/sse", "/v1/client/publish"];

/// How long a browser may cache a preflight answer, in seconds.
const MAX_AGE: &str = "600";

/// The request's `Origin` when it is one of `cors_origins` and the path is
/// one of [`PATHS`].
fn allowed(req: &ServiceRequest) -> Option<HeaderValue> {
    let node = req.app_data::<web::Data<Arc<Node>>>()?;
    allowed_origin(node, req.path(), req.headers())
}

fn allowed_origin(node: &Node, path: &str, headers: &HeaderMap) -> Option<HeaderValue> {
    if !PATHS.contains(&path) {
        return None;
    }
    let origin = headers.get(header::ORIGIN)?;
    let config = node.config.load();
    let text = origin.to_str().ok()?;
    config
        .http
        .cors_origins
        .iter()
        .any(|o| o == text)
        .then(|| origin.clone())
}

fn allow(origin: HeaderValue, headers: &mut HeaderMap) {
    headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    headers.insert(header::VARY, HeaderValue::from_static("Origin"));
}

/// What the middleware adds to the answer of a request that never went
/// through the app (an SSE stream that took its connection,
/// `socket/sse/tcp.rs`).
pub fn decorate(node: &Node, req: &RequestHead, headers: &mut HeaderMap) {
    if let Some(origin) = allowed_origin(node, req.uri.path(), &req.headers) {
        allow(origin, headers);
    }
}

/// The middleware: a preflight of an allowed origin is answered at once;
/// an allowed origin's request gets `Access-Control-Allow-Origin`.
pub async fn middleware(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let origin = allowed(&req);
    if let Some(origin) = &origin
        && req.method() == Method::OPTIONS
    {
        let response = HttpResponse::build(StatusCode::NO_CONTENT)
            .insert_header((header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone()))
            .insert_header((header::ACCESS_CONTROL_ALLOW_METHODS, "GET, POST"))
            .insert_header((
                header::ACCESS_CONTROL_ALLOW_HEADERS,
                "Authorization, Content-Type, Last-Event-ID, Idempotency-Key",
            ))
            .insert_header((header::ACCESS_CONTROL_MAX_AGE, MAX_AGE))
            .insert_header((header::VARY, "Origin"))
            .finish();
        return Ok(req.into_response(response));
    }
    let mut res = next.call(req).await?.map_into_boxed_body();
    if let Some(origin) = origin {
        allow(origin, res.headers_mut());
    }
    Ok(res)
}
