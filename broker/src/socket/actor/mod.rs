//! The socket's actor, [`Socket`]: one actix actor per connection (a
//! WebSocket, or an SSE stream: the same actor, only the writer differs).
//! It owns the connection's buckets, its subscriptions (capped, their
//! positions in the outbox) and its presence memberships. Registration
//! happens in `started`, cleanup in `stopping`: the actor's lifecycle is
//! the connection's, so nothing it holds can leak.
//!
//! The actor is this module and nothing else. `Socket` and its fields are
//! private to it; this file holds the struct and its lifecycle (start of
//! the actor, close, heartbeat, the account's `CloseWith` and
//! `Reconfigure`), and the files below it are its parts: its start
//! (`start.rs`), each client frame's admission and dispatch
//! (`handle.rs`), the channel operations (`channels.rs`, `publish.rs`),
//! presence (`presence.rs`), the frames a hook decides (`hooked.rs`), a
//! connect hook's session (`hook_session.rs`), a token's refresh and
//! deadline (`refresh.rs`), drop episodes (`episode.rs`), a dialect's
//! [`Link`](crate::dialect::Link) (`link.rs`) and what an SSE stream does
//! differently (`sse.rs`). The rest of `socket` (the handshake, the SSE
//! request, the inbound gate, the outbox, the transport) sees only what
//! is marked `pub(in crate::socket)`.

mod channels;
mod episode;
mod handle;
mod hook_session;
mod hooked;
mod link;
mod presence;
mod publish;
mod refresh;
mod sse;
mod start;

pub(in crate::socket) use sse::Stream;
pub(in crate::socket) use start::Started;

use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use bytes::Bytes;

use super::inbound::{Gate, Inbound};
use super::outbox::Outbox;
use super::{Identity, Slots};
use crate::account::{CloseWith, Reconfigure};
use crate::charge::{Admission, Connection, Payer};
use crate::config::Limits;
use crate::dialect::Dialect;
use crate::hub::OutboundGauge;
use crate::limiter::DropNotice;
use crate::limiter::Sampler;
use crate::metrics::Layer;
use crate::node::Node;
use crate::protocol::wire;
use crate::protocol::wire::BudgetView;
use crate::protocol::{CloseCode, Op};
use crate::rules::ConnRules;

/// How often a socket may send `rate_limited` frames.
const NOTICE_INTERVAL: Duration = Duration::from_secs(1);

/// One connection's actor (see the module's doc).
pub struct Socket {
    id: Identity,
    slots: Slots,
    node: Arc<Node>,
    /// What the connection's frames are charged to, and what it tells its
    /// client of that.
    charging: Charging,
    /// The client's frames as they are read.
    reading: Reading,
    /// The current drop episode (`episode.rs`).
    episode: DropEpisode,
    /// The timers that end the session when its credential expires.
    expiry: Expiry,
    // The four flags below belong with the groups (`rules_skipped` with
    // the rules, `executing` with the charge, `asking_balance` with what
    // is read): they stay here, where they share one word, because in the
    // groups each would be padded to a word of its own, paid by every
    // connection (issue 42).
    /// The plan's rules do not apply to this token's role
    /// (`crate::rules::skipped`).
    rules_skipped: bool,
    /// The units the frame being executed was charged (0 outside
    /// `execute`): a refusal of its input settles them to what a refusal
    /// costs (`Socket::refused_input`).
    executing: u32,
    /// A `budget` request waits for the account's supervisor (reading is
    /// paused until it is answered: answers keep the frames' order, and a
    /// flood of requests waits in TCP, not as pending asks).
    asking_balance: bool,
    /// The socket sent or answered a close frame: it takes no more client
    /// frames, and what completes later is dropped.
    closing: bool,
    /// Numbers joins, so a late answer to an old one is recognised.
    next_join: u64,
    /// The presence channels this connection is a member of or joining
    /// (`presence.rs`): what every end of a subscription leaves.
    presence: presence::Memberships,
    /// The outbound queue and the subscriptions' positions, which the hub
    /// writes into directly (`socket/outbox/delivery.rs`).
    outbox: Arc<Outbox>,
    gauge: Arc<OutboundGauge>,
    /// Hook answers applied in frame order per channel (`hooked.rs`).
    hook_order: crate::hooks::order::HookOrder<hooked::Hooked>,
    /// Counts this actor in `tidegate_actors{kind="socket"}` until dropped.
    _alive: crate::alive::ActorGuard,
    /// The protocol spoken instead of `tidegate.v1` (`None`: tidegate.v1),
    /// driven through `link.rs`.
    dialect: Option<Box<dyn Dialect>>,
    /// An SSE stream's state (`None`: a WebSocket): the same actor, only
    /// the writer differs (`socket/sse/`; what the actor does differently:
    /// `sse.rs`). Boxed: a WebSocket, most sockets, holds a pointer, not
    /// the stream's fields (issue 42).
    sse: Option<Box<Stream>>,
}

/// The connection's side of the ledger (`handle.rs`, `link.rs`): the
/// buckets its frames are charged to (`admission`'s frames and bytes, the
/// small ones of pings and free frames), the plan's rules, and the units
/// sampled for the account; and what the client is told of them: the
/// `rate_limited` notice of refused frames, and the `budget` frames (the
/// account's balance as last heard). A `Reconfigure` replaces their
/// limits together, balances kept.
struct Charging {
    admission: Admission,
    /// Admitted units not yet charged to the account.
    sampler: Sampler,
    rules: ConnRules,
    pings: crate::limiter::TokenBucket,
    /// Frames priced 0 units (`budget`): their own small bucket, so a free
    /// frame (and its reply) is never unlimited.
    free_frames: crate::limiter::TokenBucket,
    /// Refused frames' ids waiting for the next `rate_limited` notice.
    notice: DropNotice,
    /// The account budget as of the last charge.
    account_view: Option<BudgetView>,
    /// When a `budget` frame was last sent unasked.
    last_budget_frame: Option<Instant>,
}

impl Charging {
    /// The connection as the ledger's payer, for `id`'s connection: its
    /// admitted units sampled toward the account budget when `sampled`
    /// (not for a frame that did not parse, nor for the frame units an
    /// operation's own charge already counts), and the plan's rules
    /// applied when an operation is given.
    fn payer<'a>(&'a mut self, id: &'a Identity, sampled: bool, op: Option<Op>) -> Payer<'a> {
        Payer::Connection(Connection {
            admission: &mut self.admission,
            sampler: sampled.then_some(&mut self.sampler),
            rules: op.map(|op| (op, &mut self.rules)),
            account: &id.account,
            conn: &id.label,
        })
    }
}

/// The client's frames as they are read (`handle.rs`): their stream
/// (until `started` hands it to the context), the gate that pauses
/// reading it (`Socket::refresh_gate` says when), a frame held by a rule,
/// and when the client was last heard (the heartbeat's timeout).
struct Reading {
    inbound: Option<Inbound>,
    gate: Rc<Gate>,
    /// A frame held by a rule (reading is paused until it goes through).
    held: Option<Bytes>,
    last_heard: Instant,
}

/// A drop episode (`episode.rs`): when it began, and the slow-consumer
/// grace's timer, which closes the socket with 4008 if the episode
/// outlasts `outbound_grace_ms`.
struct DropEpisode {
    since: Option<Instant>,
    /// One timer at a time, so a socket is closed (and counted) once.
    grace: Option<SpawnHandle>,
}

/// The timers that end the session when its credential expires, armed
/// again together whenever the deadline moves (`Socket::arm_expiry`).
struct Expiry {
    /// The close at the token's deadline (`refresh.rs`).
    close: Option<SpawnHandle>,
    /// The refresh hook's call before a hook-given expiry
    /// (`hook_session.rs`).
    hook_refresh: Option<SpawnHandle>,
}

impl Socket {
    /// The `transport` label of `tidegate_connections`.
    fn transport(&self) -> &'static str {
        match (&self.sse, &self.dialect) {
            (Some(_), _) => "sse",
            (None, Some(d)) => d.transport(),
            (None, None) => "ws",
        }
    }

    fn limits(&self) -> &Arc<Limits> {
        self.charging.admission.limits()
    }

    /// The socket's span (conn, account), made when something is logged:
    /// one kept for the socket's life held a slot in the log subscriber's
    /// registry and its formatted fields, a few hundred bytes an idle
    /// connection paid for a handful of log lines (issue 42).
    fn span(&self) -> tracing::Span {
        tracing::info_span!("socket", conn = %self.id.label, account = %self.id.account)
    }

    /// Queues a frame the socket produced itself. Nothing after its close
    /// frame: an answer that completes once the socket is closing (a
    /// `budget` the account answered late) would only wait for a reader
    /// that is gone.
    fn send(&self, frame: Bytes) {
        if !self.closing {
            self.outbox.send(frame);
        }
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
        // A dialect says the code in its words (the socket's services,
        // its reasons).
        let wire = self
            .dialect
            .as_ref()
            .map_or(code.code(), |d| d.close_code(code));
        self.close_with(ctx, wire, reason, code == CloseCode::SlowConsumer);
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
        // Nothing more is delivered: the presence memberships end now, not
        // when the peer answers the close (which a drain's last batch, or
        // a peer that stopped reading, does not wait for).
        self.end_all_presence();
        let _e = self.span().entered();
        tracing::info!(code, reason, "closing socket");
        self.outbox.stop_deliveries(discard);
        self.outbox.send(wire::close_with(code, reason));
        let timeout = Duration::from_millis(self.node.config.load().socket.close_timeout_ms);
        ctx.run_later(timeout, |act, ctx| {
            act.outbox.abort();
            if let Some(s) = &act.sse {
                s.end_connection();
            }
            ctx.stop();
        });
    }

    /// One exceeded event for a refusal of this socket's, on `channel` if
    /// any.
    fn exceeded(
        &self,
        layer: Layer,
        reason: &'static str,
        channel: Option<&str>,
        reset: Duration,
        dry_run: bool,
    ) {
        let mut e = crate::exceeded::Exceeded::new(layer, reason, &self.id.account)
            .conn(&self.id.label)
            .reset(reset)
            .dry_run(dry_run);
        if let Some(c) = channel {
            e = e.channel(c);
        }
        e.emit(&self.node.metrics);
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
        // An SSE reader cannot answer pings: a dead one fills its queue
        // and is closed with 4008.
        if self.sse.is_none() && self.reading.last_heard.elapsed() > timeout {
            let _e = self.span().entered();
            tracing::info!("client stopped answering; dropping the connection");
            self.socket_event(Layer::Connection, "heartbeat_timeout");
            self.outbox.abort();
            ctx.stop();
            return;
        }
        self.send(wire::ping(b""));
        // A backstop for the outbound gate: reading resumes under the mark
        // even if no `Drained` came.
        self.refresh_gate();
    }
}

impl Actor for Socket {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if let Some(inbound) = self.reading.inbound.take() {
            ctx.add_stream(inbound);
        }
        let node = self.node.clone();
        // One weak handle for the node and the account (see [`Control`]).
        let control = crate::account::Control::new(ctx.address().downgrade());
        node.sockets.insert(
            self.id.conn,
            crate::node::SocketHandle {
                control: control.clone(),
                label: self.id.label.clone(),
                account: self.id.account.clone(),
                ip: self.id.ip,
                plan: self.id.plan.clone(),
                gauge: self.gauge.clone(),
                user: None,
            },
        );
        node.metrics.connections_opened.inc();
        node.metrics.connection(self.transport(), true);
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
            slot.attach(control);
        }
        let every = Duration::from_millis(config.socket.heartbeat_interval_ms);
        ctx.run_interval(every, Self::heartbeat);
        if self.with_dialect(ctx, |d, link| d.opened(link)) {
            return;
        }
        if self.id.server_channels.is_empty() {
            let limits = self.limits().clone();
            self.send(wire::welcome(
                &self.id.label,
                &self.id.account,
                &config.node.id,
                &welcome_limits(&limits, node.limiter_store.account_share(&self.id.account)),
                self.id.token_expires_at,
                None,
            ));
        } else {
            // The welcome waits for the joins: it lists their `seq`.
            self.join_server_channels(ctx);
        }
        self.sse_open(ctx);
        self.arm_expiry(ctx);
        let _e = self.span().entered();
        tracing::debug!("socket open");
    }

    fn stopping(&mut self, _: &mut Context<Self>) -> Running {
        if let Some(d) = &mut self.dialect {
            d.stopping(&self.node);
        }
        for channel in self.outbox.leave_all() {
            self.node.broker.unsubscribe(&channel, self.id.conn);
        }
        self.end_all_presence();
        // Give back the IP and account places first (before the node stops
        // counting this socket), not when the actor is eventually dropped.
        self.slots = Slots::default();
        self.node.metrics.connection(self.transport(), false);
        self.node.sockets.remove(&self.id.conn);
        self.outbox.finish();
        let _e = self.span().entered();
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

impl Handler<Reconfigure> for Socket {
    type Result = ();

    fn handle(&mut self, msg: Reconfigure, _: &mut Context<Self>) {
        let now = Instant::now();
        let l = msg.limits;
        self.charging
            .pings
            .reconfigure(f64::from(l.ping_burst), l.pings_per_sec, now);
        self.charging.free_frames.reconfigure(
            f64::from(l.free_frame_burst),
            l.free_frames_per_sec,
            now,
        );
        self.reading.gate.set_max_size(l.max_payload_bytes);
        self.gauge.set_high_water(l.outbound_high_water_bytes);
        self.charging.sampler.set_every(l.account_sample_every);
        self.rules_skipped = crate::rules::skipped(&l, self.id.role.as_deref());
        self.charging.admission.reconfigure(l, now);
    }
}
