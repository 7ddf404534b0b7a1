//! `GET /v1/sse` (PROTOCOL.md §14): a one-way stream of the same messages
//! as a socket, for clients that cannot keep a WebSocket (a proxy that
//! breaks upgrades, a page with only `EventSource`).
//!
//! It is another transport of the socket machinery, not a front of its
//! own: the §1 layers in their order (`handshake::admit`, the token from
//! `Authorization` or the query string), then the same actor with its
//! bucket, outbound mark and grace, conflation, drain, operators' closes
//! and token expiry, counted as a connection (account cap, per-IP cap,
//! the node's registry). Only the writer differs: SSE events (`render.rs`)
//! instead of WebSocket frames. A stream that is the first request of a
//! plain TCP connection takes the connection whole, as an upgraded socket
//! does (`tcp.rs`: the socket's transport with `feed.rs`); any other (TLS,
//! a keep-alive connection's later request) is an actix-web streaming
//! body (`body.rs`). The query string carries the token, so nothing here
//! logs it (nor the request's URI).

mod body;
mod feed;
mod hooked;
mod memo;
mod refused;
mod render;
mod tcp;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use actix_http::RequestHead;
use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpRequest, HttpResponse, HttpResponseBuilder, web};
use bytes::Bytes;

use super::Socket;
use super::actor::Stream;
use super::handshake::{self, Admitted};
use crate::admission::{Cap, subscription_cap};
use crate::charge;
use crate::metrics::Layer;
use crate::node::Node;
use crate::protocol::position::{self, Position};
use crate::protocol::{ErrorCode, channel};
use body::Body;
pub(super) use body::Ender;
use refused::{Refusal, refuse_paid};
use render::Render;
pub use tcp::Taker;

/// The path streams are served on.
pub const PATH: &str = "/v1/sse";

/// The `retry:` range (§14): jittered per stream, so that the reconnects
/// after a drain do not land together.
const RETRY_MS: std::ops::RangeInclusive<u64> = 1_000..=5_000;

/// What the request asks for, read once the request is admitted.
struct Ask {
    channels: Vec<String>,
    position: Position,
}

/// The request's credential: the `Authorization` header's bearer token,
/// else the query string's (last) `token`. Nothing else of the query is
/// read or decoded before the §1 layers ran (issue 38: a query string
/// costs its parse only to an admitted caller).
fn credential(req: &RequestHead) -> Option<String> {
    let bearer = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(crate::admission::bearer)
        .map(str::to_owned);
    bearer
        .or_else(|| query_token(req.uri.query().unwrap_or_default()))
        .filter(|t| !t.is_empty())
}

/// The query's last `token`, in one pass: only a pair whose key can be
/// `token` (itself, or percent-encoded) is decoded.
fn query_token(query: &str) -> Option<String> {
    const KEY: &str = "token";
    let mut token = None;
    for pair in query.split('&') {
        let key = pair.split('=').next().unwrap_or_default();
        let maybe = key == KEY || (key.contains('%') && key.len() <= 3 * KEY.len());
        if !maybe {
            continue;
        }
        if let Ok(q) = web::Query::<Vec<(String, String)>>::from_query(pair)
            && let Some((k, v)) = q.into_inner().pop()
            && k == KEY
        {
            token = Some(v);
        }
    }
    token
}

/// Why the query cannot open a stream.
enum Unfit {
    /// More channels than `max_subscriptions` (the limit not in dry run):
    /// `too_many_subscriptions`, whatever else the query holds.
    TooMany { max: usize },
    /// The `bad_request` message.
    Bad(String),
}

/// Reads the query string's channels and the position (`Last-Event-ID`,
/// else `lastEventId`). Linear in the query, and the channels kept are
/// capped: the subscription cap is checked first, as each channel is
/// read (one past `max_subscriptions` is [`Unfit::TooMany`], before
/// anything about the position, as the same subscribes on `/v1/ws` would
/// be refused), then by what a position can hold
/// ([`position::MAX_CHANNELS`], 510 whatever the names' length), checked
/// at the end under the cap and at once when the cap is in dry run, so a
/// query of thousands of channels stops at the first one past either.
/// The position is read last, for the channels as kept (in order, repeats
/// dropped): its compact form is tied to that list.
fn ask(req: &RequestHead, limits: &crate::config::Limits) -> Result<Ask, Unfit> {
    let query = req.uri.query().unwrap_or_default();
    let pairs = web::Query::<Vec<(String, String)>>::from_query(query)
        .map_err(|_| Unfit::Bad("the query string is not form-encoded".to_owned()))?
        .into_inner();
    let too_many = || {
        Unfit::Bad(format!(
            "a stream's position holds at most {} channels",
            position::MAX_CHANNELS
        ))
    };
    // A cap in dry run bounds nothing: the position's room does, at once.
    let capped = !subscription_cap(limits, usize::MAX).is_dry_run();
    let mut channels: Vec<String> = Vec::new();
    // The channels named so far: bounded like `channels`.
    let mut named: HashSet<&str> = HashSet::new();
    let mut last_event_id = None;
    for (key, value) in &pairs {
        match key.as_str() {
            "channel" => {
                if named.contains(value.as_str()) {
                    continue;
                }
                if let Cap::Refused { max } = subscription_cap(limits, channels.len() + 1) {
                    return Err(Unfit::TooMany { max });
                }
                channel::validate(value)
                    .map_err(|why| Unfit::Bad(format!("channel {value:?}: {why}")))?;
                // Under the cap, reading goes on to the cap's end: the
                // cap's answer comes before the position's.
                if channels.len() >= position::MAX_CHANNELS && !capped {
                    return Err(too_many());
                }
                named.insert(value);
                channels.push(value.clone());
            }
            "lastEventId" => last_event_id = Some(value.as_str()),
            _ => {}
        }
    }
    if channels.len() > position::MAX_CHANNELS {
        return Err(too_many());
    }
    // The header wins over the query parameter.
    let bad_header = || Unfit::Bad("Last-Event-ID is not a position this broker wrote".to_owned());
    let header = req
        .headers()
        .get("last-event-id")
        .map(HeaderValue::to_str)
        .transpose()
        .map_err(|_| bad_header())?;
    let token = header.or(last_event_id).unwrap_or_default();
    let position = Position::resume(&channels, token)
        .map_err(|e| Unfit::Bad(format!("Last-Event-ID: {e}")))?;
    Ok(Ask { channels, position })
}

/// What the stream's channels cost: each as a socket's `subscribe` frame
/// of it would ([`charge::subscribe::price`]: `subscribe`, plus `recovery`
/// for a channel the position names), so a channel over `max_single` is
/// refused `cost_exceeds_max` (422, free, as on every front; counted and let
/// through when that limit is in dry run). The sum is not held to what
/// the stream's fresh bucket holds: a stream is one request that cannot
/// resend a refused frame, so the actor takes it even below zero
/// ([`crate::charge::Price::owed`]) and samples it into the account
/// budget, whose refusal closes the account's connections as on `/v1/ws`.
/// It is bounded all the same: at most `max_subscriptions` channels of at
/// most `max_single` each.
fn price(
    limits: &crate::config::Limits,
    start: &[(String, Option<u64>)],
    account: &str,
    node: &Node,
) -> Result<u32, charge::Refusal> {
    let mut units = 0u32;
    for (channel, since) in start {
        let counted = (Layer::Handshake, account, &*node.metrics);
        let one = charge::subscribe::price_counted(limits, channel, since.is_some(), counted)?;
        units = units.saturating_add(one);
    }
    Ok(units)
}

/// The first channel of `ask` the token may not subscribe to and no hook
/// decides (§15: a deciding hook replaces the token's globs), as the 403.
fn forbidden(node: &Node, identity: &super::Identity, ask: &Ask) -> Option<Refusal> {
    let c = ask
        .channels
        .iter()
        .find(|c| hooked::deciding(node, c).is_none() && !identity.grants.subscribe.matches(c))?;
    hooked::shadow_refused(node, identity, c);
    Some(Refusal {
        status: StatusCode::FORBIDDEN,
        code: ErrorCode::Forbidden,
        message: format!("this token may not subscribe on {c:?}"),
    })
}

/// A stream that started: its response's head, and what its writer
/// takes.
struct Opened {
    response: HttpResponseBuilder,
    started: super::actor::Started,
    /// `retry:`, the body's first bytes.
    retry: Bytes,
    render: Render,
    ender: Ender,
}

/// `GET /v1/sse` up to the stream's start: the checks, then the actor.
/// `fd` is the connection's socket, for the [`Ender`]. `Err` is the
/// refusal.
async fn open(
    req: &RequestHead,
    node: Arc<Node>,
    fd: Option<std::os::fd::RawFd>,
) -> Result<Opened, HttpResponse> {
    let started = Instant::now();
    let config = node.config.load_full();
    let token = credential(req);
    let admitted = handshake::admit(req, token.as_deref(), &node, &config, "sse").await;
    let Admitted {
        identity,
        limits,
        slots,
    } = match admitted {
        Ok(a) => a,
        Err(r) => {
            node.metrics.handshake_done("refused", started);
            return Err(r.response());
        }
    };
    // The places `slots` took go back when it is dropped on a refusal.
    let refused = match ask(req, &limits) {
        Ok(ask) => match forbidden(&node, &identity, &ask) {
            None => Ok(ask),
            Some(r) => Err(r),
        },
        Err(Unfit::TooMany { max }) => Err(Refusal {
            status: StatusCode::BAD_REQUEST,
            code: ErrorCode::TooManySubscriptions,
            message: format!("a connection may hold at most {max} subscriptions"),
        }),
        Err(Unfit::Bad(message)) => Err(Refusal {
            status: StatusCode::BAD_REQUEST,
            code: ErrorCode::BadRequest,
            message,
        }),
    };
    let ask = match refused {
        Ok(ask) => ask,
        Err(r) => {
            node.metrics.handshake_done("refused", started);
            return Err(refuse_paid(&node, &identity.account, &limits, r, false).await);
        }
    };
    // A hook deciding a channel replaces the token's globs for it (§15).
    let by_hook: Vec<_> = ask
        .channels
        .iter()
        .filter_map(|c| hooked::deciding(&node, c).map(|hook| (hook, c.clone())))
        .collect();
    let start: Vec<(String, Option<u64>)> = ask
        .position
        // Seqs are clock-based: a field's residue is read against the
        // clock the hub's floor takes (`position::reconstruct`).
        .seqs(crate::hub::seq_floor())
        .map(|(c, seq)| (c.to_owned(), seq))
        .collect();
    let price = match price(&limits, &start, &identity.account, &node) {
        Ok(units) => units,
        Err(r) => {
            // Counted already, under the handshake's layer.
            node.metrics.handshake_done("refused", started);
            let r = Refusal {
                status: StatusCode::UNPROCESSABLE_ENTITY,
                code: r.code,
                message: r.message,
            };
            return Err(refuse_paid(&node, &identity.account, &limits, r, true).await);
        }
    };
    let decided = match hooked::ask_all(&node, &identity, by_hook).await {
        Ok(d) => d,
        Err(r) => {
            node.metrics.handshake_done("refused", started);
            return Err(r);
        }
    };
    node.metrics.handshake_done("accepted", started);
    let ender = Ender::new(fd);
    let stream = Stream::new(start, decided, price, ender.clone());
    let started = Socket::spawn(identity, limits, slots, node, None, Some(stream));
    let retry = rand::random_range(RETRY_MS);
    let mut response = HttpResponse::Ok();
    response
        .insert_header((
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        ))
        .insert_header((header::CACHE_CONTROL, HeaderValue::from_static("no-cache")))
        .insert_header(("X-Accel-Buffering", HeaderValue::from_static("no")));
    Ok(Opened {
        response,
        started,
        retry: Bytes::from(format!("retry: {retry}\n\n")),
        render: Render::new(ask.position),
        ender,
    })
}

/// `GET /v1/sse` through the router: the stream as a response body.
pub async fn stream(req: HttpRequest, node: web::Data<Arc<Node>>) -> HttpResponse {
    let fd = req
        .conn_data::<crate::unfinished::Unfinished>()
        .and_then(|u| u.fd());
    match open(req.head(), node.get_ref().clone(), fd).await {
        Err(refused) => refused,
        Ok(mut o) => {
            let s = o.started;
            let body = Body::new(s.outbox, s.on_drain, s.pipe, o.retry, o.render, o.ender);
            o.response.streaming(body)
        }
    }
}
