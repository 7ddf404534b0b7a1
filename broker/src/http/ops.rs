//! `/healthz`, `/readyz`, `/metrics` (§6).

use std::sync::Arc;

use actix_web::{HttpResponse, web};

use crate::node::Node;

/// Live: the process answers.
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().content_type("text/plain").body("ok\n")
}

/// Ready: 503 while starting or draining. A node whose cluster bridge is
/// down still serves its own clients, so it stays ready (§6).
pub async fn readyz(node: web::Data<Arc<Node>>) -> HttpResponse {
    if node.is_draining() {
        HttpResponse::ServiceUnavailable()
            .content_type("text/plain")
            .body("draining\n")
    } else if node.is_ready() {
        HttpResponse::Ok()
            .content_type("text/plain")
            .body("ready\n")
    } else {
        HttpResponse::ServiceUnavailable()
            .content_type("text/plain")
            .body("starting\n")
    }
}

pub async fn metrics(node: web::Data<Arc<Node>>) -> HttpResponse {
    node.metrics
        .outbound_queued
        .set(node.outbound_queued() as i64);
    node.metrics.channels.set(node.hub.channel_count() as i64);
    if let Some(handle) = node.webhooks.runtime_handle() {
        node.metrics.alive.runtime("webhooks", handle, false);
    }
    HttpResponse::Ok()
        .content_type("application/openmetrics-text; version=1.0.0; charset=utf-8")
        .body(node.metrics.encode())
}
