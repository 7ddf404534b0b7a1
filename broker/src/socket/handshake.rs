//! `GET /v1/ws`: the checks that run before the upgrade (§1), cheapest
//! first, each costing one HTTP response and no socket; then the upgrade.

use std::sync::Arc;

use actix_web::body::BoxBody;
use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpRequest, HttpResponse, web};

use super::{Identity, Socket};
use crate::auth::AuthError;
use crate::http::refusal;
use crate::metrics::Layer;
use crate::node::Node;
use crate::protocol::ErrorCode;

/// The subprotocol Tidegate speaks.
pub const SUBPROTOCOL: &str = "tidegate.v1";
const BEARER_PREFIX: &str = "bearer.";

/// The offered subprotocols, comma-separated over one or more headers.
fn offered(req: &HttpRequest) -> impl Iterator<Item = &str> {
    req.headers()
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
}

/// The token from `bearer.<token>` or `Authorization: Bearer <token>`.
fn bearer_token(req: &HttpRequest) -> Option<&str> {
    offered(req)
        .find_map(|p| p.strip_prefix(BEARER_PREFIX))
        .or_else(|| {
            req.headers()
                .get(header::AUTHORIZATION)?
                .to_str()
                .ok()?
                .strip_prefix("Bearer ")
                .map(str::trim)
        })
        .filter(|t| !t.is_empty())
}

pub async fn upgrade(
    req: HttpRequest,
    payload: web::Payload,
    node: web::Data<Arc<Node>>,
) -> HttpResponse {
    let node = node.get_ref().clone();
    let config = node.config.load_full();
    let refuse = |status: StatusCode, code: ErrorCode, message: &str| {
        node.metrics.reject(Layer::Handshake, code.as_str());
        refusal(status, code, message, None)
    };

    let mut response = match actix_http::ws::handshake(req.head()) {
        Ok(r) => r,
        Err(e) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                ErrorCode::BadRequest,
                &format!("not a WebSocket upgrade: {e}"),
            );
        }
    };

    let Some(token) = bearer_token(&req) else {
        return refuse(
            StatusCode::UNAUTHORIZED,
            ErrorCode::Unauthorized,
            &AuthError::Missing.to_string(),
        );
    };
    let claims = match node.auth.load().verify(token) {
        Ok(c) => c,
        Err(e) => {
            return refuse(
                StatusCode::UNAUTHORIZED,
                ErrorCode::Unauthorized,
                &e.to_string(),
            );
        }
    };
    let limits = match config.limits_for(&claims.sub, claims.plan.as_deref()) {
        Ok(l) => l,
        Err(e) => {
            let message = format!("{e}: the token's plan claim must name a plan in the config");
            return refuse(StatusCode::UNAUTHORIZED, ErrorCode::UnknownPlan, &message);
        }
    };

    if offered(&req).any(|p| p == SUBPROTOCOL) {
        response.insert_header((
            header::SEC_WEBSOCKET_PROTOCOL,
            HeaderValue::from_static(SUBPROTOCOL),
        ));
    }
    let conn = node.next_conn();
    let identity = Identity {
        conn,
        label: format!("{}-{conn:x}", config.node.id).into(),
        account: claims.sub.as_str().into(),
        role: claims.role.clone(),
        plan: claims.plan.clone(),
        grants: claims.grants(),
    };
    let body = Socket::start(identity, limits, node, payload.into_inner());
    match response.message_body(BoxBody::new(body)) {
        Ok(r) => r.into(),
        Err(e) => refusal(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::Internal,
            &e.to_string(),
            None,
        ),
    }
}
