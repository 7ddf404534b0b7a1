//! The socket machinery's plug-in interface: the boundary between the
//! socket machinery (the `socket` front's actor: the handshake layers, the
//! transport, the outbox and its high-water mark, heartbeats, drain,
//! operator closes, token expiry) and a protocol spoken over it other than
//! `tidegate.v1`, such as GraphQL's `graphql-transport-ws` (the `graphql`
//! front) or Pusher Channels (the `pusher` front). Fronts never import each
//! other, so the socket drives a [`Dialect`] it does not know, through
//! these traits, and the dialect reaches the socket's services through a
//! [`Link`]; `server` hands the socket the [`Route`]s to serve.
//!
//! A layer of its own, between `session` and the fronts: it is what
//! `socket` offers, implemented by `socket` and used by `graphql` and
//! `pusher`. It speaks the WebSocket machinery's words (actix's
//! `RequestHead` and `HttpResponse`, close codes), which `session` must not
//! know, and it knows no front's protocol beyond them; the node, which
//! composes the services every front is handed, does not know it.
//!
//! What stays the socket's, whatever the dialect: the §1 layers in their
//! order (the peer's at the upgrade; the credential's when the dialect
//! names one, [`Link::admit`]), the connection's frame and ping buckets,
//! the outbound gauge with its grace and 4008, conflation, the drain's
//! 1012, an operator's 4003, the account budget's 1008 (for a token's
//! connection) and the token's 4001.

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use actix_http::RequestHead;
use actix_web::HttpResponse;
use actix_web::http::StatusCode;
use bytes::Bytes;

use crate::admission::Who;
use crate::config::Limits;
use crate::hub::OutboundGauge;
use crate::node::Node;
use crate::protocol::{CloseCode, ErrorCode};
use crate::session::Pumped;

/// Work a dialect runs on its connection's worker; what it resolves to
/// comes back through [`Dialect::done`].
pub type Work = Pin<Box<dyn Future<Output = Box<dyn Any>>>>;

/// A dialect served on a path of its own, upgraded with its subprotocol.
#[derive(Clone, Copy)]
pub struct Route {
    pub path: &'static str,
    /// `path` is a prefix of the paths served (`/app/` serves `/app/{key}`).
    pub prefix: bool,
    /// Required in `Sec-WebSocket-Protocol`, and answered; `None`: the
    /// protocol names none (pusher-js offers none).
    pub subprotocol: Option<&'static str>,
    /// The credential the request itself names (a Pusher app's key in the
    /// path), admitted at the upgrade with the §1 layers after the
    /// credential, so an account's connection cap refuses before the
    /// upgrade; `None`: the dialect names one later ([`Link::admit`]) or
    /// the request names none the route knows (the dialect says so).
    pub credential: fn(&Arc<Node>, &RequestHead) -> Option<Who>,
    /// A new connection's protocol state, with the upgrade's head (its
    /// path and query, its `Authorization` header).
    pub open: fn(&Arc<Node>, &RequestHead) -> Box<dyn Dialect>,
    /// A refusal at the upgrade (a §1 layer before the credential), as
    /// this route's HTTP answers word it.
    pub refusal: fn(StatusCode, ErrorCode, &str, Option<Duration>) -> HttpResponse,
}

/// The upgrade's `Authorization` header (a credential a dialect may use).
pub fn authorization(head: &RequestHead) -> Option<&str> {
    head.headers()
        .get(actix_web::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
}

/// A protocol the socket speaks instead of `tidegate.v1`. Every method
/// runs on the socket's actor, with the socket's services in `link`.
pub trait Dialect {
    /// The socket is open (after the upgrade): start the protocol's clock.
    fn opened(&mut self, link: &mut dyn Link);
    /// One complete UTF-8 text message from the client.
    fn text(&mut self, link: &mut dyn Link, text: &str);
    /// A binary message (its size).
    fn binary(&mut self, link: &mut dyn Link, len: usize);
    /// [`Link::spawn`]ed work finished.
    fn done(&mut self, link: &mut dyn Link, output: Box<dyn Any>);
    /// [`Link::admit`] answered: `Ok` once the socket is the credential's
    /// (limits, account, expiry), or the §1 layer that refused it.
    fn admitted(&mut self, link: &mut dyn Link, verdict: Result<(), Refusal>);
    /// The outbound queue drained below its mark after a drop episode
    /// that lost `dropped` messages (the dialect says so in its words).
    fn drained(&mut self, link: &mut dyn Link, dropped: u64);
    /// The socket is stopping: leave every channel.
    fn stopping(&mut self, node: &Node);
    /// The code on the wire for one of the socket's own closes (an
    /// operator's, the account budget's, a slow reader's, the drain's):
    /// a dialect whose clients read close codes their own way says it in
    /// its words (Pusher's 4100 "reconnect with backoff").
    fn close_code(&self, code: CloseCode) -> u16 {
        code.code()
    }
    /// The `transport` label of `tidegate_connections`.
    fn transport(&self) -> &'static str {
        "ws"
    }
}

/// What the socket does for its dialect.
pub trait Link {
    fn node(&self) -> &Arc<Node>;
    /// The connection's number (unique on this node).
    fn conn(&self) -> u64;
    /// The connection's label shown to clients (`n1-8f3a`).
    fn label(&self) -> &str;
    /// The client's address (after `trusted_proxies`), for hooks (§15).
    fn ip(&self) -> std::net::IpAddr;
    /// The limits in force (the default plan's until [`Link::admit`]).
    fn limits(&self) -> Arc<Limits>;
    /// Where the dialect's own hub sinks queue frames.
    fn outlet(&self) -> Arc<dyn Outlet>;
    fn gauge(&self) -> Arc<OutboundGauge>;
    /// Queues a text message.
    fn send(&mut self, text: &str);
    /// Closes with the dialect's code and reason; nothing more is read.
    fn close(&mut self, code: u16, reason: &str);
    /// Charges `units` to the connection's frame bucket (§0), within
    /// `max_single`: `Err` with the refusal (counted under
    /// `layer="connection"`): the wait until a token when it is empty.
    fn charge_frame(&mut self, units: u32) -> Result<(), crate::charge::Refused>;
    /// [`Link::charge_frame`] for a frame of `bytes` that is the account's
    /// traffic as a `tidegate.v1` frame is (a Pusher client's): also the
    /// byte bucket, and counted toward the account's sampled budget, whose
    /// breach closes every connection of the account.
    fn charge_account_frame(
        &mut self,
        units: u32,
        bytes: usize,
    ) -> Result<(), crate::charge::Refused>;
    /// Takes `units` from the connection's frame bucket even below zero,
    /// for what cannot wait once it is bought (a subscription's `recovery`
    /// once its `since` is known); its next frames wait instead.
    fn owe_frame(&mut self, units: u32);
    /// Takes one token of the connection's ping bucket (a dialect's own
    /// pings are bounded like WebSocket pings: the excess is ignored).
    fn ping(&mut self) -> bool;
    /// Runs the credential's layers of §1 in their order (the identity's
    /// handshake bucket, then for a token the account's connection cap,
    /// then bans) and makes the socket the credential's; answers through
    /// [`Dialect::admitted`].
    fn admit(&mut self, who: Who);
    /// Runs `work` on this connection's worker, tied to its life.
    fn spawn(&mut self, work: Work);
}

/// A connection's outbound queue, as a dialect's own hub sinks write into
/// it (the socket's outbox), bounded by the same gauge.
pub trait Outlet: Send + Sync {
    /// Queues one message sent in `parts` (a text frame's header first),
    /// their bytes already counted in the gauge; the parts are never
    /// separated (a close that discards the queue keeps a message whose
    /// first part is on the wire whole). The parts are moved out (left
    /// empty), so queueing them costs no reference count.
    fn push(&self, parts: &mut [Bytes]);
    /// Queues one whole frame (its bytes already counted in the gauge),
    /// handing it over without another reference count.
    fn push_frame(&self, frame: Bytes);
    /// Queues one frame as its own `head` and a `body` shared with other
    /// connections (its bytes already counted in the gauge): the same
    /// bytes as `head` then `body`, with neither allocated nor copied per
    /// connection. An outbox keeps the two as one entry and writes them
    /// as two slices; by default they are queued as parts.
    fn push_pair(&self, head: Bytes, body: Arc<Bytes>) {
        self.push(&mut [head, Bytes::clone(&body)]);
    }
    /// Queues a conflating channel's message (one whole frame) in place of
    /// the unsent one with `key` in `slot` (§11). `false`: refused, a new
    /// key past the mark; its bytes are released and the drop is counted
    /// (and starts a drop episode).
    fn push_keyed(&self, slot: &Arc<str>, key: Arc<str>, frame: Bytes) -> bool;
    fn gauge(&self) -> &OutboundGauge;
    /// A drop episode began: the socket starts its grace timer.
    fn congested(&self);
    /// Delivers `backlog` (a subscription's recovered history) in slices
    /// while the socket is under half its mark, pumping it now and as the
    /// transport drains, exactly as the socket's own subscriptions recover
    /// (`socket/outbox/recovery.rs`): a backlog that cannot move runs the
    /// slow-consumer grace (then 4008), one that moves again ends it.
    fn recover(&self, backlog: Arc<dyn Backlog>);
    /// `backlog` ended before it was all queued: it no longer keeps the
    /// grace running.
    fn forget(&self, backlog: &Arc<dyn Backlog>);
    /// Reserves the budget of one page of recovered history read from a
    /// cluster's history, inside the room under half the mark beside
    /// `held` bytes (already in the gauge) while no other page of the
    /// socket is being read, as the socket's own subscriptions do
    /// (`socket/outbox/pages.rs`); `None`: not now (a later pump asks again).
    fn page_room(&self, held: usize) -> Option<usize>;
    /// The page read with `budget` is done: the reservation is given back.
    fn page_done(&self, budget: usize);
    /// A backlog has more to queue (its page arrived): pump every backlog
    /// now, as when the transport drains.
    fn pump_backlogs(&self);
}

/// A dialect subscription's recovered history, waiting to be queued
/// ([`Outlet::recover`]). The socket pumps it without holding its outbox's
/// lock: the subscription takes its own lock, then queues through its
/// [`Outlet`] as it does live messages.
pub trait Backlog: Send + Sync {
    /// Queues backlog while `room(held)` says so, `held` being the bytes of
    /// live messages the subscription holds behind its backlog (counted in
    /// the gauge already, so left out of the room). Says what it did: the
    /// session layer's [`Pumped`], `done` once nothing is left (all
    /// queued, or the subscription ended); `congested` stays `false`, the
    /// [`Outlet`] says a drop episode began itself.
    fn pump(&self, room: &dyn Fn(usize) -> bool) -> Pumped;
}

/// A §1 layer's refusal.
#[derive(Debug, Clone)]
pub struct Refusal {
    pub code: ErrorCode,
    pub message: String,
    pub retry: Option<Duration>,
}
