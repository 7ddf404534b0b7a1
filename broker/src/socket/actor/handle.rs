//! What a socket does with each client frame: admission first (cheapest
//! refusal first, before any permission check or registry lookup), then
//! the operation.

use std::time::{Duration, Instant};

use actix::prelude::*;
use bytes::Bytes;
use serde_json::value::RawValue;

use super::Socket;
use crate::account::{Balance, Charge, Sample};
use crate::charge::{self, Admitted, Price, Reason};
use crate::idempotency::Keyed;
use crate::limiter::Due;
use crate::metrics::Layer;
use crate::protocol::wire::{self, BudgetView, ErrorFrame};
use crate::protocol::{ClientFrame, CloseCode, ErrorCode, frames};
use crate::socket::inbound::{InError, InFrame};

impl StreamHandler<Result<InFrame, InError>> for Socket {
    fn handle(&mut self, item: Result<InFrame, InError>, ctx: &mut Context<Self>) {
        self.reading.last_heard = Instant::now();
        match item {
            Ok(InFrame::Close(code)) => {
                if !self.closing {
                    self.closing = true;
                    self.outbox.stop_deliveries(false);
                    self.outbox.send(wire::close_echo(code));
                }
                ctx.stop();
            }
            _ if self.closing => {}
            Ok(InFrame::Text(bytes)) if self.dialect.is_some() => self.on_dialect_text(&bytes, ctx),
            Ok(InFrame::Binary(len)) if self.dialect.is_some() => {
                self.with_dialect(ctx, |d, link| d.binary(link, len));
            }
            Ok(InFrame::Text(bytes)) => self.on_text(bytes, ctx),
            Ok(InFrame::Binary(_)) => {
                self.on_bad_frame(None, "binary frames are not accepted; send JSON text", ctx)
            }
            Ok(InFrame::Ping(payload)) => {
                // Answered, never charged to the message budget, but bounded:
                // a ping flood is ignored past its own bucket.
                if self.charging.pings.try_take(1.0, Instant::now()).is_ok() {
                    self.send(wire::pong(&payload));
                } else {
                    self.exceeded(Layer::Connection, "ping_flood", None, Duration::ZERO, false);
                }
            }
            Ok(InFrame::Pong) => {}
            Err(InError::TooLarge(_)) => {
                self.exceeded(
                    Layer::Connection,
                    "payload_too_large",
                    None,
                    Duration::ZERO,
                    false,
                );
                self.close(ctx, CloseCode::MessageTooBig);
            }
            Err(InError::Protocol(why)) => {
                self.span()
                    .in_scope(|| tracing::info!(%why, "WebSocket protocol error"));
                self.exceeded(
                    Layer::Connection,
                    "protocol_error",
                    None,
                    Duration::ZERO,
                    false,
                );
                self.close(ctx, CloseCode::ProtocolError);
            }
        }
        self.refresh_gate();
    }
}

impl Socket {
    pub(super) fn on_text(&mut self, bytes: Bytes, ctx: &mut Context<Self>) {
        let Ok(text) = std::str::from_utf8(&bytes) else {
            self.exceeded(
                Layer::Connection,
                "invalid_utf8",
                None,
                Duration::ZERO,
                false,
            );
            self.close(ctx, CloseCode::InvalidUtf8);
            return;
        };
        let frame = match frames::parse(text, self.limits().max_json_depth) {
            Ok(f) => f,
            Err(e) => {
                let id = e.id;
                self.on_bad_frame(id.as_deref(), &e.message, ctx);
                return;
            }
        };
        let now = Instant::now();
        let broker = &self.node.broker;
        let mut units = self
            .charging
            .admission
            .price(&frame, |channel| broker.subscribers(channel));
        if let ClientFrame::Publish {
            channel,
            key: Some(key),
            ..
        } = &frame
        {
            let keyed = Keyed {
                publisher: &self.id.account,
                key,
            };
            if self.node.is_duplicate(channel, Some(keyed)) {
                // §17: a duplicate pays the base price, no size or fan-out.
                units = self.charging.admission.limits().costs.publish;
            }
        }
        if units == 0 && !self.take_free_frame(now) {
            self.record_drop(frame.id(), now, ctx);
            return;
        }
        let node = &self.node;
        let price = Price::frame(
            units,
            bytes.len(),
            self.charging.admission.limits(),
            frame.channel(),
        );
        let op = frame.op().filter(|_| !self.rules_skipped);
        let payer = self.charging.payer(&self.id, true, op);
        let charge::Pending::Ready(outcome) = node.ledger().charge(payer, price, now) else {
            unreachable!("a connection's own buckets answer at once")
        };
        let admitted = match outcome {
            Ok(admitted) => admitted,
            Err(refused) => {
                match refused.reason {
                    Reason::CostExceedsMax { cost, max } => {
                        let message = format!(
                            "this operation costs {cost} units, above the largest single charge of {max}; \
                             send a smaller payload or raise costs.max_single in the plan"
                        );
                        self.send(
                            ErrorFrame::new(ErrorCode::CostExceedsMax)
                                .id(frame.id())
                                .message(&message)
                                .encode(),
                        );
                    }
                    Reason::Rule { hold: true } => self.hold(bytes, refused.retry_after, ctx),
                    Reason::RateLimited | Reason::BytesLimited | Reason::Rule { hold: false } => {
                        self.record_drop(frame.id(), now, ctx)
                    }
                }
                return;
            }
        };
        self.node.metrics.messages_in.inc();
        if let Some(sample) = admitted.sample {
            self.charge_account(sample, ctx);
        }
        self.executing = units;
        self.execute(frame, ctx);
        self.executing = 0;
        self.maybe_budget_frame(now);
    }

    /// A frame priced 0 units takes a token from its own small bucket
    /// (like pings) instead: free is not unlimited, since each one is
    /// answered. `false`: refused (counted as `free_frame_flood`).
    pub(super) fn take_free_frame(&mut self, now: Instant) -> bool {
        if self.charging.free_frames.try_take(1.0, now).is_ok() {
            return true;
        }
        self.exceeded(
            Layer::Connection,
            "free_frame_flood",
            None,
            Duration::ZERO,
            false,
        );
        false
    }

    /// Holds a frame a rule refused for a short wait: stop reading the
    /// socket, then try the frame again (seed 003's lossless throttling of
    /// a sequential stream). A second refusal beyond the hold limit drops
    /// and reports it.
    fn hold(&mut self, bytes: Bytes, wait: Duration, ctx: &mut Context<Self>) {
        self.reading.held = Some(bytes);
        self.refresh_gate();
        ctx.run_later(wait, |act, ctx| {
            if let Some(b) = act.reading.held.take() {
                act.on_text(b, ctx);
            }
            act.refresh_gate();
        });
    }

    /// Reading pauses while a frame is held, while too many dropped ids
    /// wait for their notice, and while the socket is over its outbound
    /// mark: answers count toward the mark, so a client that keeps asking
    /// and never reads is held by TCP's back-pressure at the mark plus one
    /// answer, not at every answer its frame budget paid for. Reading goes
    /// on once the queue falls under the mark ([`Drained`](crate::socket::Drained)), and
    /// while closing, for the peer's close frame.
    pub(super) fn refresh_gate(&self) {
        let cap = self.node.config.load().socket.max_pending_drop_ids;
        let over_mark = !self.closing && self.gauge.pending() > self.gauge.high_water();
        if self.reading.held.is_some()
            || self.asking_balance
            || self.charging.notice.pending_ids() >= cap
            || over_mark
        {
            self.reading.gate.pause();
        } else if self.reading.gate.is_paused() {
            self.reading.gate.resume();
        }
    }

    /// Takes `units` the connection owes for what it already holds (an
    /// SSE stream's channels at its opening, a recovery's history) from
    /// its bucket even below zero ([`Price::owed`]), and samples them into
    /// the account budget, as an admitted frame's units are.
    pub(super) fn owe(&mut self, units: u32, ctx: &mut Context<Self>) {
        let payer = self.charging.payer(&self.id, true, None);
        let charge::Pending::Ready(outcome) =
            self.node
                .ledger()
                .charge(payer, Price::owed(units), Instant::now())
        else {
            unreachable!("a connection's own buckets answer at once")
        };
        if let Ok(Admitted {
            sample: Some(sample),
            ..
        }) = outcome
        {
            self.charge_account(sample, ctx);
        }
    }

    pub(super) fn charge_account(&mut self, sample: Sample, ctx: &mut Context<Self>) {
        let Some(slot) = &self.slots.account else {
            return;
        };
        let Some(supervisor) = slot.supervisor() else {
            return;
        };
        let charge = supervisor.send(Charge {
            units: sample.units,
            since: sample.since,
            limits: self.limits().clone(),
        });
        ctx.spawn(charge.into_actor(self).map(|view, act, _| {
            if let Ok(view) = view {
                act.charging.account_view = Some(view);
            }
        }));
    }

    /// A frame that did not parse (or a binary frame): charged like any
    /// other so garbage is not free, then answered with `bad_request`.
    fn on_bad_frame(&mut self, id: Option<&RawValue>, message: &str, ctx: &mut Context<Self>) {
        let now = Instant::now();
        let price = Price::malformed(self.charging.admission.limits());
        let payer = self.charging.payer(&self.id, false, None);
        let charge::Pending::Ready(outcome) = self.node.ledger().charge(payer, price, now) else {
            unreachable!("a connection's own buckets answer at once")
        };
        if outcome.is_err() {
            self.record_drop(id, now, ctx);
            return;
        }
        self.exceeded(
            Layer::Connection,
            "bad_request",
            None,
            Duration::ZERO,
            false,
        );
        self.send(
            ErrorFrame::new(ErrorCode::BadRequest)
                .id(id)
                .message(message)
                .encode(),
        );
    }

    /// Counts a dropped frame toward the next `rate_limited` notice.
    fn record_drop(&mut self, id: Option<&RawValue>, now: Instant, ctx: &mut Context<Self>) {
        match self.charging.notice.record(id.map(ToOwned::to_owned), now) {
            Due::Now => self.flush_notice(now),
            Due::At(when) => {
                ctx.run_later(when.saturating_duration_since(now), |act, _| {
                    act.flush_notice(Instant::now());
                });
            }
            Due::Scheduled => {}
        }
        // Every id must be answered, so ids are held until the next notice;
        // past the cap, stop reading until it goes out (TCP back-pressure).
        self.refresh_gate();
    }

    pub(super) fn flush_notice(&mut self, now: Instant) {
        if let Some(n) = self.charging.notice.take(now) {
            let retry = self.charging.admission.next_token(now);
            self.send(
                ErrorFrame::new(ErrorCode::RateLimited)
                    .retry_after_ms(retry_ms(retry))
                    .dropped(n.dropped)
                    .ids(&n.ids)
                    .encode(),
            );
        }
        self.refresh_gate();
    }

    fn execute(&mut self, frame: ClientFrame<'_>, ctx: &mut Context<Self>) {
        match frame {
            ClientFrame::Subscribe { id, channel, since } => {
                self.subscribe(id, &channel, since, ctx)
            }
            ClientFrame::Unsubscribe { id, channel } => self.unsubscribe(id, &channel),
            ClientFrame::Publish {
                id,
                channel,
                data,
                key,
            } => self.publish(id, &channel, data, key.as_deref(), ctx),
            ClientFrame::Budget { id } => self.request_budget(id, ctx),
            ClientFrame::Refresh { id, token } => self.refresh(id, &token, ctx),
            ClientFrame::Presence { id, channel, limit } => {
                self.read_presence(id, &channel, Some(limit), ctx)
            }
            ClientFrame::PresenceStats { id, channel } => {
                self.read_presence(id, &channel, None, ctx)
            }
            ClientFrame::Rpc { id, method, data } => self.rpc(id, &method, data, ctx),
        }
    }

    /// The frame being executed is refused for its input (a forbidden
    /// channel, more subscriptions than the plan allows): it costs what
    /// such a refusal costs on every front, `costs.malformed`
    /// ([`crate::admission::refusal_units`]), not the operation's price
    /// (issue 42: a refused `subscribe` cost `costs.subscribe` here). The
    /// difference goes back to, or is owed by, the connection; what its
    /// admission already sampled into the account budget stays there (the
    /// roll-up counts what the connection admitted).
    pub(super) fn refused_input(&mut self, code: ErrorCode) {
        let charged = std::mem::take(&mut self.executing);
        let costs = &self.charging.admission.limits().costs;
        let owed = crate::admission::refusal_units(costs, code);
        if charged > owed {
            self.charging.admission.refund(charged - owed, 0);
        } else if owed > charged {
            self.charging.admission.owe(owed - charged, Instant::now());
        }
    }

    pub(super) fn forbid(&mut self, id: Option<&RawValue>, channel: &str, what: &str) {
        self.refused_input(ErrorCode::Forbidden);
        self.exceeded(
            Layer::Connection,
            "forbidden",
            Some(channel),
            Duration::ZERO,
            false,
        );
        let message = format!("this token may not {what} on {channel:?}");
        self.send(
            ErrorFrame::new(ErrorCode::Forbidden)
                .id(id)
                .channel(channel)
                .message(&message)
                .encode(),
        );
    }

    /// Answers a `budget` request with the account balance as the
    /// supervisor has it now.
    fn request_budget(&mut self, id: Option<&RawValue>, ctx: &mut Context<Self>) {
        let id: Option<Box<RawValue>> = id.map(ToOwned::to_owned);
        match self.slots.account.as_ref().and_then(|s| s.supervisor()) {
            Some(supervisor) => {
                self.asking_balance = true;
                self.refresh_gate();
                ctx.spawn(
                    supervisor
                        .send(Balance)
                        .into_actor(self)
                        .map(move |view, act, _| {
                            if let Ok(Some(v)) = view {
                                act.charging.account_view = Some(v);
                            }
                            act.asking_balance = false;
                            act.send_budget(id.as_deref(), Instant::now());
                            act.refresh_gate();
                        }),
                );
            }
            None => self.send_budget(id.as_deref(), Instant::now()),
        }
    }

    fn send_budget(&mut self, id: Option<&RawValue>, now: Instant) {
        let (remaining, capacity, rate) = self.charging.admission.balance(now);
        let connection = BudgetView {
            remaining: remaining.max(0.0) as u64,
            capacity: capacity as u64,
            refill_per_sec: rate,
        };
        let l = self.limits();
        let share = self.node.limiter_store.account_share(&self.id.account);
        let full = (f64::from(l.account_burst) * share) as u64;
        let account = self.charging.account_view.unwrap_or(BudgetView {
            remaining: full,
            capacity: full,
            refill_per_sec: l.account_messages_per_sec * share,
        });
        self.send(wire::budget(id, connection, Some(account)));
    }

    /// Unsolicited `budget` frames while a budget is below half, at most
    /// every `budget_frame_interval_ms`, so clients see their balance
    /// before they are limited.
    fn maybe_budget_frame(&mut self, now: Instant) {
        let l = self.limits();
        if !l.budget_frames {
            return;
        }
        let interval = Duration::from_millis(l.budget_frame_interval_ms);
        if self
            .charging
            .last_budget_frame
            .is_some_and(|t| now - t < interval)
        {
            return;
        }
        let (remaining, capacity, _) = self.charging.admission.balance(now);
        let account_low = self
            .charging
            .account_view
            .is_some_and(|v| v.remaining * 2 < v.capacity);
        if remaining * 2.0 < capacity || account_low {
            self.charging.last_budget_frame = Some(now);
            self.send_budget(None, now);
        }
    }
}

/// Milliseconds for `retryAfterMs`: rounded up, and never 0 for a wait.
pub(super) fn retry_ms(d: Duration) -> u64 {
    let ms = d.as_micros().div_ceil(1000);
    u64::try_from(ms).unwrap_or(u64::MAX).max(1)
}
