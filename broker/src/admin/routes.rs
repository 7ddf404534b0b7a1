//! The admin routes: key checks, then the page, the overview and the
//! actions.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;

use super::enabled::enabled;
use super::{apps, overview, page};
use crate::bans::BanTarget;
use crate::clock::unix_ms;
use crate::cluster::{Action, Who};
use crate::gate::request_ip;
use crate::node::Node;
use crate::node::operator as actions;
use crate::protocol::ErrorCode;
use crate::refusal::{refusal, resource};

/// Failed key attempts per address: a burst of 10, then one every 6 s.
const FAILURE_BURST: f64 = 10.0;
const FAILURE_REFILL_PER_SEC: f64 = 1.0 / 6.0;
/// The longest ban (a year); longer is a mistake, not a ban.
const MAX_TTL_MS: u64 = 365 * 24 * 3600 * 1000;

/// The largest body of an action (`{"account":..,"ttlMs":..}` and the
/// like need far less): more is 413, and nothing past it is read.
const MAX_BODY_BYTES: usize = 4096;

pub fn routes(cfg: &mut web::ServiceConfig) {
    // Without an admin key the routes do not exist (the router's 404),
    // decided from the head: nothing of a body is read.
    let admin = |path: &str| resource(path).guard(actix_web::guard::fn_guard(exists));
    cfg.service(admin("/admin").route(web::get().to(page::index)))
        .service(admin("/admin/{asset}").route(web::get().to(page::asset)))
        .service(admin("/v1/admin/overview").route(web::get().to(overview_route)))
        .service(admin("/v1/admin/disconnect").route(web::post().to(disconnect)))
        .service(
            admin("/v1/admin/ban")
                .route(web::post().to(ban))
                .route(web::delete().to(unban)),
        );
}

/// The routes' guard: whether this node has an admin key now.
fn exists(ctx: &actix_web::guard::GuardContext<'_>) -> bool {
    ctx.app_data::<web::Data<Arc<Node>>>()
        .is_some_and(|node| enabled(node))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    Viewer,
    Admin,
}

impl Role {
    fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Admin => "admin",
        }
    }
}

/// Compares without stopping at the first differing byte.
fn same_key(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// A refused admin request (kept small: it is built on every wrong key).
pub(super) struct Denied {
    status: StatusCode,
    code: ErrorCode,
    message: &'static str,
    retry: Option<Duration>,
}

impl Denied {
    fn response(self) -> HttpResponse {
        refusal(self.status, self.code, self.message, self.retry)
    }
}

/// The caller's role, or the refusal: 404 without an admin key, 401 for a
/// wrong key (429 once the address has spent its failures: the right key
/// still works), 403 for a viewer where an admin is needed.
fn authorize(
    req: &HttpRequest,
    node: &Node,
    need: Role,
    action: &'static str,
) -> Result<(Role, IpAddr), Denied> {
    let config = node.config.load();
    let Some(admin_key) = config.admin.admin.as_deref() else {
        return Err(Denied {
            status: StatusCode::NOT_FOUND,
            code: ErrorCode::NotFound,
            message: "no such endpoint",
            retry: None,
        });
    };
    let ip = request_ip(req.head(), &config.node.trusted_proxies);
    // Failures count per address (an IPv6 client's network).
    let key = crate::gate::ip_key(ip, config.handshake.ipv6_prefix_len);
    let now = Instant::now();
    // The key is checked first: failures from an address (a shared NAT's)
    // slow down wrong keys only, never lock the real key out.
    let given = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(crate::admission::bearer)
        .unwrap_or("");
    let role = if same_key(given, admin_key) {
        Role::Admin
    } else if config
        .admin
        .viewer
        .as_deref()
        .is_some_and(|v| same_key(given, v))
    {
        Role::Viewer
    } else {
        if node.admin.failures.remaining(&key, FAILURE_BURST, now) < 1.0 {
            node.metrics.admin_action(action, "rate_limited");
            return Err(Denied {
                status: StatusCode::TOO_MANY_REQUESTS,
                code: ErrorCode::RateLimited,
                message: "too many failed admin key attempts from this address",
                retry: Some(Duration::from_secs_f64(1.0 / FAILURE_REFILL_PER_SEC)),
            });
        }
        let _ = node
            .admin
            .failures
            .try_take(&key, 1.0, FAILURE_BURST, FAILURE_REFILL_PER_SEC, now);
        node.metrics.admin_action(action, "unauthorized");
        tracing::warn!(target: "tidegate::admin", action, %ip, "admin request with a wrong key");
        return Err(Denied {
            status: StatusCode::UNAUTHORIZED,
            code: ErrorCode::Unauthorized,
            message: "send `Authorization: Bearer <admin key>` with the key from [admin]",
            retry: None,
        });
    };
    if need == Role::Admin && role == Role::Viewer {
        node.metrics.admin_action(action, "forbidden");
        return Err(Denied {
            status: StatusCode::FORBIDDEN,
            code: ErrorCode::Forbidden,
            message: "the viewer key reads the overview; actions need the admin key",
            retry: None,
        });
    }
    Ok((role, ip))
}

fn bad_request(node: &Node, action: &'static str, message: &str) -> HttpResponse {
    node.metrics.admin_action(action, "bad_request");
    refusal(
        StatusCode::BAD_REQUEST,
        ErrorCode::BadRequest,
        message,
        None,
    )
}

async fn overview_route(req: HttpRequest, node: web::Data<Arc<Node>>) -> HttpResponse {
    let (role, _) = match authorize(&req, &node, Role::Viewer, "overview") {
        Ok(r) => r,
        Err(denied) => return denied.response(),
    };
    let me = overview::node_stats(&node);
    let mut others = Vec::new();
    let mut cluster_wide = true;
    if let Some(store) = node.bridge.admin_store() {
        match store.stats().await {
            Ok(all) => {
                others = all
                    .iter()
                    .filter_map(|json| serde_json::from_str::<overview::NodeStats>(json).ok())
                    .collect();
                // This node's fresh summary replaces the one it published.
                others.retain(|s| s.id != me.id);
            }
            Err(_) => cluster_wide = false,
        }
    } else if node.config.load().cluster.mode.uses_redis() {
        cluster_wide = false;
    }
    let bans = node.admin.bans.list();
    let mut answer = overview::merge(me, others, cluster_wide, bans, role.as_str());
    answer.webhooks = overview::webhooks(&node);
    apps::attach_webhooks(&node, &mut answer.pusher_apps, &answer.webhooks);
    HttpResponse::Ok()
        .insert_header(("Cache-Control", "no-store"))
        .json(answer)
}

/// `{"account":..}`, `{"connId":..}` or `{"ip":..}`, and for a ban `ttlMs`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Body {
    account: Option<String>,
    conn_id: Option<String>,
    ip: Option<String>,
    ttl_ms: Option<u64>,
}

fn parse_body(bytes: &[u8]) -> Result<Body, String> {
    serde_json::from_slice(bytes).map_err(|e| format!("the body must be a JSON object: {e}"))
}

/// An action's body, read only once the key was accepted: at most
/// [`MAX_BODY_BYTES`] (413 past it, without reading on).
async fn read_body(
    node: &Node,
    action: &'static str,
    mut payload: web::Payload,
) -> Result<web::BytesMut, HttpResponse> {
    use futures_util::StreamExt;
    let mut body = web::BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|e| bad_request(node, action, &e.to_string()))?;
        if body.len() + chunk.len() > MAX_BODY_BYTES {
            node.metrics.admin_action(action, "payload_too_large");
            return Err(refusal(
                StatusCode::PAYLOAD_TOO_LARGE,
                ErrorCode::PayloadTooLarge,
                &format!("an admin action's body is at most {MAX_BODY_BYTES} bytes"),
                None,
            ));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

fn ban_target(body: &Body) -> Result<BanTarget, String> {
    if body.conn_id.is_some() {
        return Err("a ban names an `account` or an `ip`, not a `connId`".into());
    }
    match (&body.account, &body.ip) {
        (Some(a), None) if !a.is_empty() && a.len() <= 256 => Ok(BanTarget::Account(a.clone())),
        (None, Some(ip)) => ip
            .parse()
            .map(BanTarget::Ip)
            .map_err(|_| format!("`ip`: {ip:?} is not an IP address")),
        _ => Err("give exactly one of `account` (1-256 bytes) and `ip`".into()),
    }
}

fn logged(action: &'static str, role_ip: IpAddr, what: &str, closed: usize, extra: Option<u64>) {
    tracing::info!(
        target: "tidegate::admin",
        action,
        target_of = what,
        by = %role_ip,
        closed,
        ttl_ms = extra,
        "operator action"
    );
}

async fn disconnect(
    req: HttpRequest,
    payload: web::Payload,
    node: web::Data<Arc<Node>>,
) -> HttpResponse {
    const ACTION: &str = "disconnect";
    let (_, by) = match authorize(&req, &node, Role::Admin, ACTION) {
        Ok(r) => r,
        Err(denied) => return denied.response(),
    };
    let body = match read_body(&node, ACTION, payload).await {
        Ok(b) => b,
        Err(refused) => return refused,
    };
    let body = match parse_body(&body) {
        Ok(b) => b,
        Err(m) => return bad_request(&node, ACTION, &m),
    };
    let who = match (&body.account, &body.conn_id, &body.ip, body.ttl_ms) {
        (Some(a), None, None, None) if !a.is_empty() => Who::Account(a.clone()),
        (None, Some(c), None, None) if !c.is_empty() => Who::ConnId(c.clone()),
        _ => {
            return bad_request(
                &node,
                ACTION,
                "give exactly one of `account` and `connId` (and no `ttlMs`: that is a ban)",
            );
        }
    };
    let closed = actions::perform(&node, Action::Disconnect { who: who.clone() });
    node.metrics.admin_action(ACTION, "ok");
    logged(ACTION, by, &format!("{who:?}"), closed, None);
    HttpResponse::Ok().json(serde_json::json!({ "closed": closed }))
}

/// The checks a ban and an unban share: the admin key (before any of the
/// body is read), a JSON body, one target. The refusal is boxed: it is
/// the rare path.
async fn ban_request(
    req: &HttpRequest,
    payload: web::Payload,
    node: &Node,
    action: &'static str,
) -> Result<(IpAddr, Body, BanTarget), Box<HttpResponse>> {
    let (_, by) = authorize(req, node, Role::Admin, action).map_err(|d| Box::new(d.response()))?;
    let body = read_body(node, action, payload).await.map_err(Box::new)?;
    let body = parse_body(&body).map_err(|m| Box::new(bad_request(node, action, &m)))?;
    let target = ban_target(&body).map_err(|m| Box::new(bad_request(node, action, &m)))?;
    Ok((by, body, target))
}

async fn ban(req: HttpRequest, payload: web::Payload, node: web::Data<Arc<Node>>) -> HttpResponse {
    const ACTION: &str = "ban";
    let (by, body, target) = match ban_request(&req, payload, &node, ACTION).await {
        Ok(r) => r,
        Err(refused) => return *refused,
    };
    let ttl_ms = match body.ttl_ms {
        Some(t) if (1..=MAX_TTL_MS).contains(&t) => t,
        _ => {
            return bad_request(
                &node,
                ACTION,
                &format!("`ttlMs` is required: 1 to {MAX_TTL_MS} milliseconds"),
            );
        }
    };
    let expires_at = unix_ms() + ttl_ms;
    let closed = actions::perform(
        &node,
        Action::Ban {
            target: target.clone(),
            expires_at,
        },
    );
    node.metrics.admin_action(ACTION, "ok");
    logged(ACTION, by, &target.to_string(), closed, Some(ttl_ms));
    let mut answer = serde_json::to_value(&target).expect("targets serialise");
    answer["expiresAt"] = expires_at.into();
    answer["ttlMs"] = ttl_ms.into();
    answer["closed"] = closed.into();
    HttpResponse::Ok().json(answer)
}

async fn unban(
    req: HttpRequest,
    payload: web::Payload,
    node: web::Data<Arc<Node>>,
) -> HttpResponse {
    const ACTION: &str = "unban";
    let (by, _, target) = match ban_request(&req, payload, &node, ACTION).await {
        Ok(r) => r,
        Err(refused) => return *refused,
    };
    let was_banned = node.admin.bans.check(
        match &target {
            BanTarget::Account(a) => Some(a.as_str()),
            BanTarget::Ip(_) => None,
        },
        match &target {
            BanTarget::Ip(ip) => Some(*ip),
            BanTarget::Account(_) => None,
        },
    );
    actions::perform(
        &node,
        Action::Unban {
            target: target.clone(),
        },
    );
    node.metrics.admin_action(ACTION, "ok");
    logged(ACTION, by, &target.to_string(), 0, None);
    let mut answer = serde_json::to_value(&target).expect("targets serialise");
    answer["lifted"] = was_banned.is_some().into();
    HttpResponse::Ok().json(answer)
}
