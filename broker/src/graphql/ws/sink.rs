//! One `messages` subscription as the hub sees it: a subscriber of its own
//! (its own number, so one connection may hold several on a channel) whose
//! sink renders each message into the subscription's `next` message
//! ([`Shape`]) and queues it in the socket's outbox ([`Outlet`]), bounded
//! by the socket's gauge like every subscription of the socket. A live
//! message's body is rendered once per fan-out for all subscriptions with
//! the same selection ([`Renders`]) and queued, shared, after each one's
//! own head ([`Outlet::push_pair`]).
//!
//! Its position sits under its own lock, as a socket's do beside its
//! queue: `Joining` holds live messages until the recovered history is
//! queued, `Live` queues each `seq` once and in order. A message the hub
//! drops for it (the socket over its mark) breaks it at that `seq`:
//! nothing newer is queued, and once the socket drains the dialect ends it
//! with `SLOW_CONSUMER` naming the last `seq` sent, so a resume with
//! `since` loses nothing and sees nothing twice.

use std::sync::{Arc, Weak};

use bytes::Bytes;
use parking_lot::Mutex;

use super::shape::Shape;
use crate::hub::{DirectSink, Joined, OutboundGauge, Page, Pages, Recovery, Renders, Reserve};
use crate::node::dialect::{Backlog, Outlet, Step};
use crate::protocol::wire;

/// Messages whose `data` is at most this many bytes are queued as one
/// entry per subscription: its own head (kept while the length stays the
/// same) and the body rendered once per fan-out, shared, written as two
/// slices; larger ones are queued in parts around the hub's bytes (their
/// `data` is not copied even once).
const WHOLE_MAX: usize = 1024;

/// A delivery held while joining: its bytes stay counted in the gauge.
struct Held {
    seq: u64,
    frame: Bytes,
    key: Option<Arc<str>>,
}

enum Pos {
    /// Waiting for the bridge (recovery, cluster-wide delivery).
    Joining(Vec<Held>),
    /// The recovered history after `since` (at most `history.size`
    /// messages; the hub's own frames, not copies, in memory mode; from a
    /// cluster's history, one page at a time, `page_bytes` of it waiting
    /// here counted in the gauge, its budget reserved under half the
    /// socket's mark: `socket/pages.rs`), queued in slices under the
    /// socket's mark as it drains ([`Backlog`], the socket's recovery);
    /// live messages wait behind it in `held` (`held_bytes` of them,
    /// counted in the gauge, so the hub stops adding at the mark).
    Recovering {
        backlog: Recovery,
        held: Vec<Held>,
        held_bytes: usize,
        page_bytes: usize,
        last: u64,
    },
    /// The highest `seq` handled (sent or lost).
    Live(u64),
    /// Ended: nothing more is queued.
    Ended,
}

struct State {
    pos: Pos,
    /// The last `seq` queued (`lastSeq` of a `SLOW_CONSUMER`).
    sent: u64,
    /// The first `seq` lost, and how many were.
    broken_at: Option<u64>,
    dropped: u64,
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

/// How a subscription ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ended {
    /// Messages lost (0: none).
    pub dropped: u64,
    pub last_seq: u64,
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
                pos: Pos::Joining(Vec::new()),
                sent: 0,
                broken_at: None,
                dropped: 0,
                first,
                head: None,
            }),
        })
    }

    /// Renders and queues `seq`; `reserved` is what the gauge already
    /// counts for it (the hub's frame, or nothing for recovered history).
    /// `renders` holds the bodies rendered of this message so far (the
    /// fan-out's, or one of this subscription's own for history).
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
                st.sent = seq;
            }
            None => {
                let data = wire::message_data(frame, &self.channel, seq);
                let mut parts = self.shape.render(ext.as_deref(), seq, &data);
                recount(gauge, reserved, parts.iter().map(Bytes::len).sum());
                self.outlet.push(&mut parts);
                st.sent = seq;
            }
            Some(key) => {
                let whole = self.shape.render_whole(ext.as_deref(), seq, data);
                recount(gauge, reserved, whole.len());
                if self.outlet.push_keyed(&self.slot, key, whole) {
                    st.sent = seq;
                } else {
                    st.first = ext;
                    st.broken_at.get_or_insert(seq);
                    st.dropped += 1;
                }
            }
        }
    }

    /// The bridge answered: the recovered history (in slices under the
    /// mark, [`Backlog`]), then what arrived meanwhile, each `seq` once and
    /// in order, stopping at a loss.
    pub fn joined(self: &Arc<Self>, joined: Joined) {
        let mut st = self.state.lock();
        let held = match std::mem::replace(&mut st.pos, Pos::Ended) {
            Pos::Joining(held) => held,
            other => {
                st.pos = other;
                return;
            }
        };
        if let Some(recovered) = joined.recovered {
            let x = st.first.take().unwrap_or_else(|| "{}".to_owned());
            st.first = Some(with_recovered(&x, recovered));
        }
        let last = joined.position();
        // Before anything is queued the client holds everything up to the
        // first recovered `seq`, or up to where the subscription went live.
        st.sent = joined.backlog.before_first().unwrap_or(last);
        if joined.backlog.is_done() {
            self.go_live(&mut st, held, last);
            return;
        }
        st.pos = Pos::Recovering {
            backlog: joined.backlog,
            held_bytes: held.iter().map(|h| h.frame.len()).sum(),
            page_bytes: 0,
            held,
            last,
        };
        drop(st);
        self.outlet.recover(self.clone());
    }

    /// The backlog is all queued: the live messages held behind it follow
    /// (those above `last`, before any loss), and the subscription is live.
    fn go_live(&self, st: &mut State, held: Vec<Held>, mut last: u64) {
        for h in held {
            if h.seq > last && st.broken_at.is_none_or(|b| h.seq < b) {
                last = h.seq;
                self.queue(
                    st,
                    (h.seq, &h.frame),
                    h.key,
                    h.frame.len(),
                    &mut Renders::default(),
                );
            } else {
                if h.seq > last {
                    st.dropped += 1;
                }
                self.outlet.gauge().release(h.frame.len());
            }
        }
        st.pos = Pos::Live(last);
    }

    /// Whether the hub lost a message of this subscription.
    pub fn broken(&self) -> bool {
        self.state.lock().broken_at.is_some()
    }

    /// Ends the subscription: nothing more is queued for it after this.
    pub fn end(self: &Arc<Self>) -> Ended {
        let mut st = self.state.lock();
        let recovering = match std::mem::replace(&mut st.pos, Pos::Ended) {
            Pos::Joining(held) => {
                self.outlet
                    .gauge()
                    .release(held.iter().map(|h| h.frame.len()).sum());
                true
            }
            Pos::Recovering {
                held, page_bytes, ..
            } => {
                let bytes: usize = held.iter().map(|h| h.frame.len()).sum();
                self.outlet.gauge().release(bytes + page_bytes);
                true
            }
            _ => false,
        };
        let ended = Ended {
            dropped: st.dropped,
            last_seq: st.sent,
        };
        drop(st);
        if recovering {
            let me: Arc<dyn Backlog> = self.clone();
            self.outlet.forget(&me);
        }
        ended
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
        match &mut st.pos {
            Pos::Live(last) if seq > *last => {
                *last = seq;
                if st.broken_at.is_some() {
                    st.dropped += 1;
                    drop(st);
                    self.outlet.gauge().release(frame.len());
                    return;
                }
                self.queue(&mut st, (seq, frame), key.cloned(), frame.len(), renders);
            }
            Pos::Joining(held) => held.push(Held {
                seq,
                frame: frame.clone(),
                key: key.cloned(),
            }),
            Pos::Recovering {
                held, held_bytes, ..
            } => {
                *held_bytes += frame.len();
                held.push(Held {
                    seq,
                    frame: frame.clone(),
                    key: key.cloned(),
                });
            }
            _ => {
                drop(st);
                self.outlet.gauge().release(frame.len());
            }
        }
    }

    fn congested(&self) {
        self.outlet.congested();
    }

    fn dropped(&self, _channel: &Arc<str>, seq: u64) {
        let mut st = self.state.lock();
        match st.pos {
            Pos::Live(last) if seq <= last => {}
            Pos::Ended => {}
            _ => {
                st.broken_at.get_or_insert(seq);
                st.dropped += 1;
                if let Pos::Live(last) = &mut st.pos {
                    *last = seq;
                }
            }
        }
    }
}

impl Backlog for OpSink {
    fn pump(&self, room: &dyn Fn(usize) -> bool) -> Step {
        let mut step = Step::default();
        let mut st = self.state.lock();
        loop {
            let Pos::Recovering {
                backlog,
                held_bytes,
                page_bytes,
                ..
            } = &mut st.pos
            else {
                step.done = true;
                return step;
            };
            if backlog.is_done() {
                break;
            }
            if !room(*held_bytes + *page_bytes) {
                step.stalled = true;
                return step;
            }
            let paged = backlog.source().is_some();
            let Some((seq, frame)) = backlog.pop() else {
                let waiting = *held_bytes + *page_bytes;
                self.read_page(&mut st, waiting);
                return step;
            };
            // A page's frames are counted in the gauge since they were read.
            let reserved = if paged { frame.len() } else { 0 };
            *page_bytes -= reserved;
            self.queue(
                &mut st,
                (seq, &frame),
                None,
                reserved,
                &mut Renders::default(),
            );
            step.moved = true;
        }
        if let Pos::Recovering { held, last, .. } = std::mem::replace(&mut st.pos, Pos::Ended) {
            self.go_live(&mut st, held, last);
        }
        step.done = true;
        step
    }
}

impl OpSink {
    /// Starts reading the next page of the recovery, inside the room the
    /// socket grants beside `waiting` bytes (`socket/pages.rs`).
    fn read_page(&self, st: &mut State, waiting: usize) {
        let Pos::Recovering { backlog, .. } = &mut st.pos else {
            return;
        };
        if !backlog.wants_page() {
            return;
        }
        let Some(budget) = self.outlet.page_room(waiting) else {
            return;
        };
        let (Some(read), Some(source), Some(me)) = (
            backlog.next_page(budget),
            backlog.source(),
            self.me.upgrade(),
        ) else {
            self.outlet.page_done(budget);
            return;
        };
        tokio::spawn(async move {
            let page = read.await;
            me.paged(&source, budget, page);
        });
    }

    /// A page arrived: its frames wait here (counted in the gauge) and are
    /// pumped now. Messages that left the history before it was read break
    /// the subscription there, as a drop at the mark does: nothing newer is
    /// queued, and `SLOW_CONSUMER` says how many were lost and the last
    /// `seq` sent once the socket reports the episode.
    fn paged(&self, source: &Arc<dyn Pages>, budget: usize, page: Option<Page>) {
        let gauge = self.outlet.gauge();
        let mut st = self.state.lock();
        let mut lost = 0;
        if let Pos::Recovering {
            backlog,
            page_bytes,
            ..
        } = &mut st.pos
            && backlog.reads_from(source)
        {
            lost = backlog.fill(page);
            let bytes = backlog.ready().1;
            gauge.add(bytes);
            *page_bytes += bytes;
        }
        if lost > 0 {
            let first = st.sent + 1;
            st.broken_at.get_or_insert(first);
            st.dropped += lost;
            if let Pos::Recovering {
                held,
                last,
                page_bytes,
                ..
            } = std::mem::replace(&mut st.pos, Pos::Ended)
            {
                gauge.release(page_bytes);
                self.go_live(&mut st, held, last);
            }
        }
        drop(st);
        self.outlet.page_done(budget);
        if lost > 0 && gauge.record_drops(lost) == Reserve::FirstDrop {
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
