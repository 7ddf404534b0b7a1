//! How the socket drives a [`Dialect`] (`dialect.rs`): it hands the
//! dialect each text message, its spawned work's results, the outcome of
//! the credential's layers and the end of a drop episode, and serves the
//! dialect's requests through [`Link`] with its own machinery (frame and
//! ping buckets, outbox, close, the §1 layers after the credential).

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::fut::{ActorFutureExt, wrap_future};
use actix::prelude::*;

use super::Socket;
use crate::account::Reconfigure;
use crate::admission::Who;
use crate::charge::{self, Price, Reason, Refused};
use crate::config::Limits;
use crate::dialect::{Dialect, Link, Outlet, Refusal, Work};
use crate::hub::OutboundGauge;
use crate::metrics::Layer;
use crate::node::Node;
use crate::protocol::wire;
use crate::socket::{handshake, outbox};

/// The socket's services for its dialect during one call.
struct SocketLink<'a> {
    socket: &'a mut Socket,
    ctx: &'a mut Context<Socket>,
}

impl Socket {
    /// Calls the dialect, if the socket speaks one, with a [`Link`] to
    /// itself; `false` for a `tidegate.v1` socket.
    pub(super) fn with_dialect(
        &mut self,
        ctx: &mut Context<Self>,
        f: impl FnOnce(&mut dyn Dialect, &mut dyn Link),
    ) -> bool {
        let Some(mut dialect) = self.dialect.take() else {
            return false;
        };
        f(&mut *dialect, &mut SocketLink { socket: self, ctx });
        self.dialect = Some(dialect);
        true
    }

    /// A dialect's text message: UTF-8 (1007, as on `tidegate.v1`), then
    /// the dialect's.
    pub(super) fn on_dialect_text(&mut self, bytes: &[u8], ctx: &mut Context<Self>) {
        let Ok(text) = std::str::from_utf8(bytes) else {
            self.exceeded(
                Layer::Connection,
                "invalid_utf8",
                None,
                Duration::ZERO,
                false,
            );
            self.close(ctx, crate::protocol::CloseCode::InvalidUtf8);
            return;
        };
        self.with_dialect(ctx, |d, link| d.text(link, text));
        // A `tidegate.v1` frame is answered (a publish's ack), and queueing
        // the answer wakes the transport from this worker, behind the
        // subscribers' transports the frame's fan-out woke. A dialect's
        // frame often has no answer (a Pusher client event): its transport
        // then ran on the kernel's readiness alone, and at 1,000 subscribers
        // it read about half as many of a publisher's frames between two
        // writes of each subscriber, which wrote the same frames in twice
        // as many `writev`s (22 frames a write against 44 on `/v1/ws`,
        // bench/README.md stop 51, issue 40). The answer's wake, with
        // nothing queued, puts the next read back behind those writes.
        self.outbox.wake_transport();
    }

    /// The credential was admitted: the socket is now its (limits, account
    /// supervisor for a token, the node's registry, the token's deadline).
    fn become_who(
        &mut self,
        ctx: &mut Context<Self>,
        who: Who,
        slot: Option<crate::account::AccountSlot>,
    ) {
        let config = self.node.config.load_full();
        let limits = who.limits.clone();
        let expires = who.token.is_some();
        self.id = handshake::identity(&config, self.id.conn, self.id.ip, who);
        // The supervisor shares the node's handle (see `Control`).
        let control = self.node.sockets.get_mut(&self.id.conn).map(|mut handle| {
            handle.account = self.id.account.clone();
            handle.plan = self.id.plan.clone();
            handle.control.clone()
        });
        if let Some(slot) = &slot {
            slot.attach(
                control.unwrap_or_else(|| crate::account::Control::new(ctx.address().downgrade())),
            );
        }
        self.slots.account = slot;
        <Self as Handler<Reconfigure>>::handle(self, Reconfigure { limits }, ctx);
        if expires {
            self.arm_expiry(ctx);
        }
    }
}

impl SocketLink<'_> {
    /// A frame's charge to the connection's own buckets.
    fn charge(&mut self, price: Price<'_>) -> Result<(), Refused> {
        let s = &mut *self.socket;
        // The operation's own price goes to the account (or the key): the
        // frame's units are the connection's alone, not sampled.
        let payer = s.charging.payer(&s.id, false, None);
        let charge::Pending::Ready(outcome) = s.node.ledger().charge(payer, price, Instant::now())
        else {
            unreachable!("a connection's own buckets answer at once")
        };
        outcome.map(|_| ())
    }
}

impl Link for SocketLink<'_> {
    fn node(&self) -> &Arc<Node> {
        &self.socket.node
    }

    fn conn(&self) -> u64 {
        self.socket.id.conn
    }

    fn label(&self) -> &str {
        &self.socket.id.label
    }

    fn ip(&self) -> std::net::IpAddr {
        self.socket.id.ip
    }

    fn limits(&self) -> Arc<Limits> {
        self.socket.limits().clone()
    }

    fn outlet(&self) -> Arc<dyn Outlet> {
        outbox::outlet(&self.socket.outbox)
    }

    fn gauge(&self) -> Arc<OutboundGauge> {
        self.socket.gauge.clone()
    }

    fn send(&mut self, text: &str) {
        self.socket.send(wire::text(text.as_bytes()));
    }

    fn close(&mut self, code: u16, reason: &str) {
        self.socket.close_with(self.ctx, code, reason, false);
    }

    fn charge_frame(&mut self, units: u32) -> Result<(), Refused> {
        let s = &mut *self.socket;
        if units == 0 && !s.take_free_frame(Instant::now()) {
            return Err(Refused {
                reason: Reason::RateLimited,
                retry_after: s.charging.free_frames.wait_at(1.0, Instant::now()),
                balance: None,
            });
        }
        let price = Price::frame(units, 0, s.charging.admission.limits(), None);
        self.charge(price)?;
        self.socket.node.metrics.messages_in.inc();
        Ok(())
    }

    fn charge_account_frame(&mut self, units: u32, bytes: usize) -> Result<(), Refused> {
        let s = &mut *self.socket;
        let now = Instant::now();
        if units == 0 && !s.take_free_frame(now) {
            return Err(Refused {
                reason: Reason::RateLimited,
                retry_after: s.charging.free_frames.wait_at(1.0, now),
                balance: None,
            });
        }
        let price = Price::frame(units, bytes, s.charging.admission.limits(), None);
        let payer = s.charging.payer(&s.id, true, None);
        let charge::Pending::Ready(outcome) = s.node.ledger().charge(payer, price, now) else {
            unreachable!("a connection's own buckets answer at once")
        };
        let admitted = outcome?;
        s.node.metrics.messages_in.inc();
        if let Some(sample) = admitted.sample {
            s.charge_account(sample, self.ctx);
        }
        Ok(())
    }

    fn owe_frame(&mut self, units: u32) {
        // Never refused: the outcome says nothing.
        let _ = self.charge(Price::owed(units));
    }

    fn ping(&mut self) -> bool {
        let s = &mut *self.socket;
        if s.charging.pings.try_take(1.0, Instant::now()).is_ok() {
            return true;
        }
        s.exceeded(Layer::Connection, "ping_flood", None, Duration::ZERO, false);
        false
    }

    fn admit(&mut self, who: Who) {
        let s = &*self.socket;
        let (node, ip, conn) = (s.node.clone(), s.id.ip, s.id.conn);
        let work = async move {
            let verdict = handshake::admit_later(&node, ip, &who, conn).await;
            (who, verdict)
        };
        self.ctx.spawn(
            wrap_future(work).map(|(who, verdict), act: &mut Socket, ctx| {
                if act.closing {
                    return;
                }
                let verdict: Result<(), Refusal> = match verdict {
                    Ok(slot) => {
                        act.become_who(ctx, who, slot);
                        Ok(())
                    }
                    Err(r) => Err(r),
                };
                act.with_dialect(ctx, |d, link| d.admitted(link, verdict));
            }),
        );
    }

    fn spawn(&mut self, work: Work) {
        self.ctx
            .spawn(wrap_future(work).map(|output, act: &mut Socket, ctx| {
                if !act.closing {
                    act.with_dialect(ctx, |d, link| d.done(link, output));
                }
            }));
    }
}
