//! One actix actor per WebSocket: it owns the connection's token buckets,
//! its subscriptions (capped) and its outbound queue with a high-water
//! mark. Registration happens in `started`, cleanup in `stopping`: the
//! actor's lifecycle is the connection's, so nothing it holds can leak.

mod channels;
mod delivery;
mod handle;
pub mod handshake;
pub(crate) mod inbound;
mod link;
mod outbox;
mod outlet;
mod presence;
mod queue;
mod refresh;
mod transport;

use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use bytes::Bytes;

pub use crate::charge::{Admission, Shadow, Verdict};
pub use delivery::Congested;
pub use outbox::Drained;
pub use transport::Transport;

use crate::account::AccountSlot;
pub use crate::account::{CloseWith, Reconfigure};
use crate::auth::Grants;
use crate::config::Limits;
use crate::gate::IpSlot;
use crate::hub::OutboundGauge;
use crate::limiter::DropNotice;
use crate::limiter::Sampler;
use crate::metrics::Layer;
use crate::node::Node;
use crate::node::dialect::Dialect;
use crate::protocol::CloseCode;
use crate::protocol::wire;
use crate::protocol::wire::BudgetView;
use crate::rules::ConnRules;
use inbound::{Gate, Inbound};
use outbox::Outbox;

/// How often a socket may send `rate_limited` frames.
const NOTICE_INTERVAL: Duration = Duration::from_secs(1);

/// Who is on the other end, as established by the handshake.
#[derive(Debug, Clone)]
pub struct Identity {
    pub conn: u64,
    /// `node-hex`, as shown to the client.
    pub label: Arc<str>,
    pub account: Arc<str>,
    /// The client address the handshake saw (after trusted proxies).
    pub ip: std::net::IpAddr,
    pub role: Option<String>,
    pub plan: Option<String>,
    pub grants: Grants,
    /// The token's `exp`, unix ms (`welcome.tokenExpiresAt`).
    pub token_expires_at: u64,
    /// When the socket is closed with 4001 unless refreshed first: the
    /// token's `exp` plus `auth.leeway_secs`, unix seconds.
    pub deadline: u64,
    /// The token's `info` claim (compact JSON), shown by presence (§13).
    pub info: Option<Arc<str>>,
}

/// Places this socket holds in node-wide counts; dropping them (with the
/// actor) gives them back.
#[derive(Debug, Default)]
pub struct Slots {
    pub ip: Option<IpSlot>,
    pub account: Option<AccountSlot>,
}

pub struct Socket {
    id: Identity,
    slots: Slots,
    /// Admitted units not yet charged to the account.
    sampler: Sampler,
    /// The account budget as of the last charge.
    account_view: Option<BudgetView>,
    conn_rules: ConnRules,
    rules_skipped: bool,
    /// A frame held by a rule (reading is paused until it goes through).
    held: Option<Bytes>,
    last_budget_frame: Option<Instant>,
    node: Arc<Node>,
    admission: Admission,
    pings: crate::limiter::TokenBucket,
    notice: DropNotice,
    /// Numbers joins, so a late answer to an old one is recognised.
    next_join: u64,
    /// The outbound queue and the subscriptions' positions, which the hub
    /// writes into directly (`socket/delivery.rs`).
    outbox: Arc<Outbox>,
    gauge: Arc<OutboundGauge>,
    gate: Rc<Gate>,
    inbound: Option<Inbound>,
    last_heard: Instant,
    closing: bool,
    congested_since: Option<Instant>,
    /// The close at the token's deadline (`socket/refresh.rs`).
    expiry: Option<SpawnHandle>,
    span: tracing::Span,
    /// Counts this actor in `tidegate_actors{kind="socket"}` until dropped.
    _alive: crate::alive::ActorGuard,
    /// The protocol spoken instead of `tidegate.v1` (`None`: tidegate.v1),
    /// driven through `socket/link.rs`.
    dialect: Option<Box<dyn Dialect>>,
}

impl Socket {
    fn limits(&self) -> &Arc<Limits> {
        self.admission.limits()
    }

    /// Queues a frame the socket produced itself.
    fn send(&self, frame: Bytes) {
        self.outbox.send(frame);
    }

    /// Starts a server-initiated close: queue the close frame, stop taking
    /// client frames, and drop the TCP connection if the close frame is not
    /// delivered within `close_timeout_ms`.
    fn close(&mut self, ctx: &mut Context<Self>, code: CloseCode) {
        self.close_because(ctx, code, code.reason());
    }

    /// [`Socket::close`] with a reason of the caller's (an operator's
    /// `disconnected` or `banned`).
    fn close_because(&mut self, ctx: &mut Context<Self>, code: CloseCode, reason: &str) {
        if self.closing {
            return;
        }
        // The account-level closes are `limit.exceeded` webhooks (§9).
        let event = match code {
            CloseCode::PolicyViolation => {
                Some(crate::protocol::ErrorCode::AccountRateLimited.as_str())
            }
            CloseCode::SlowConsumer => Some(crate::protocol::ErrorCode::SlowConsumer.as_str()),
            _ => None,
        };
        if let Some(event) = event {
            self.node
                .webhooks
                .limit_exceeded(&self.id.account, event, Some(code.code()));
        }
        self.close_with(ctx, code.code(), reason, code == CloseCode::SlowConsumer);
    }

    /// Queues a close frame with any code (a dialect's own too) after what
    /// is queued (or instead of it, with `discard`), stops taking client
    /// frames, and drops the TCP connection if the close frame is not
    /// delivered within `close_timeout_ms`.
    fn close_with(&mut self, ctx: &mut Context<Self>, code: u16, reason: &str, discard: bool) {
        if self.closing {
            return;
        }
        self.closing = true;
        let _e = self.span.enter();
        tracing::info!(code, reason, "closing socket");
        self.outbox.stop_deliveries(discard);
        self.send(wire::close_with(code, reason));
        let timeout = Duration::from_millis(self.node.config.load().socket.close_timeout_ms);
        ctx.run_later(timeout, |act, ctx| {
            act.outbox.abort();
            ctx.stop();
        });
    }

    /// One exceeded event for a socket-level refusal with no channel.
    fn socket_event(&self, layer: Layer, reason: &'static str) {
        crate::exceeded::Exceeded::new(layer, reason, &self.id.account)
            .conn(&self.id.label)
            .emit(&self.node.metrics);
    }

    fn heartbeat(&mut self, ctx: &mut Context<Self>) {
        let config = self.node.config.load();
        let timeout = Duration::from_millis(config.socket.client_timeout_ms);
        if self.last_heard.elapsed() > timeout {
            let _e = self.span.enter();
            tracing::info!("client stopped answering; dropping the connection");
            self.socket_event(Layer::Connection, "heartbeat_timeout");
            self.outbox.abort();
            ctx.stop();
            return;
        }
        self.send(wire::ping(b""));
    }
}

impl Actor for Socket {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if let Some(inbound) = self.inbound.take() {
            ctx.add_stream(inbound);
        }
        let node = self.node.clone();
        node.sockets.insert(
            self.id.conn,
            crate::node::SocketHandle {
                close: ctx.address().recipient(),
                reconfigure: ctx.address().recipient(),
                label: self.id.label.clone(),
                account: self.id.account.clone(),
                ip: self.id.ip,
                plan: self.id.plan.clone(),
                gauge: self.gauge.clone(),
            },
        );
        node.metrics.connections_opened.inc();
        node.metrics.connections_open.inc();
        let config = node.config.load();
        // Only here is the node's socket count exact across workers: one
        // past the cap is shed right after the upgrade (seed 002: 1013).
        if node.sockets.len() > node.socket_cap() {
            crate::exceeded::Exceeded::new(Layer::Handshake, "node_shedding", &self.id.account)
                .conn(&self.id.label)
                .emit(&node.metrics);
            self.close(ctx, CloseCode::TryAgainLater);
            return;
        }
        if let Some(slot) = &self.slots.account {
            slot.attach(ctx.address().recipient());
        }
        let every = Duration::from_millis(config.socket.heartbeat_interval_ms);
        ctx.run_interval(every, Self::heartbeat);
        if self.with_dialect(ctx, |d, link| d.opened(link)) {
            return;
        }
        let limits = self.limits().clone();
        self.send(wire::welcome(
            &self.id.label,
            &self.id.account,
            &config.node.id,
            &welcome_limits(&limits, node.bridge.account_share(&self.id.account)),
            self.id.token_expires_at,
        ));
        self.arm_expiry(ctx);
        let _e = self.span.enter();
        tracing::debug!("socket open");
    }

    fn stopping(&mut self, _: &mut Context<Self>) -> Running {
        if let Some(d) = &mut self.dialect {
            d.stopping(&self.node);
        }
        for channel in self.outbox.leave_all() {
            self.node.bridge.unsubscribe(&channel, self.id.conn);
            self.leave_presence(&channel);
        }
        // Give back the IP and account places first (before the node stops
        // counting this socket), not when the actor is eventually dropped.
        self.slots = Slots::default();
        self.node.sockets.remove(&self.id.conn);
        self.node.metrics.connections_open.dec();
        self.outbox.finish();
        let _e = self.span.enter();
        tracing::debug!("socket closed");
        Running::Stop
    }
}

/// The limits in force for a socket: cluster-wide ones at this node's
/// share while it serves alone (§7).
pub fn welcome_limits(l: &Limits, share: f64) -> wire::WelcomeLimits {
    wire::WelcomeLimits {
        messages_per_sec: l.messages_per_sec,
        burst: l.burst,
        max_payload_bytes: l.max_payload_bytes,
        max_subscriptions: l.max_subscriptions,
        account_messages_per_sec: l.account_messages_per_sec * share,
        account_burst: f64::from(l.account_burst) * share,
        max_connections: crate::cluster::scale_cap(l.max_connections, share),
    }
}

impl Handler<Congested> for Socket {
    type Result = ();

    fn handle(&mut self, _: Congested, ctx: &mut Context<Self>) {
        self.congested(ctx);
    }
}

impl Socket {
    /// A drop episode began: close with 4008 if it outlasts the grace.
    fn congested(&mut self, ctx: &mut Context<Self>) {
        if self.congested_since.is_none() {
            self.congested_since = Some(Instant::now());
            let grace = Duration::from_millis(self.limits().outbound_grace_ms);
            ctx.run_later(grace, move |act, ctx| {
                if act
                    .congested_since
                    .is_some_and(|since| since.elapsed() >= grace)
                {
                    act.socket_event(Layer::Outbound, "slow_consumer_closed");
                    act.close(ctx, CloseCode::SlowConsumer);
                }
            });
        }
    }
}

impl Handler<Drained> for Socket {
    type Result = ();

    fn handle(&mut self, _: Drained, ctx: &mut Context<Self>) {
        if self.congested_since.take().is_none() {
            return;
        }
        let dropped = self.gauge.clear_congestion();
        if !self.closing && self.with_dialect(ctx, |d, link| d.drained(link, dropped)) {
            return;
        }
        crate::exceeded::Exceeded::new(Layer::Outbound, "slow_consumer", &self.id.account)
            .conn(&self.id.label)
            .count(dropped)
            .log();
        if dropped > 0 && !self.closing {
            let _e = self.span.enter();
            tracing::info!(dropped, "slow consumer drained");
            self.send(
                wire::ErrorFrame::new(crate::protocol::ErrorCode::SlowConsumer)
                    .dropped(dropped)
                    .message("messages to this socket were dropped because it was not reading")
                    .encode(),
            );
        }
    }
}

impl Handler<CloseWith> for Socket {
    type Result = ();

    fn handle(&mut self, msg: CloseWith, ctx: &mut Context<Self>) {
        if let Some(code) = msg.notice
            && !self.closing
            && self.dialect.is_none()
        {
            self.send(wire::ErrorFrame::new(code).encode());
        }
        self.close_because(ctx, msg.code, msg.reason.unwrap_or(msg.code.reason()));
    }
}

impl Socket {
    /// Starts the actor for an accepted upgrade and returns the transport
    /// that carries its frames over `io` (to be driven by the caller).
    /// `early` is what the client sent after its request head, already
    /// read off `io`.
    pub fn start<T>(
        id: Identity,
        limits: Arc<Limits>,
        slots: Slots,
        node: Arc<Node>,
        dialect: Option<Box<dyn Dialect>>,
        io: T,
        early: &[u8],
    ) -> Transport<T>
    where
        T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        let pipe = Rc::new(inbound::Pipe::default());
        pipe.push(early);
        let linger = Duration::from_millis(node.config.load().socket.close_timeout_ms);
        let now = Instant::now();
        let gauge = Arc::new(OutboundGauge::new(limits.outbound_high_water_bytes));
        let gate = Gate::new(limits.max_payload_bytes);
        let mut started = None;
        Socket::create(|ctx| {
            let outbox = Outbox::new(
                gauge.clone(),
                node.metrics.clone(),
                ctx.address().recipient(),
            );
            started = Some((outbox.clone(), ctx.address().recipient()));
            let span = tracing::info_span!("socket", conn = %id.label, account = %id.account);
            Socket {
                slots,
                sampler: Sampler::new(limits.account_sample_every),
                account_view: None,
                conn_rules: ConnRules::default(),
                rules_skipped: crate::rules::skipped(&limits, id.role.as_deref()),
                held: None,
                last_budget_frame: None,
                pings: crate::limiter::TokenBucket::new(
                    f64::from(limits.ping_burst),
                    limits.pings_per_sec,
                    now,
                ),
                admission: Admission::new(limits, now),
                notice: DropNotice::new(NOTICE_INTERVAL),
                next_join: 0,
                outbox,
                gauge,
                inbound: Some(Inbound::new(pipe.clone(), gate.clone())),
                gate,
                last_heard: now,
                closing: false,
                congested_since: None,
                expiry: None,
                span,
                _alive: node.metrics.alive.actor(crate::alive::ActorKind::Socket),
                dialect,
                id,
                node,
            }
        });
        // `create` runs the closure before returning.
        let (outbox, on_drain) = started.expect("actor constructed");
        Transport::new(io, pipe, outbox, on_drain, linger)
    }
}

impl Handler<Reconfigure> for Socket {
    type Result = ();

    fn handle(&mut self, msg: Reconfigure, _: &mut Context<Self>) {
        let now = Instant::now();
        let l = msg.limits;
        self.pings
            .reconfigure(f64::from(l.ping_burst), l.pings_per_sec, now);
        self.gate.set_max_size(l.max_payload_bytes);
        self.gauge.set_high_water(l.outbound_high_water_bytes);
        self.sampler.set_every(l.account_sample_every);
        self.rules_skipped = crate::rules::skipped(&l, self.id.role.as_deref());
        self.admission.reconfigure(l, now);
    }
}
