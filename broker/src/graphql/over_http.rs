//! `/v1/graphql` over HTTP (§12), after the *GraphQL over HTTP*
//! specification: `POST` with `application/json`, `GET` for queries,
//! answers in `application/json` or `application/graphql-response+json`
//! as the client accepts. Identify (from the request's head, before its
//! body is read), then the operation's way in [`super::operation`]:
//! price, consume, execute, refund, off the worker.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};

use super::caller::Caller;
use super::code::Code;
use super::operation::{Via, refused, run};
use super::reply::Media;
pub use super::request::MAX_DOCUMENT_BYTES;
pub(crate) use super::request::{MAX_TEXT_NESTING, text_nesting};
use super::request::{Refused, read_get, read_post};
use crate::node::Node;

pub async fn post(
    req: HttpRequest,
    payload: web::Payload,
    node: web::Data<Arc<Node>>,
) -> HttpResponse {
    serve(req, Some(payload), node.get_ref().clone()).await
}

pub async fn get(req: HttpRequest, node: web::Data<Arc<Node>>) -> HttpResponse {
    serve(req, None, node.get_ref().clone()).await
}

async fn serve(req: HttpRequest, payload: Option<web::Payload>, node: Arc<Node>) -> HttpResponse {
    let started = Instant::now();
    let Some(media) = Media::negotiate(req.headers().get("accept")) else {
        let r = Refused::status(
            StatusCode::NOT_ACCEPTABLE,
            Code::NotAcceptable,
            "accept application/graphql-response+json or application/json",
        );
        return refused(&node, None, Media::Json, r, None, 0)
            .await
            .into_response();
    };
    if node.is_draining() {
        let r = Refused::status(
            StatusCode::SERVICE_UNAVAILABLE,
            Code::Draining,
            "this node is draining for shutdown; retry on another node",
        );
        return refused(&node, None, media, r, Some(Duration::from_secs(1)), 0)
            .await
            .into_response();
    }
    let authorization = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok());
    let mut caller = match Caller::identify(&node, authorization) {
        Ok(c) => c,
        Err(e) => {
            let r = Refused::status(
                StatusCode::UNAUTHORIZED,
                Code::Unauthenticated,
                e.to_string(),
            );
            return refused(&node, None, media, r, None, 0)
                .await
                .into_response();
        }
    };
    let ip = crate::gate::request_ip(req.head(), &node.config.load().node.trusted_proxies);
    caller.origin = Some(super::caller::Origin {
        conn_id: format!("{}-{:x}", node.config.load().node.id, node.next_conn()).into(),
        ip,
        transport: "http",
    });
    if let Some(ban) = node.admin.bans.check(Some(&caller.account), Some(ip)) {
        let r = Refused::status(StatusCode::FORBIDDEN, Code::Banned, ban.message());
        return refused(&node, Some(&caller), media, r, Some(ban.remaining), 0)
            .await
            .into_response();
    }
    let via = if payload.is_none() {
        Via::Get
    } else {
        Via::Post
    };
    let params = match payload {
        Some(p) => read_post(&req, p, &node, &caller).await,
        None => read_get(&req),
    };
    let params = match params {
        Ok(p) => p,
        Err(r) => {
            return refused(&node, Some(&caller), media, r, None, 0)
                .await
                .into_response();
        }
    };
    let ran = run(&node, caller, media, params, via).await;
    node.metrics.graphql_done(ran.operation, started);
    ran.reply.into_response()
}
