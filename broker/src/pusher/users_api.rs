//! The HTTP API's user endpoint (§16): `POST
//! /apps/{id}/users/{user_id}/terminate_connections`, what the `pusher`
//! library's `terminateUserConnections` sends, signed like the rest of
//! the API. Events to a user need nothing here: `events` to
//! `#server-to-user-{id}` publishes on that user's hub channel, which the
//! bridge fans out across the cluster like any other.

use std::sync::Arc;

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};

use super::names;
use super::presence::MAX_USER_ID;
use super::signed::read_signed;
use crate::cluster::{Action, Who};
use crate::exceeded::Exceeded;
use crate::metrics::Layer;
use crate::node::Node;
use crate::protocol::ErrorCode;
use crate::refusal::refusal;

/// Closes every connection signed in as the user to this app, on every
/// node, as an operator's disconnect (§10) closes an account's: 4100 on
/// this wire (pusher-js reconnects after a backoff; the app's backend is
/// expected to refuse that user's next sign-in). Answers `{}` as Pusher
/// does; this node's count is logged.
pub(super) async fn terminate(
    req: HttpRequest,
    payload: web::Payload,
    node: web::Data<Arc<Node>>,
) -> HttpResponse {
    let (app, _) = match read_signed(&req, payload, &node).await {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let user = req.match_info().get("user_id").unwrap_or("");
    if user.is_empty() || user.len() > MAX_USER_ID {
        Exceeded::new(Layer::Http, ErrorCode::BadRequest.as_str(), &app.account)
            .emit(&node.metrics);
        let why = format!("a user id is 1-{MAX_USER_ID} bytes");
        return refusal(StatusCode::BAD_REQUEST, ErrorCode::BadRequest, &why, None);
    }
    let who = Who::User {
        account: app.account.clone(),
        user: names::user_key(&app.id, user),
    };
    let closed = crate::node::operator::perform(&node, Action::Disconnect { who });
    tracing::info!(target: "tidegate::pusher", app = %app.id, user, closed, "terminate_connections");
    HttpResponse::Ok().json(serde_json::json!({}))
}
