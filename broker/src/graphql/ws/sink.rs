//! One `messages` subscription as the hub sees it: a subscriber of its own
//! (its own number, so one connection may hold several on a channel) whose
//! sink renders each message into the subscription's `next` message
//! ([`Shape`]) and queues it in the socket's outbox ([`Outlet`]), bounded
//! by the socket's gauge like every subscription of the socket. A live
//! message's body is rendered once per fan-out for all subscriptions with
//! the same selection ([`Renders`]) and queued, shared, after each one's
//! own head ([`Outlet::push_pair`]).
//!
//! Which messages go out, and when, is the session layer's
//! [`Subscription`] (joining, recovering in slices under half the mark,
//! live, broken), kept under this sink's lock as a socket keeps its
//! subscriptions beside its queue, with [`OnLoss::Break`]: a GraphQL
//! client cannot be told of a gap and go on, so a message the hub drops
//! for it (the socket over its mark), a `next` the queue refuses, or
//! history trimmed before its page was read breaks it at that `seq`:
//! nothing newer is queued, and once the socket drains the dialect ends it
//! with `SLOW_CONSUMER` naming the last `seq` sent ([`OpSink::end`]'s
//! [`Report`]), so a resume with `since` loses nothing and sees nothing
//! twice. This file only renders and queues.

use std::sync::{Arc, Weak};

use bytes::Bytes;
use parking_lot::Mutex;

use super::shape::Shape;
use crate::dialect::{Backlog, Outlet};
use crate::hub::{DirectSink, Joined, OutboundGauge, Page, Pages, Renders};
use crate::protocol::wire;
use crate::session::{
    Episode, Held, Joining, Next, Offer, OnLoss, Phase, Pumped, Report, Subscription,
};

/// Messages whose `data` is at most this many bytes are queued as one
/// entry per subscription: its own head (kept while the length stays the
/// same) and the body rendered once per fan-out, shared, written as two
/// slices; larger ones are queued in parts around the hub's bytes (their
/// `data` is not copied even once).
const WHOLE_MAX: usize = 1024;

struct State {
    /// Where the subscription stands, and what it holds: live messages
    /// held while it joins or recovers and at most one page of a
    /// cluster's history, all counted in the socket's gauge (whose mark
    /// the hub drops at; a page's budget is reserved under half the mark,
    /// `socket/outbox/pages.rs`).
    sub: Subscription,
    /// `extensions` for the first `next` (the charge, the recovery).
    first: Option<String>,
    /// The frame header and head ([`Shape::render_head`]) last queued
    /// before a shared body, and that body's length: the next body of the
    /// same length (the usual case: the header encodes only the length)
    /// takes a reference count instead of an allocation. One per
    /// subscription.
    head: Option<(usize, Bytes)>,
}

pub struct OpSink {
    /// Itself, for the page reads it starts.
    me: Weak<OpSink>,
    /// The hub subscriber's number (unique on the node).
    pub conn: u64,
    pub channel: Arc<str>,
    shape: Shape,
    /// The conflation slot of this subscription in the socket's queue.
    slot: Arc<str>,
    outlet: Arc<dyn Outlet>,
    state: Mutex<State>,
}

impl OpSink {
    pub fn new(
        conn: u64,
        channel: &str,
        shape: Shape,
        outlet: Arc<dyn Outlet>,
        first: Option<String>,
    ) -> Arc<OpSink> {
        Arc::new_cyclic(|me| OpSink {
            me: me.clone(),
            conn,
            channel: channel.into(),
            shape,
            slot: format!("{channel}\u{0}{conn}").into(),
            outlet,
            state: Mutex::new(State {
                sub: Subscription::new(OnLoss::Break),
                first,
                head: None,
            }),
        })
    }

    /// Renders and queues `seq`; `reserved` is what the gauge already
    /// counts for it (the hub's frame, or nothing for recovered history).
    /// `renders` holds the bodies rendered of this message so far (the
    /// fan-out's, or one of this subscription's own for history). Tells
    /// the subscription it was queued, or refused (a conflating key past
    /// the mark: the subscription breaks).
    fn queue(
        &self,
        st: &mut State,
        (seq, frame): (u64, &Bytes),
        key: Option<Arc<str>>,
        reserved: usize,
        renders: &mut Renders,
    ) {
        let gauge = self.outlet.gauge();
        let data = wire::message_data_slice(frame, &self.channel, seq);
        let ext = st.first.take();
        match key {
            None if data.len() <= WHOLE_MAX => {
                let body_key = self.shape.body_key();
                let body = match renders.get(body_key) {
                    Some(body) => body.clone(),
                    None => {
                        let body = Arc::new(self.shape.render_body(seq, data));
                        renders.keep(body_key, &body);
                        body
                    }
                };
                match ext {
                    // The first `next` only: its head is one of a kind.
                    Some(x) => {
                        let frame = self.shape.render_around(Some(&x), &body);
                        recount(gauge, reserved, frame.len());
                        self.outlet.push_frame(frame);
                    }
                    None => {
                        let head = match &st.head {
                            Some((len, head)) if *len == body.len() => head.clone(),
                            _ => {
                                let head = self.shape.render_head(body.len());
                                st.head = Some((body.len(), head.clone()));
                                head
                            }
                        };
                        recount(gauge, reserved, head.len() + body.len());
                        self.outlet.push_pair(head, body);
                    }
                }
                st.sub.queued(seq);
            }
            None => {
                let data = wire::message_data(frame, &self.channel, seq);
                let mut parts = self.shape.render(ext.as_deref(), seq, &data);
                recount(gauge, reserved, parts.iter().map(Bytes::len).sum());
                self.outlet.push(&mut parts);
                st.sub.queued(seq);
            }
            Some(key) => {
                let whole = self.shape.render_whole(ext.as_deref(), seq, data);
                recount(gauge, reserved, whole.len());
                if self.outlet.push_keyed(&self.slot, key, whole) {
                    st.sub.queued(seq);
                } else {
                    st.first = ext;
                    st.sub.refused(seq);
                }
            }
        }
    }

    /// Queues the live messages the subscription hands over as it goes
    /// live (held while it joined or recovered: those above its position,
    /// before any loss) and releases the rest. Asks for no room, so no
    /// recovered history moves here: that is [`Backlog::pump`]'s, under
    /// the socket's rule.
    fn flush(&self, st: &mut State) {
        loop {
            match st.sub.pump(&mut |_| false) {
                Next::Live(h) => {
                    let reserved = h.frame.len();
                    let held = (h.seq, &h.frame);
                    self.queue(st, held, h.key, reserved, &mut Renders::default());
                }
                Next::Release(h) => {
                    self.outlet.gauge().release(h.frame.len());
                }
                _ => return,
            }
        }
    }

    /// The bridge answered: the recovered history (in slices under the
    /// mark, [`Backlog`]), then what arrived meanwhile, each `seq` once and
    /// in order, stopping at a loss.
    pub fn joined(self: &Arc<Self>, joined: Joined) {
        let recovered = joined.recovered;
        let mut st = self.state.lock();
        let joining = st.sub.joined(joined);
        if joining == Joining::Ignored {
            return;
        }
        if let Some(recovered) = recovered {
            let x = st.first.take().unwrap_or_else(|| "{}".to_owned());
            st.first = Some(with_recovered(&x, recovered));
        }
        if joining == Joining::Live {
            self.flush(&mut st);
            return;
        }
        drop(st);
        self.outlet.recover(self.clone());
    }

    /// Whether a message of this subscription was lost.
    pub fn broken(&self) -> bool {
        self.state.lock().sub.is_broken()
    }

    /// Ends the subscription: nothing more is queued for it after this.
    /// What it held leaves the gauge; how many were lost and the last
    /// `seq` queued are its `SLOW_CONSUMER`.
    pub fn end(self: &Arc<Self>) -> Report {
        let mut st = self.state.lock();
        let report = st.sub.report();
        let left = st.sub.end();
        drop(st);
        self.outlet.gauge().release(left.held + left.paged);
        if matches!(left.was, Phase::Joining | Phase::Recovering) {
            let me: Arc<dyn Backlog> = self.clone();
            self.outlet.forget(&me);
        }
        report
    }
}

impl DirectSink for OpSink {
    fn message(
        &self,
        _channel: &Arc<str>,
        seq: u64,
        frame: &Bytes,
        key: Option<&Arc<str>>,
        renders: &mut Renders,
    ) {
        let mut st = self.state.lock();
        match st.sub.offer(seq, frame, key) {
            Offer::Deliver => {
                let reserved = frame.len();
                self.queue(&mut st, (seq, frame), key.cloned(), reserved, renders);
            }
            Offer::Held => {}
            Offer::Release => {
                drop(st);
                self.outlet.gauge().release(frame.len());
            }
        }
    }

    fn congested(&self) {
        self.outlet.congested();
    }

    fn dropped(&self, _channel: &Arc<str>, seq: u64) {
        self.state.lock().sub.lost(seq);
    }
}

impl Backlog for OpSink {
    fn pump(&self, room: &dyn Fn(usize) -> bool) -> Pumped {
        let mut step = Pumped::default();
        let mut st = self.state.lock();
        loop {
            match st.sub.pump(&mut |waiting| room(waiting)) {
                Next::Recovered { seq, frame, paged } => {
                    // A page's frames are counted in the gauge since they
                    // were read; the hub's history is not.
                    let reserved = if paged { frame.len() } else { 0 };
                    let mut renders = Renders::default();
                    self.queue(&mut st, (seq, &frame), None, reserved, &mut renders);
                    step.moved = true;
                }
                Next::Live(h) => {
                    let reserved = h.frame.len();
                    let held = (h.seq, &h.frame);
                    self.queue(&mut st, held, h.key, reserved, &mut Renders::default());
                }
                // An operation holds no frames of its own: were one handed
                // over, it would be released like a held message.
                Next::Release(Held { frame, .. }) | Next::Own(frame) => {
                    self.outlet.gauge().release(frame.len());
                }
                Next::Stalled => {
                    step.stalled = true;
                    return step;
                }
                Next::Page => {
                    self.read_page(&mut st);
                    return step;
                }
                Next::Done => {
                    step.done = true;
                    return step;
                }
            }
        }
    }
}

impl OpSink {
    /// Starts reading the next page of the recovery, inside the room the
    /// socket grants beside what the subscription holds
    /// (`socket/outbox/pages.rs`).
    fn read_page(&self, st: &mut State) {
        if !st.sub.wants_page() {
            return;
        }
        let Some(budget) = self.outlet.page_room(st.sub.waiting()) else {
            return;
        };
        let source = st.sub.source();
        let (Some(read), Some(source), Some(me)) =
            (st.sub.next_page(budget), source, self.me.upgrade())
        else {
            self.outlet.page_done(budget);
            return;
        };
        tokio::spawn(async move {
            let page = read.await;
            me.paged(&source, budget, page);
        });
    }

    /// A page arrived: its frames wait in the subscription (counted in the
    /// gauge) and are pumped now. Messages that left the history before it
    /// was read break the subscription where its client's history stops,
    /// as a drop at the mark does: the rest of the backlog is given up,
    /// what was held before the hole is queued, and `SLOW_CONSUMER` says
    /// how many were lost and the last `seq` sent once the socket reports
    /// the episode.
    fn paged(&self, source: &Arc<dyn Pages>, budget: usize, page: Option<Page>) {
        let gauge = self.outlet.gauge();
        let mut st = self.state.lock();
        let filled = st.sub.filled(source, page);
        gauge.add(filled.bytes);
        gauge.release(filled.released);
        if filled.lost > 0 {
            self.flush(&mut st);
        }
        drop(st);
        self.outlet.page_done(budget);
        if filled.lost > 0 && Episode::begins(gauge.record_drops(filled.lost)) {
            self.outlet.congested();
        }
        self.outlet.pump_backlogs();
    }
}

/// The gauge counted `reserved` bytes for a message now queued as `len`
/// (one update, not two: the socket's writer updates it too).
fn recount(gauge: &OutboundGauge, reserved: usize, len: usize) {
    if len >= reserved {
        gauge.add(len - reserved);
    } else {
        gauge.release(reserved - len);
    }
}

/// `extensions` with `"recovered"` first (§2's answer to `since`).
fn with_recovered(extensions: &str, recovered: bool) -> String {
    let rest = extensions.strip_prefix('{').unwrap_or("}");
    let sep = if rest.starts_with('}') { "" } else { "," };
    format!("{{\"recovered\":{recovered}{sep}{rest}")
}

#[cfg(test)]
mod tests;
