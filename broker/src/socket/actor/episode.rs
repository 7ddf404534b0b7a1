//! A socket's drop episodes: one begins when the hub drops a message for
//! it (or a backlog cannot move), runs the slow-consumer grace (4008 when
//! it outlasts `outbound_grace_ms`), and ends when the socket drains under
//! its mark, with one `slow_consumer` notice saying how many were lost
//! (§11), or earlier, ahead of a recovering subscribe's ack.

use std::time::{Duration, Instant};

use actix::prelude::*;

use super::Socket;
use crate::metrics::Layer;
use crate::protocol::CloseCode;
use crate::protocol::wire;
use crate::socket::{Congested, Drained};

impl Handler<Congested> for Socket {
    type Result = ();

    fn handle(&mut self, _: Congested, ctx: &mut Context<Self>) {
        self.congested(ctx);
        // A drop episode on a socket already under its mark (messages lost
        // from a recovery's page, or a queue the transport emptied before
        // this arrived) would wait for a `Drained` that only comes when
        // bytes reach the kernel: with nothing queued, none comes, and the
        // loss would never be reported. So it is reported now.
        if self.gauge.is_congested() && self.gauge.pending() < self.gauge.high_water() {
            <Self as Handler<Drained>>::handle(self, Drained, ctx);
        }
    }
}

impl Socket {
    /// A drop episode began: close with 4008 if it outlasts the grace.
    fn congested(&mut self, ctx: &mut Context<Self>) {
        if self.episode.since.is_none() {
            self.episode.since = Some(Instant::now());
            let grace = Duration::from_millis(self.limits().outbound_grace_ms);
            // An episode that ended and began again within one timer tick
            // would otherwise leave two timers that both see the grace
            // passed: the socket would be counted closed twice.
            if let Some(old) = self.episode.grace.take() {
                ctx.cancel_future(old);
            }
            self.episode.grace = Some(ctx.run_later(grace, move |act, ctx| {
                act.episode.grace = None;
                // Still over the mark, or a backlog still cannot move.
                let stuck = act.gauge.is_congested() || act.outbox.is_stalled();
                if stuck
                    && !act.closing
                    && act
                        .episode
                        .since
                        .is_some_and(|since| since.elapsed() >= grace)
                {
                    act.socket_event(Layer::Outbound, "slow_consumer_closed");
                    act.close(ctx, CloseCode::SlowConsumer);
                }
            }));
        }
    }
}

impl Handler<Drained> for Socket {
    type Result = ();

    fn handle(&mut self, _: Drained, ctx: &mut Context<Self>) {
        self.refresh_gate();
        if self.episode.since.take().is_none() {
            return;
        }
        // A backlog that moved may be stalled again already: the transport
        // and the actor pump concurrently, so the `Congested` of that new
        // stall can reach the mailbox before this `Drained`, and would be
        // lost. The grace restarts here instead.
        if self.outbox.is_stalled() {
            self.congested(ctx);
        }
        if self.sse.is_some() && !self.closing {
            return self.sse_drained(ctx);
        }
        // The count below covers them.
        self.outbox.take_lost();
        if self.dialect.is_some() {
            let dropped = self.gauge.clear_congestion();
            if !self.closing && self.with_dialect(ctx, |d, link| d.drained(link, dropped)) {
                return;
            }
            return self.log_dropped(dropped);
        }
        self.report_dropped(true);
    }
}

impl Socket {
    /// Tells the client how many messages to it were dropped
    /// (`slow_consumer`, §11): at the end of a drop episode (`end`), or
    /// earlier, ahead of a recovering subscribe's ack
    /// (`channels.rs`), the episode going on.
    fn report_dropped(&mut self, end: bool) {
        let closing = self.closing;
        let dropped = self.outbox.report_drops(end, |dropped| {
            (dropped > 0 && !closing).then(|| {
                wire::ErrorFrame::new(crate::protocol::ErrorCode::SlowConsumer)
                    .dropped(dropped)
                    .message("messages to this socket were dropped because it was not reading")
                    .encode()
            })
        });
        // Early (a recovering subscribe during an episode) with nothing
        // dropped yet: no event; the episode's end still logs its count.
        if end || dropped > 0 {
            self.log_dropped(dropped);
        }
    }

    fn log_dropped(&self, dropped: u64) {
        crate::exceeded::Exceeded::new(Layer::Outbound, "slow_consumer", &self.id.account)
            .conn(&self.id.label)
            .count(dropped)
            .log();
        if dropped > 0 && !self.closing {
            let _e = self.span().entered();
            tracing::info!(dropped, "slow consumer drained");
        }
    }

    /// Reports the drops counted so far before a subscribe with `since`
    /// is joined, so its ack follows them. A client recovers on a
    /// `slow_consumer` by subscribing again with `since`; when more
    /// messages had been dropped by the time that subscribe was read (the
    /// socket still over its mark), their notice used to come at the
    /// episode's end, after the ack, although the recovery the ack starts
    /// covers every one of them (they are at or below its position): the
    /// client subscribed again for nothing, and paid for the same history
    /// twice (a browser waited 15 s on its debt, issue 42). Drops after
    /// this point are of live messages above the position, and are
    /// reported when the episode ends, after the ack, as before.
    pub(super) fn report_dropped_before_recovery(&mut self) {
        if self.sse.is_none() && self.dialect.is_none() && self.gauge.is_congested() {
            self.report_dropped(false);
        }
    }
}
