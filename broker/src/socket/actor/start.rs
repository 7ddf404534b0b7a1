//! Starting a socket's actor, for a WebSocket's transport or an SSE
//! response (`socket/sse/`).

use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;

use super::{Charging, DropEpisode, Expiry, NOTICE_INTERVAL, Reading, Socket, Stream};
use crate::charge::Admission;
use crate::config::Limits;
use crate::dialect::Dialect;
use crate::hub::OutboundGauge;
use crate::limiter::{DropNotice, Sampler};
use crate::node::Node;
use crate::rules::ConnRules;
use crate::socket::inbound::{self, Gate, Inbound};
use crate::socket::outbox::{Drained, Outbox};
use crate::socket::{Identity, Nudge, Slots, Transport};

/// A started actor's ends, for its writer.
pub(in crate::socket) struct Started {
    /// The actor's inbound stream: ending it stops the actor.
    pub(in crate::socket) pipe: Rc<inbound::Pipe>,
    pub(in crate::socket) outbox: Arc<Outbox>,
    pub(in crate::socket) on_drain: Nudge<Drained>,
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
        let linger = Duration::from_millis(node.config.load().socket.close_timeout_ms);
        let started = Socket::spawn(id, limits, slots, node, dialect, None);
        started.pipe.push(early);
        Transport::new(io, started.pipe, started.outbox, started.on_drain, linger)
    }

    /// Creates the actor on this worker; its writer (a WebSocket's
    /// transport, an SSE response) is the caller's.
    pub(in crate::socket) fn spawn(
        id: Identity,
        limits: Arc<Limits>,
        slots: Slots,
        node: Arc<Node>,
        dialect: Option<Box<dyn Dialect>>,
        sse: Option<Stream>,
    ) -> Started {
        let pipe = Rc::new(inbound::Pipe::default());
        let now = Instant::now();
        let gauge = Arc::new(OutboundGauge::new(limits.outbound_high_water_bytes));
        let gate = Gate::new(limits.max_payload_bytes);
        let rules_skipped = crate::rules::skipped(&limits, id.role.as_deref());
        let mut started = None;
        Socket::create(|ctx| {
            // Weak: see [`Nudge`].
            let me = ctx.address().downgrade();
            let outbox = Outbox::new(
                gauge.clone(),
                node.metrics.clone(),
                Nudge::new(me.clone()),
                Nudge::new(me.clone()),
            );
            started = Some((outbox.clone(), Nudge::new(me)));
            Socket {
                slots,
                charging: Charging {
                    sampler: Sampler::new(limits.account_sample_every),
                    account_view: None,
                    rules: ConnRules::default(),
                    last_budget_frame: None,
                    pings: crate::limiter::TokenBucket::new(
                        f64::from(limits.ping_burst),
                        limits.pings_per_sec,
                        now,
                    ),
                    free_frames: crate::limiter::TokenBucket::new(
                        f64::from(limits.free_frame_burst),
                        limits.free_frames_per_sec,
                        now,
                    ),
                    notice: DropNotice::new(NOTICE_INTERVAL),
                    admission: Admission::new(limits, now),
                },
                reading: Reading {
                    inbound: Some(Inbound::new(pipe.clone(), gate.clone())),
                    gate,
                    held: None,
                    last_heard: now,
                },
                episode: DropEpisode {
                    since: None,
                    grace: None,
                },
                expiry: Expiry {
                    close: None,
                    hook_refresh: None,
                },
                rules_skipped,
                executing: 0,
                asking_balance: false,
                closing: false,
                next_join: 0,
                presence: Default::default(),
                outbox,
                gauge,
                hook_order: Default::default(),
                _alive: node.metrics.alive.actor(crate::alive::ActorKind::Socket),
                dialect,
                sse: sse.map(Box::new),
                id,
                node,
            }
        });
        // `create` runs the closure before returning.
        let (outbox, on_drain) = started.expect("actor constructed");
        Started {
            pipe,
            outbox,
            on_drain,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::mem::size_of;

    use super::*;

    /// What an idle socket holds inline, per part (`--nocapture` prints
    /// it): the actor lives in its task's allocation, so every byte here
    /// is paid by every connection. The bound keeps a feature's state from
    /// growing every socket unnoticed (issue 42: box it, create it on
    /// first use).
    #[test]
    fn an_idle_socket_holds_its_parts_within_budget() {
        let parts = [
            ("Socket", size_of::<Socket>()),
            ("Charging", size_of::<Charging>()),
            ("Reading", size_of::<Reading>()),
            ("DropEpisode", size_of::<DropEpisode>()),
            ("Expiry", size_of::<Expiry>()),
            ("Identity", size_of::<Identity>()),
            ("Outbox", size_of::<Outbox>()),
            ("Admission", size_of::<Admission>()),
            ("ConnRules", size_of::<ConnRules>()),
            ("DropNotice", size_of::<DropNotice>()),
            (
                "Memberships",
                size_of::<super::super::presence::Memberships>(),
            ),
            (
                "HookOrder",
                size_of::<crate::hooks::order::HookOrder<super::super::hooked::Hooked>>(),
            ),
            ("sse::Stream", size_of::<Stream>()),
            (
                "Transport<TcpStream>",
                size_of::<Transport<tokio::net::TcpStream>>(),
            ),
            ("Inbound", size_of::<Inbound>()),
            ("node::SocketHandle", size_of::<crate::node::SocketHandle>()),
            ("AccountSlot", size_of::<crate::account::AccountSlot>()),
        ];
        for (name, bytes) in parts.into_iter().chain(crate::socket::outbox::PART_SIZES) {
            println!("{name:>24} {bytes:>5} B");
        }
        // 1,088 bytes on x86_64 with rustc 1.95 (issue 42; 1,120 before
        // the account slot held its supervisor weakly).
        assert!(size_of::<Socket>() <= 1152, "{}", size_of::<Socket>());
    }
}
