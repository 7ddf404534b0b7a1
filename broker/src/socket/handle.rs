//! What a socket does with each client frame: admission first (cheapest
//! refusal first, before any permission check or registry lookup), then
//! the operation.

use std::time::{Duration, Instant};

use actix::prelude::*;
use bytes::Bytes;
use serde_json::value::RawValue;

use super::inbound::{InError, InFrame};
use super::{Shadow, Socket, Verdict};
use crate::hub::Subscriber;
use crate::limiter::Due;
use crate::metrics::Layer;
use crate::protocol::wire::{self, BudgetView, ErrorFrame};
use crate::protocol::{ClientFrame, CloseCode, ErrorCode, frames};

impl StreamHandler<Result<InFrame, InError>> for Socket {
    fn handle(&mut self, item: Result<InFrame, InError>, ctx: &mut Context<Self>) {
        self.last_heard = Instant::now();
        match item {
            Ok(InFrame::Close(code)) => {
                if !self.closing {
                    self.closing = true;
                    self.send(wire::close_echo(code));
                }
                ctx.stop();
            }
            _ if self.closing => {}
            Ok(InFrame::Text(bytes)) => self.on_text(bytes, ctx),
            Ok(InFrame::Binary(_)) => {
                self.on_bad_frame(None, "binary frames are not accepted; send JSON text", ctx)
            }
            Ok(InFrame::Ping(payload)) => {
                // Answered, never charged to the message budget, but bounded:
                // a ping flood is ignored past its own bucket.
                if self.pings.try_take(1.0, Instant::now()).is_ok() {
                    self.send(wire::pong(&payload));
                } else {
                    self.node.metrics.reject(Layer::Connection, "ping_flood");
                }
            }
            Ok(InFrame::Pong) => {}
            Err(InError::TooLarge(max)) => {
                self.span
                    .in_scope(|| tracing::info!(max, "message over the payload limit"));
                self.node
                    .metrics
                    .reject(Layer::Connection, "payload_too_large");
                self.close(ctx, CloseCode::MessageTooBig);
            }
            Err(InError::Protocol(why)) => {
                self.span
                    .in_scope(|| tracing::info!(%why, "WebSocket protocol error"));
                self.node
                    .metrics
                    .reject(Layer::Connection, "protocol_error");
                self.close(ctx, CloseCode::ProtocolError);
            }
        }
    }
}

impl Socket {
    fn on_text(&mut self, bytes: Bytes, ctx: &mut Context<Self>) {
        let Ok(text) = std::str::from_utf8(&bytes) else {
            self.node.metrics.reject(Layer::Connection, "invalid_utf8");
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
        let cost = self.admission.price(&frame);
        let mut shadow = None;
        match self.admission.admit(cost, bytes.len(), now, &mut shadow) {
            Verdict::Admit => {}
            Verdict::Drop { reason, .. } => {
                self.node.metrics.reject(Layer::Connection, reason);
                self.record_drop(frame.id(), now, ctx);
                return;
            }
            Verdict::TooCostly { cost, max } => {
                self.node
                    .metrics
                    .reject(Layer::Connection, "cost_exceeds_max");
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
                return;
            }
        }
        if let Some(Shadow { reason }) = shadow {
            self.node.metrics.dry_run(Layer::Connection, reason);
            let _e = self.span.enter();
            tracing::info!(
                layer = "connection",
                reason,
                dry_run = true,
                "limit would have refused a frame"
            );
        }
        self.node.metrics.messages_in.inc();
        self.execute(frame, now);
    }

    /// A frame that did not parse (or a binary frame): charged like any
    /// other so garbage is not free, then answered with `bad_request`.
    fn on_bad_frame(&mut self, id: Option<&RawValue>, message: &str, ctx: &mut Context<Self>) {
        let now = Instant::now();
        let cost = self.admission.malformed_price();
        if let Verdict::Drop { reason, .. } = self.admission.admit(cost, 0, now, &mut None) {
            self.node.metrics.reject(Layer::Connection, reason);
            self.record_drop(id, now, ctx);
            return;
        }
        self.node.metrics.reject(Layer::Connection, "bad_request");
        self.send(
            ErrorFrame::new(ErrorCode::BadRequest)
                .id(id)
                .message(message)
                .encode(),
        );
    }

    /// Counts a dropped frame toward the next `rate_limited` notice.
    fn record_drop(&mut self, id: Option<&RawValue>, now: Instant, ctx: &mut Context<Self>) {
        match self.notice.record(id.map(ToOwned::to_owned), now) {
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
        let cap = self.node.config.load().socket.max_pending_drop_ids;
        if self.notice.pending_ids() >= cap && !self.gate.is_paused() {
            self.gate.pause();
        }
    }

    pub(super) fn flush_notice(&mut self, now: Instant) {
        if let Some(n) = self.notice.take(now) {
            let retry = self.admission.next_token(now);
            self.send(
                ErrorFrame::new(ErrorCode::RateLimited)
                    .retry_after_ms(retry_ms(retry))
                    .dropped(n.dropped)
                    .ids(&n.ids)
                    .encode(),
            );
        }
        if self.gate.is_paused() {
            self.gate.resume();
        }
    }

    fn execute(&mut self, frame: ClientFrame<'_>, now: Instant) {
        match frame {
            ClientFrame::Subscribe { id, channel, since } => self.subscribe(id, &channel, since),
            ClientFrame::Unsubscribe { id, channel } => {
                if let Some((name, _)) = self.subs.remove_entry(&*channel) {
                    self.node.bridge.unsubscribe(&name, self.id.conn);
                }
                if let Some(id) = id {
                    self.send(wire::ack(id, None, None));
                }
            }
            ClientFrame::Publish { id, channel, data } => {
                if !self.id.grants.publish.matches(&channel) {
                    self.forbid(id, &channel, "publish");
                    return;
                }
                let seq = self.node.bridge.publish(&channel, data.get());
                self.node.metrics.published("ws");
                if let Some(id) = id {
                    self.send(wire::ack(id, Some(seq), None));
                }
            }
            ClientFrame::Budget { id } => self.send_budget(id, now),
        }
    }

    fn forbid(&mut self, id: Option<&RawValue>, channel: &str, what: &str) {
        self.node.metrics.reject(Layer::Connection, "forbidden");
        let message = format!("this token may not {what} on {channel:?}");
        self.send(
            ErrorFrame::new(ErrorCode::Forbidden)
                .id(id)
                .channel(channel)
                .message(&message)
                .encode(),
        );
    }

    fn subscribe(&mut self, id: Option<&RawValue>, channel: &str, since: Option<u64>) {
        if !self.id.grants.subscribe.matches(channel) {
            self.forbid(id, channel, "subscribe");
            return;
        }
        let max = self.limits().max_subscriptions as usize;
        if !self.subs.contains_key(channel) && self.subs.len() >= max {
            self.node
                .metrics
                .reject(Layer::Connection, "too_many_subscriptions");
            let message = format!("a connection may hold at most {max} subscriptions");
            self.send(
                ErrorFrame::new(ErrorCode::TooManySubscriptions)
                    .id(id)
                    .channel(channel)
                    .message(&message)
                    .encode(),
            );
            return;
        }
        let sub = Subscriber {
            conn: self.id.conn,
            sink: self.self_recipient.clone(),
            gauge: self.gauge.clone(),
        };
        let joined = self.node.bridge.subscribe(channel, sub, since);
        // The ack first, then the held messages, then (via the mailbox)
        // live ones: nothing live can overtake, since the hub hands this
        // socket only messages published after it joined.
        if let Some(id) = id {
            self.send(wire::ack(id, None, joined.recovered));
        }
        let mut last = joined.last_seq;
        for (seq, frame) in joined.backlog {
            last = last.max(seq);
            self.send(frame);
        }
        self.subs.insert(channel.into(), last);
    }

    fn send_budget(&mut self, id: Option<&RawValue>, now: Instant) {
        let (remaining, capacity, rate) = self.admission.balance(now);
        let connection = BudgetView {
            remaining: remaining.max(0.0) as u64,
            capacity: capacity as u64,
            refill_per_sec: rate,
        };
        self.send(wire::budget(id, connection, None));
    }
}

/// Milliseconds for `retryAfterMs`: rounded up, and never 0 for a wait.
pub(super) fn retry_ms(d: Duration) -> u64 {
    let ms = d.as_micros().div_ceil(1000);
    u64::try_from(ms).unwrap_or(u64::MAX).max(1)
}
