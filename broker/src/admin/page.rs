//! `GET /admin`: the operator's page, compiled into the binary (no CDN, no
//! separate server). It is static: it asks for the key, keeps it in the
//! tab's `sessionStorage` only, and reads `/v1/admin/overview` with it.

use std::sync::Arc;

use actix_web::{HttpResponse, web};

use super::enabled::{enabled, not_found};
use crate::node::Node;

const INDEX: &str = include_str!("assets/index.html");
const SCRIPT: &str = include_str!("assets/admin.js");
const STYLE: &str = include_str!("assets/admin.css");

/// Same origin only; nothing from elsewhere, nothing inline.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
                   connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'; \
                   base-uri 'none'; form-action 'none'";

fn page(content_type: &str, body: &'static str) -> HttpResponse {
    HttpResponse::Ok()
        .content_type(content_type)
        .insert_header(("Content-Security-Policy", CSP))
        .insert_header(("X-Content-Type-Options", "nosniff"))
        .insert_header(("Referrer-Policy", "no-referrer"))
        .insert_header(("Cache-Control", "no-cache"))
        .body(body)
}

pub async fn index(node: web::Data<Arc<Node>>) -> HttpResponse {
    if !enabled(&node) {
        return not_found();
    }
    page("text/html; charset=utf-8", INDEX)
}

pub async fn asset(node: web::Data<Arc<Node>>, name: web::Path<String>) -> HttpResponse {
    if !enabled(&node) {
        return not_found();
    }
    match name.as_str() {
        "admin.js" => page("text/javascript; charset=utf-8", SCRIPT),
        "admin.css" => page("text/css; charset=utf-8", STYLE),
        _ => not_found(),
    }
}
