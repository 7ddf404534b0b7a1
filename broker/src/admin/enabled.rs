//! Whether the admin routes exist on this node: without an admin key in
//! `[admin]` every one of them (the page and its assets included) answers
//! 404, as if it did not exist.

use actix_web::HttpResponse;
use actix_web::http::StatusCode;

use crate::node::Node;
use crate::protocol::ErrorCode;
use crate::refusal::refusal;

/// What every admin route answers while the routes are off.
pub(super) fn not_found() -> HttpResponse {
    refusal(
        StatusCode::NOT_FOUND,
        ErrorCode::NotFound,
        "no such endpoint",
        None,
    )
}

/// Whether the admin routes exist on this node (an admin key is set).
pub(super) fn enabled(node: &Node) -> bool {
    node.config.load().admin.admin.is_some()
}
