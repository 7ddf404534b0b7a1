//! A request to Pusher's HTTP API before anything is charged: its body
//! (bounded by `http.max_batch_bytes`, read first because the signature
//! covers its MD5), the app whose secret signed it, an operator's ban of
//! that app's account (§10), and the refusals of those steps in
//! Tidegate's JSON body, counted once.

use std::sync::Arc;

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;

use super::{app_by_id, auth};
use crate::config::PusherApp;
use crate::exceeded::Exceeded;
use crate::metrics::Layer;
use crate::node::Node;
use crate::protocol::ErrorCode;
use crate::refusal::refusal;

/// A refusal in Tidegate's words (§1's body), counted once.
pub(super) fn refuse(
    node: &Node,
    account: &str,
    status: StatusCode,
    code: ErrorCode,
    why: &str,
) -> HttpResponse {
    Exceeded::new(Layer::Http, code.as_str(), account).emit(&node.metrics);
    refusal(status, code, why, None)
}

pub(super) fn bad(node: &Node, app: &PusherApp, why: &str) -> HttpResponse {
    refuse(
        node,
        &app.account,
        StatusCode::BAD_REQUEST,
        ErrorCode::BadRequest,
        why,
    )
}

/// The app, its signature checked over the request and `body`.
pub(super) fn signed(
    req: &HttpRequest,
    node: &Node,
    body: &[u8],
) -> Result<Arc<PusherApp>, Box<HttpResponse>> {
    let id = req.match_info().get("id").unwrap_or("");
    let unauthorized = |why: &str| {
        Err(Box::new(refuse(
            node,
            "",
            StatusCode::UNAUTHORIZED,
            ErrorCode::Unauthorized,
            why,
        )))
    };
    let Some(app) = app_by_id(node, id) else {
        return unauthorized(&format!("unknown app {id:?}"));
    };
    let check = auth::Request {
        method: req.method().as_str(),
        path: req.path(),
        query: req.query_string(),
        body,
        now_secs: crate::clock::unix_ms() / 1000,
    };
    match auth::verify(&app.key, &app.secret, &check) {
        Ok(()) => Ok(app),
        Err(why) => unauthorized(&why.to_string()),
    }
}

/// Reads at most `limit` bytes of body; more is a 413.
pub(super) async fn read_body(
    mut payload: web::Payload,
    limit: usize,
) -> Result<Bytes, (StatusCode, String)> {
    let mut buf = BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|e| (StatusCode::BAD_REQUEST, e.to_string()))?;
        if buf.len() + chunk.len() > limit {
            return Err((
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("request body is larger than {limit} bytes"),
            ));
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}

/// The body (at most `http.max_batch_bytes`) and the app that signed it.
pub(super) async fn read_signed(
    req: &HttpRequest,
    payload: web::Payload,
    node: &Node,
) -> Result<(Arc<PusherApp>, Bytes), Box<HttpResponse>> {
    let limit = node.config.load().http.max_batch_bytes;
    let body = read_body(payload, limit).await.map_err(|(status, why)| {
        let code = if status == StatusCode::PAYLOAD_TOO_LARGE {
            ErrorCode::PayloadTooLarge
        } else {
            ErrorCode::BadRequest
        };
        Box::new(refuse(node, "", status, code, &why))
    })?;
    let app = signed(req, node, &body)?;
    Ok((app, body))
}

/// 403 `banned` for a trigger of an app whose account (or the caller's
/// address) an operator banned (§10: bans refuse HTTP publishes too),
/// with `Retry-After` = the ban's remaining time.
pub(super) fn banned(req: &HttpRequest, node: &Node, app: &PusherApp) -> Option<HttpResponse> {
    let ip = crate::gate::request_ip(req.head(), &node.config.load().node.trusted_proxies);
    let ban = node.admin.bans.check(Some(&app.account), Some(ip))?;
    Some(ban.http_refusal(&app.account, &node.metrics))
}
