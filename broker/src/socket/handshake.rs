//! `GET /v1/ws`: the checks that run before the upgrade (§1), cheapest
//! first, each costing one HTTP response and no socket; then the upgrade.
//! Every layer charges every attempt that reaches it.
//!
//! Upgrade requests come here from actix-http's upgrade hook with the
//! connection itself (`server.rs`), not through the app's router: the
//! socket then owns the TCP stream (`socket/transport.rs`). A refusal is
//! written as an HTTP response on that stream, which then closes.

use std::io;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_codec::{AsyncRead, AsyncWrite, Framed, FramedParts};
use actix_http::body::{BodySize, MessageBody};
use actix_http::{ConnectionType, Method, Request, RequestHead, h1};
use actix_web::HttpResponse;
use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderValue};
use futures_util::SinkExt;

mod dialect;
mod hooked;
mod who;

pub use hooked::origin_allowed;

use super::{Identity, Slots, Socket};
use crate::admission::{TokenTimes, Who};
use crate::config::{Config, Limits};
use crate::dialect::Route;
use crate::exceeded::Exceeded;
use crate::gate::IpSlot;
use crate::metrics::Layer;
use crate::node::Node;
use crate::protocol::ErrorCode;
use crate::refusal::refusal;
use dialect::admit_dialect;
pub(super) use dialect::admit_later;
use who::admit_who;

/// The subprotocol Tidegate speaks.
pub const SUBPROTOCOL: &str = "tidegate.v1";
const BEARER_PREFIX: &str = "bearer.";
/// `Retry-After` for a draining node (§7).
const DRAINING_RETRY: Duration = Duration::from_secs(1);

/// The offered subprotocols, comma-separated over one or more headers.
fn offered(req: &RequestHead) -> impl Iterator<Item = &str> {
    req.headers()
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
}

/// The token from `bearer.<token>` or `Authorization: Bearer <token>`.
fn bearer_token(req: &RequestHead) -> Option<&str> {
    offered(req)
        .find_map(|p| p.strip_prefix(BEARER_PREFIX))
        .or_else(|| {
            crate::admission::bearer(req.headers().get(header::AUTHORIZATION)?.to_str().ok()?)
        })
        .filter(|t| !t.is_empty())
}

/// A refused handshake.
pub(super) struct Refused {
    pub(super) status: StatusCode,
    pub(super) code: ErrorCode,
    pub(super) message: String,
    pub(super) retry: Option<Duration>,
    /// A backend hook's own code, said instead of `code` (§15).
    pub(super) custom: Option<String>,
}

fn refused(
    status: StatusCode,
    code: ErrorCode,
    message: impl Into<String>,
    retry: Option<Duration>,
) -> Refused {
    Refused {
        status,
        code,
        message: message.into(),
        retry,
        custom: None,
    }
}

/// Everything the checks established, handed to the socket.
pub(super) struct Admitted {
    pub(super) identity: Identity,
    pub(super) limits: Arc<Limits>,
    pub(super) slots: Slots,
}

/// The peer's place, from the §1 layers before the credential.
struct Peer {
    ip: IpAddr,
    slot: IpSlot,
}

/// The §1 layers before the credential, in order: draining, the node's
/// descriptor headroom, the address's handshake rate and open-socket cap,
/// then the node's accept budget (most specific first: issue 26). Emits
/// one exceeded event per refusal.
fn admit_peer(req: &RequestHead, node: &Node, config: &Config) -> Result<Peer, Refused> {
    let now = Instant::now();
    let hs = &config.handshake;
    let ip = crate::gate::request_ip(req, &config.node.trusted_proxies);
    let ip_text = ip.to_string();
    let event = |reason: ErrorCode, reset: Duration| {
        Exceeded::new(Layer::Handshake, reason.as_str(), "")
            .reset(reset)
            .emit(&node.metrics);
    };

    if node.is_draining() {
        event(ErrorCode::Draining, DRAINING_RETRY);
        return Err(refused(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::Draining,
            "this node is shutting down; reconnect to another",
            Some(DRAINING_RETRY),
        ));
    }
    // Near the descriptor limit: refuse while there is still a descriptor
    // to answer with (a cap frees up when a socket closes).
    if node.sockets.len() >= node.fd_socket_cap {
        let wait = Duration::from_millis(hs.cap_retry_after_ms);
        event(ErrorCode::NodeOverloaded, wait);
        return Err(refused(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::NodeOverloaded,
            format!(
                "this node holds {} sockets, all its file-descriptor limit allows; reconnect later or to another node",
                node.fd_socket_cap
            ),
            Some(wait),
        ));
    }
    if let Err(wait) = node.gate.ip_rate(ip, hs, now) {
        Exceeded::new(Layer::Handshake, ErrorCode::IpRateLimited.as_str(), "")
            .conn(&ip_text)
            .reset(wait)
            .emit(&node.metrics);
        return Err(refused(
            StatusCode::TOO_MANY_REQUESTS,
            ErrorCode::IpRateLimited,
            format!("too many handshakes from {ip}"),
            Some(wait),
        ));
    }
    let cap_retry = Duration::from_millis(hs.cap_retry_after_ms);
    let Some(slot) = node.gate.ip_open(ip, hs) else {
        Exceeded::new(
            Layer::Handshake,
            ErrorCode::IpTooManyConnections.as_str(),
            "",
        )
        .conn(&ip_text)
        .emit(&node.metrics);
        return Err(refused(
            StatusCode::TOO_MANY_REQUESTS,
            ErrorCode::IpTooManyConnections,
            format!("{ip} has {} sockets open already", hs.ip_max_open),
            Some(cap_retry),
        ));
    };
    // The shared budget last: an address past its own limits never
    // spends it, so one address cannot get every other one refused.
    if let Err(wait) = node.gate.node_accept(hs, now) {
        event(ErrorCode::NodeOverloaded, wait);
        return Err(refused(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::NodeOverloaded,
            format!(
                "this node takes {} handshakes per second",
                hs.node_accepts_per_sec
            ),
            Some(wait),
        ));
    }
    Ok(Peer { ip, slot })
}

/// Runs the §1 checks in order with `token` (the upgrade's, or an SSE
/// stream's). Emits one exceeded event per refusal.
///
/// Without a token, the connect hook (§15) names the identity, if one is
/// configured (`transport` is what the hook is told).
pub(super) async fn admit(
    req: &RequestHead,
    token: Option<&str>,
    node: &Arc<Node>,
    config: &Config,
    transport: &'static str,
) -> Result<Admitted, Refused> {
    let Peer { ip, slot: ip_slot } = admit_peer(req, node, config)?;
    let event = |reason: ErrorCode, account: &str| {
        Exceeded::new(Layer::Handshake, reason.as_str(), account).emit(&node.metrics);
    };
    let Some(token) = token else {
        return hooked::admit_by_hook(req, node, config, ip, ip_slot, transport).await;
    };
    let auth = node.auth.load();
    let claims = auth.verify(token).map_err(|e| {
        event(ErrorCode::Unauthorized, "");
        refused(
            StatusCode::UNAUTHORIZED,
            ErrorCode::Unauthorized,
            e.to_string(),
            None,
        )
    })?;
    let limits = config
        .limits_for(&claims.sub, claims.plan.as_deref())
        .map_err(|e| {
            event(ErrorCode::UnknownPlan, &claims.sub);
            refused(
                StatusCode::UNAUTHORIZED,
                ErrorCode::UnknownPlan,
                format!("{e}: the token's plan claim must name a plan in the config"),
                None,
            )
        })?;
    let who = Who {
        account: claims.sub.clone(),
        plan: claims.plan.clone(),
        role: claims.role.clone(),
        limits,
        grants: claims.grants(),
        token: Some(TokenTimes {
            expires_at_ms: claims.expires_at_ms(),
            deadline: auth.deadline(&claims),
        }),
        info: claims.info_json(),
    };
    let conn = node.next_conn();
    let account = admit_who(node, config, ip, &who, conn).await?;
    Ok(Admitted {
        limits: who.limits.clone(),
        identity: identity(config, conn, ip, who),
        slots: Slots {
            ip: Some(ip_slot),
            account,
        },
    })
}

/// What the socket knows of `who` on connection `conn`.
pub(super) fn identity(config: &Config, conn: u64, ip: IpAddr, who: Who) -> Identity {
    let (token_expires_at, deadline) = who
        .token
        .map_or((0, NO_DEADLINE), |t| (t.expires_at_ms, t.deadline));
    Identity {
        conn,
        label: format!("{}-{conn:x}", config.node.id).into(),
        account: who.account.as_str().into(),
        ip,
        role: who.role,
        plan: who.plan,
        grants: who.grants,
        token_expires_at,
        deadline,
        info: who.info,
        server_channels: Vec::new(),
        hook_life_ms: None,
    }
}

/// The path WebSockets are served on.
pub const PATH: &str = "/v1/ws";

/// `Identity::deadline` of a connection no token limits (yet).
const NO_DEADLINE: u64 = u64::MAX;

/// A dialect route's refusal as its route words it.
type RefusalBody = fn(StatusCode, ErrorCode, &str, Option<Duration>) -> HttpResponse;

/// An upgrade request, with its connection: the handshake, then, once
/// accepted, the socket, started on this worker with the connection.
/// `/v1/ws` speaks `tidegate.v1`; each of `routes` its own
/// [`Dialect`](crate::dialect::Dialect), whose credential the socket
/// checks later ([`Link::admit`](crate::dialect::Link::admit)).
pub async fn upgrade<T>(
    node: Arc<Node>,
    req: Request,
    mut framed: Framed<T, h1::Codec>,
    routes: &[Route],
) -> io::Result<()>
where
    T: AsyncRead + AsyncWrite + Unpin + 'static,
{
    // The head is whole: no longer an unfinished connection, and never
    // one again (it becomes a socket, or closes with the refusal).
    if let Some(u) = req.conn_data::<crate::unfinished::Unfinished>() {
        u.off();
    }
    let route = routes
        .iter()
        .find(|r| r.path == req.path() || (r.prefix && req.path().starts_with(r.path)))
        .copied();
    if req.path() != PATH && route.is_none() {
        return refuse(framed, crate::refusal::not_found()).await;
    }
    if req.method() != Method::GET {
        return refuse(framed, crate::refusal::method_not_allowed()).await;
    }
    let started = Instant::now();
    let config = node.config.load_full();
    // Not a WebSocket handshake at all: nothing to charge.
    let mut response = match actix_http::ws::handshake(req.head()) {
        Ok(r) => r,
        Err(e) => return refuse(framed, not_websocket(&node, &e, started)).await,
    };
    let (admitted, words, dialect): (_, RefusalBody, _) = match route {
        None => (
            admit(
                req.head(),
                bearer_token(req.head()),
                &node,
                &config,
                "websocket",
            )
            .await,
            refusal,
            None,
        ),
        Some(r) => (
            admit_dialect(req.head(), &node, &config, r).await,
            r.refusal,
            Some(r),
        ),
    };
    let admitted = match admitted {
        Ok(a) => a,
        Err(r) => {
            node.metrics.handshake_done("refused", started);
            let response = match dialect {
                None => r.response(),
                Some(_) => words(r.status, r.code, &r.message, r.retry),
            };
            return refuse(framed, response).await;
        }
    };
    node.metrics.handshake_done("accepted", started);
    let subprotocol = dialect.map_or(Some(SUBPROTOCOL), |r| r.subprotocol);
    if let Some(subprotocol) = subprotocol
        && offered(req.head()).any(|p| p == subprotocol)
    {
        response.insert_header((
            header::SEC_WEBSOCKET_PROTOCOL,
            HeaderValue::from_static(subprotocol),
        ));
    }
    let dialect = dialect.map(|r| (r.open)(&node, req.head()));
    let head = response.finish().drop_body();
    if let Err(e) = framed.send(h1::Message::Item((head, BodySize::None))).await {
        // Gone before the answer: the places the checks took go back with
        // `admitted` (the socket never started).
        return Err(io::Error::other(e));
    }
    // The socket runs as its own task holding only the TCP stream: the
    // request, the codec and the dispatcher's buffers are freed now.
    let FramedParts { io, read_buf, .. } = framed.into_parts();
    let transport = Socket::start(
        admitted.identity,
        admitted.limits,
        admitted.slots,
        node,
        dialect,
        io,
        &read_buf,
    );
    actix_rt::spawn(transport);
    Ok(())
}

/// `GET /v1/ws` without the upgrade headers, through the router.
pub async fn not_upgraded(
    req: actix_web::HttpRequest,
    node: actix_web::web::Data<Arc<Node>>,
) -> HttpResponse {
    let started = Instant::now();
    match actix_http::ws::handshake(req.head()) {
        Err(e) => not_websocket(&node, &e, started),
        // Upgrade requests never reach the router.
        Ok(_) => not_websocket(&node, &"the upgrade did not reach the handshake", started),
    }
}

fn not_websocket(node: &Node, e: &dyn std::fmt::Display, started: Instant) -> HttpResponse {
    Exceeded::new(Layer::Handshake, ErrorCode::BadRequest.as_str(), "").emit(&node.metrics);
    node.metrics.handshake_done("refused", started);
    refusal(
        StatusCode::BAD_REQUEST,
        ErrorCode::BadRequest,
        &format!("not a WebSocket upgrade: {e}"),
        None,
    )
}

/// Writes a refused handshake's response, then closes the connection.
pub(super) async fn refuse<T>(
    mut framed: Framed<T, h1::Codec>,
    response: HttpResponse,
) -> io::Result<()>
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    let (mut head, body) = actix_http::Response::from(response).into_parts();
    head.head_mut().set_connection_type(ConnectionType::Close);
    let body = body.try_into_bytes().unwrap_or_default();
    let size = BodySize::Sized(body.len() as u64);
    let sent = async {
        framed.feed(h1::Message::Item((head, size))).await?;
        if !body.is_empty() {
            framed.feed(h1::Message::Chunk(Some(body))).await?;
        }
        framed.feed(h1::Message::Chunk(None)).await?;
        // actix-codec's `close` shuts the stream without writing what
        // `feed` buffered.
        framed.flush().await?;
        framed.close().await
    };
    sent.await.map_err(io::Error::other)
}
