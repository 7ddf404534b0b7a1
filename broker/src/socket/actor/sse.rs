//! What the socket's actor does differently for an SSE stream: it joins
//! the stream's channels after the welcome (each from its position, with
//! §2's `since`), and where a WebSocket would say `slow_consumer` after a
//! drop episode, it continues every channel from history instead, so the
//! stream never skips a message (§14). [`Stream`] is what the actor
//! keeps of the request until then.

use std::collections::HashSet;

use actix::prelude::*;
use serde_json::value::RawValue;

use super::Socket;
use crate::cluster::Pending;
use crate::exceeded::Exceeded;
use crate::hub::{Joined, Sink, Subscriber};
use crate::metrics::Layer;
use crate::protocol::wire;
use crate::socket::sse::Ender;

/// An SSE stream's state in the socket's actor.
pub(in crate::socket) struct Stream {
    /// The channels to join once open, each with its `since` (taken when
    /// the actor starts; at most the plan's `max_subscriptions`).
    start: Vec<(String, Option<u64>)>,
    /// The channels of `start` a hook allowed at the request
    /// (`socket/sse/hooked.rs`): joined without asking again. At most
    /// `start`'s size.
    decided: HashSet<String>,
    /// What the channels cost (`price` in `socket/sse/mod.rs`), charged
    /// once the actor runs.
    price: u32,
    ender: Ender,
}

impl Stream {
    /// The stream's channels (each with its `since`), those a hook allowed
    /// already, and what they cost, for the actor to join once open.
    pub(in crate::socket) fn new(
        start: Vec<(String, Option<u64>)>,
        decided: HashSet<String>,
        price: u32,
        ender: Ender,
    ) -> Stream {
        Stream {
            start,
            decided,
            price,
            ender,
        }
    }

    /// Ends the response's connection (a close the reader did not take
    /// within `close_timeout_ms`).
    pub(in crate::socket) fn end_connection(&self) {
        self.ender.end();
    }
}

/// A stream's subscription ack names its channel as its `id`
/// (`socket/sse/render.rs` reads it back).
fn ack_id(channel: &str) -> Box<RawValue> {
    // Channel names are validated to a charset that needs no escaping.
    RawValue::from_string(format!("\"{channel}\"")).expect("a JSON string")
}

impl Socket {
    /// Joins the stream's channels, after the welcome: a channel with a
    /// position recovers after it (its ack becomes the `recovered` event),
    /// the others start live (their ack, an `id:` alone).
    pub(super) fn sse_open(&mut self, ctx: &mut Context<Self>) {
        let Some(stream) = &mut self.sse else { return };
        let start = std::mem::take(&mut stream.start);
        let units = std::mem::take(&mut stream.price);
        let decided = std::mem::take(&mut stream.decided);
        // Priced at the request (`price` in `socket/sse/mod.rs`); owed as
        // the same subscribes on a socket would be paid.
        self.owe(units, ctx);
        for (channel, since) in start {
            let id = ack_id(&channel);
            // A hook allowed it at the request already (`socket/sse/hooked.rs`).
            if decided.contains(&channel) {
                self.subscribe_allowed(Some(&id), &channel, since, ctx);
            } else {
                self.subscribe(Some(&id), &channel, since, ctx);
            }
        }
    }

    /// The reader caught up after a drop episode: every channel continues
    /// from history after the last `seq` queued, through the socket's own
    /// recovery (held messages, then live; no gap, no duplicate). Each
    /// subscription starts joining before the episode ends, so nothing
    /// newer goes out before what was dropped.
    pub(super) fn sse_drained(&mut self, ctx: &mut Context<Self>) {
        let rejoins = self.outbox.rejoin_live(&mut self.next_join);
        // A recovery that lost messages to the history's trimming goes on
        // with what is left; the stream says `recovered:false` for it.
        for channel in self.outbox.take_lost() {
            let lost = wire::ack(&ack_id(&channel), None, Some(false));
            self.send(lost);
        }
        let dropped = self.gauge.clear_congestion();
        Exceeded::new(Layer::Outbound, "slow_consumer", &self.id.account)
            .conn(&self.id.label)
            .count(dropped)
            .log();
        for (channel, since, join) in rejoins {
            let sub = Subscriber {
                conn: self.id.conn,
                sink: Sink::Socket(self.outbox.clone()),
                gauge: self.gauge.clone(),
            };
            match self.node.broker.subscribe(&channel, sub, Some(since)) {
                Pending::Ready(joined) => self.sse_rejoined(&channel, join, joined, ctx),
                Pending::Later(f) => {
                    ctx.spawn(f.into_actor(self).map(move |joined, act, ctx| {
                        act.sse_rejoined(&channel, join, joined, ctx);
                    }));
                }
            }
        }
    }

    /// A continued channel: nothing to say when history held everything
    /// (the position does not move: the messages that follow move it), a
    /// `recovered:false` event when it did not. What history delivers is
    /// a recovery, charged as one (`recovery_per_kib`, to the account
    /// through the connection's sample): a reader that stalls on purpose
    /// does not get the channel's traffic again for free.
    fn sse_rejoined(&mut self, channel: &str, join: u64, joined: Joined, ctx: &mut Context<Self>) {
        self.charge_recovered(joined.backlog.bytes(), ctx);
        let lost = joined.recovered == Some(false);
        let ack = wire::ack(&ack_id(channel), None, lost.then_some(false));
        self.outbox.joined(channel, join, Some(ack), joined);
    }
}
