//! The socket's outbound queue, shared by the actor, the hub and the
//! connection's transport (`socket/transport.rs`).
//!
//! This is why Tidegate does not use `actix-web-actors`' `WebsocketContext`
//! or `actix-ws`' `Session`: both hide their queues (an unbounded
//! `VecDeque` inside the context; a 32-slot channel that makes the sender
//! wait), so the actor cannot see how many bytes are unsent. Here the
//! actor, and the hub straight from whichever thread publishes
//! (`socket/outbox/delivery.rs`), push already-encoded WebSocket frames into this
//! queue; the transport takes them only when the kernel accepts writes,
//! and a frame leaves the gauge only once the kernel has taken its bytes.
//! So [`OutboundGauge::pending`] is exactly the bytes the socket has not
//! been able to send — the server-side equivalent of a browser's
//! `bufferedAmount`.
//!
//! The queue is behind a mutex because the hub writes from other threads;
//! the transport (on the socket's worker) registers its waker there, and a
//! push wakes it only if it is waiting, so a burst of pushes costs one
//! wake.
//!
//! The outbox is this module and nothing else. Its invariant — the queue
//! and the subscriptions' positions change together, under one lock — is
//! kept here: `Shared` and every field are private to the module, and the
//! files below it are its parts, each a side of the same lock: the hub's
//! deliveries and the subscriptions' joins and leaves (`delivery.rs`), the
//! recovered history paged under half the mark (`recovery.rs`,
//! `pages.rs`), a dialect's and presence's writes (`outlet.rs`), the queue
//! itself (`queue.rs`) and the positions (`subs.rs`). The actor, the
//! transport and the SSE writer see only what is marked
//! `pub(in crate::socket)`.

mod delivery;
mod outlet;
mod pages;
mod queue;
mod recovery;
mod subs;

pub(in crate::socket) use outlet::outlet;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Waker};

use actix::Message;
use bytes::Bytes;
use futures_util::task::AtomicWaker;
use parking_lot::{Mutex, MutexGuard};

use super::Nudge;
use crate::dialect::Backlog;
use crate::hub::OutboundGauge;
use crate::metrics::Metrics;
use queue::OutQueue;
use subs::Subs;

/// The sizes of the outbox's parts, for the socket's memory budget test
/// (`socket/actor/start.rs`).
#[cfg(test)]
pub(in crate::socket) const PART_SIZES: [(&str, usize); 3] = [
    ("outbox::Shared", size_of::<Shared>()),
    ("OutQueue", size_of::<OutQueue>()),
    ("subs::Sub", size_of::<subs::Sub>()),
];

/// A drop episode began (the hub dropped a message at the mark, or a
/// conflating queue refused a new key): the actor starts the grace timer.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct Congested;

/// Sent to the socket when a congested outbox drains below its mark.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct Drained;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Open,
    /// Send what is queued, then close TCP (clean close).
    Finishing,
    /// Drop the TCP connection without sending the rest.
    Aborted,
    /// The transport is gone: the peer is.
    Gone,
}

/// What the actor, the hub and the transport share, under one lock: the frames
/// and the subscriptions' positions must change together, so that a
/// message is queued exactly once, in `seq` order, after its subscribe ack.
struct Shared {
    queue: OutQueue,
    subs: Subs,
    /// A dialect's subscriptions still recovering (`socket/outbox/recovery.rs`):
    /// at most one per subscription, so the plan's `max_subscriptions`.
    feeds: Vec<Arc<dyn Backlog>>,
    /// Bytes of live messages held behind a recovering subscription's
    /// backlog (counted in the gauge, not yet queued): the backlog's room
    /// under the mark leaves them out (`socket/outbox/recovery.rs`).
    held_bytes: usize,
    /// Bytes of pages of recovered history read from a cluster's history
    /// and waiting in their subscriptions (counted in the gauge, not yet
    /// queued), and the budget of the one page being read: with what is
    /// queued, under half the mark plus one message (`socket/outbox/pages.rs`).
    paged_bytes: usize,
    reading: usize,
    /// Channels whose recovery lost messages to the history's trimming
    /// since the socket last reported a drop episode (each at most once:
    /// bounded by the subscriptions); an SSE stream says so per channel.
    lost: Vec<Arc<str>>,
    /// The socket sent or answered a close frame: live messages are no
    /// longer queued.
    closing: bool,
    waker: Option<Waker>,
    state: State,
}

/// A socket's outbound side, shared (`Arc`) by the actor, the hub's
/// subscriptions ([`crate::hub::Sink::Socket`]) and the transport.
pub struct Outbox {
    shared: Mutex<Shared>,
    /// Itself, for the reads of recovered history it starts (`socket/outbox/pages.rs`).
    me: Weak<Outbox>,
    gauge: Arc<OutboundGauge>,
    metrics: Arc<Metrics>,
    /// The actor's mailbox, for the start of a drop episode, and for a
    /// backlog that moves again (or leaves) after a stall.
    control: Nudge<Congested>,
    drained: Nudge<Drained>,
    /// Bytes the transport took from the queue but the kernel has not yet
    /// accepted (still in the gauge): conflation's room for new keys
    /// leaves them out, so the gauge stays within the mark plus a frame.
    in_flight: AtomicUsize,
    /// Subscriptions with recovered history not yet queued: the transport
    /// queues their next slice as it drains (`socket/outbox/recovery.rs`).
    recovering: AtomicUsize,
    /// A backlog is waiting for room under the mark: the socket's
    /// slow-consumer grace is running for it.
    stalled: AtomicBool,
    /// [`Ending`] as a number, kept beside `state` so that a transport the
    /// kernel takes no bytes from reads it without the lock the hub's
    /// pushes take.
    ending: AtomicU8,
    /// That transport, woken when the socket ends: a peer that stops
    /// reading cannot keep the connection (and the batch) past the close
    /// timeout. Pushes do not wake it.
    blocked: AtomicWaker,
}

impl Outbox {
    pub fn new(
        gauge: Arc<OutboundGauge>,
        metrics: Arc<Metrics>,
        control: Nudge<Congested>,
        drained: Nudge<Drained>,
    ) -> Arc<Outbox> {
        Arc::new_cyclic(|me| Outbox {
            me: me.clone(),
            shared: Mutex::new(Shared {
                queue: OutQueue::default(),
                subs: Subs::default(),
                feeds: Vec::new(),
                held_bytes: 0,
                paged_bytes: 0,
                reading: 0,
                lost: Vec::new(),
                closing: false,
                waker: None,
                state: State::Open,
            }),
            gauge,
            metrics,
            control,
            drained,
            in_flight: AtomicUsize::new(0),
            recovering: AtomicUsize::new(0),
            stalled: AtomicBool::new(false),
            ending: AtomicU8::new(Ending::Open as u8),
            blocked: AtomicWaker::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock()
    }

    /// Releases the lock, then wakes the transport if it was waiting (outside
    /// the lock: the transport's worker may be another thread).
    fn unlock_and_wake(mut s: MutexGuard<'_, Shared>) {
        let waker = s.waker.take();
        drop(s);
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Wakes the transport as a queued frame would, with nothing queued:
    /// its next read then waits behind what the socket's worker already
    /// has to run (see `Socket::on_dialect_text`).
    pub(in crate::socket) fn wake_transport(&self) {
        Outbox::unlock_and_wake(self.lock());
    }

    /// Where the socket is, for a transport the kernel takes no bytes
    /// from: it is woken when that changes (the socket finishing or
    /// aborted), which a queued frame would not tell it.
    pub(in crate::socket) fn ending(&self, cx: &Context<'_>) -> Ending {
        self.blocked.register(cx.waker());
        match self.ending.load(Ordering::Acquire) {
            0 => Ending::Open,
            1 => Ending::Finishing,
            _ => Ending::Abort,
        }
    }

    /// Queues a frame whose bytes are already counted in the gauge (or
    /// releases them if the transport will not send it).
    #[inline]
    fn push_reserved(&self, s: &mut Shared, frame: Bytes) {
        if s.state != State::Open {
            self.gauge.release(frame.len());
            return;
        }
        s.queue.push(frame);
    }

    /// [`Outbox::push_reserved`] for one frame queued as its own head and
    /// a shared rest (a dialect's message around a body rendered once per
    /// fan-out, `socket/outbox/outlet.rs`).
    #[inline]
    fn push_pair_reserved(&self, s: &mut Shared, head: Bytes, rest: Arc<Bytes>) {
        if s.state != State::Open {
            self.gauge.release(head.len() + rest.len());
            return;
        }
        s.queue.push_pair(head, rest);
    }

    /// [`Outbox::push_reserved`] for one frame sent in parts (a dialect's
    /// message around shared bytes, `socket/outbox/outlet.rs`).
    fn push_parts_reserved(&self, s: &mut Shared, parts: &mut [Bytes]) {
        if s.state != State::Open {
            self.gauge.release(parts.iter().map(Bytes::len).sum());
            return;
        }
        s.queue.push_parts(parts);
    }

    /// Queues a message of a conflating channel whose bytes the hub already
    /// counted, replacing the unsent one with the same key (§11) and
    /// keeping the gauge exact. A new key is refused (and released) while
    /// the unsent keyed frames are at or over the high-water mark: the
    /// caller counts it as a drop.
    fn push_conflated(
        &self,
        s: &mut Shared,
        channel: &Arc<str>,
        key: Arc<str>,
        frame: Bytes,
    ) -> queue::Keyed {
        use queue::Keyed;
        let len = frame.len();
        if s.state != State::Open {
            // Discarded, as `push_reserved` does: nobody will read it.
            self.gauge.release(len);
            return Keyed::Queued(0);
        }
        let room = self
            .gauge
            .high_water()
            .saturating_sub(self.in_flight.load(Ordering::Relaxed));
        let done = s.queue.push_keyed(channel, key, frame, room);
        match done {
            Keyed::Queued(_) => {}
            Keyed::Replaced { old, new } => {
                self.gauge.add(new);
                self.gauge.release(old + len);
            }
            Keyed::Refused => {
                self.gauge.release(len);
            }
        }
        done
    }

    /// Queues a frame the socket itself produced (acks, errors, pings). It
    /// counts toward the high-water mark: one that takes the socket over it
    /// starts a drop episode and the slow-consumer grace
    /// ([`OutboundGauge::add_answer`]).
    pub fn send(&self, frame: Bytes) {
        let s = self.lock();
        self.send_locked(s, frame);
    }

    /// [`Outbox::send`] under a lock the caller took: counts the frame
    /// toward the mark, queues it, releases the lock and wakes the
    /// transport, and starts the grace if this frame began an episode.
    fn send_locked(&self, mut s: MutexGuard<'_, Shared>, frame: Bytes) {
        let first = self.gauge.add_answer(frame.len());
        let open = s.state == State::Open && !s.closing;
        self.push_reserved(&mut s, frame);
        Self::unlock_and_wake(s);
        if first && open {
            self.control.do_send(Congested);
        }
    }

    /// Takes the count of messages dropped in the socket's episode (`end`:
    /// ending the episode, so live messages queue again) and queues the
    /// `notice` of them in one step, under the lock live messages queue
    /// under. A message the hub lets through once the episode ends is
    /// queued after the notice, never before it (§11: the notice comes
    /// before anything newer). Ending the episode, then queueing the
    /// notice, let a message published in between reach the client first:
    /// it moved past the hole and recovered from after it (47 of 2,000
    /// lost in the SDK's browser test).
    pub(in crate::socket) fn report_drops(
        &self,
        end: bool,
        notice: impl FnOnce(u64) -> Option<Bytes>,
    ) -> u64 {
        let s = self.lock();
        let dropped = if end {
            self.gauge.clear_congestion()
        } else {
            self.gauge.take_dropped()
        };
        if let Some(frame) = notice(dropped) {
            self.send_locked(s, frame);
        }
        dropped
    }

    /// Stops queueing live messages (the socket is closing); with
    /// `discard`, also throws away what is queued (a slow consumer being
    /// closed will not read it anyway). The close frame is sent after.
    pub fn stop_deliveries(&self, discard: bool) {
        let mut s = self.lock();
        s.closing = true;
        if discard {
            let bytes = s.queue.clear();
            self.gauge.release(bytes);
        }
    }

    /// Closes the connection once what is queued has been sent.
    pub fn finish(&self) {
        self.set_state(State::Finishing);
    }

    /// Drops the connection now, unsent frames and all (a close frame that
    /// could not be delivered in time, a client that stopped answering).
    pub fn abort(&self) {
        let mut s = self.lock();
        let bytes = s.queue.clear();
        self.gauge.release(bytes);
        drop(s);
        self.set_state(State::Aborted);
    }

    fn set_state(&self, state: State) {
        let mut s = self.lock();
        if matches!(s.state, State::Open | State::Finishing) {
            s.state = state;
            let ending = match state {
                State::Open => Ending::Open,
                State::Finishing => Ending::Finishing,
                State::Aborted | State::Gone => Ending::Abort,
            };
            self.ending.store(ending as u8, Ordering::Release);
        }
        Self::unlock_and_wake(s);
        self.blocked.wake();
    }
}

/// How far a socket is from its end, to a transport blocked on the kernel
/// ([`Outbox::ending`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Ending {
    Open = 0,
    /// The socket stopped: what is left has `close_timeout_ms` to go out.
    Finishing = 1,
    /// Drop the connection now.
    Abort = 2,
}

/// What the transport is to do next ([`Outbox::take`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Frames were moved to the transport's batch.
    Write,
    /// Nothing is queued; the transport is woken when something is.
    Wait,
    /// Everything queued, the close frame last, has been taken: once it
    /// is written, close TCP (the server closes first, RFC 6455 §7.1.1).
    Finish,
    /// Drop the connection now (a close frame not delivered in time, or
    /// the transport already gone).
    Abort,
}

impl Outbox {
    /// Moves up to `max_frames` queued frames (and about `max_bytes`) into
    /// the transport's `batch`, a pair's two slices one after the other
    /// (so the batch holds at most twice `max_frames`). They stay counted
    /// in the gauge until the kernel takes them ([`Outbox::sent`]), so the
    /// gauge is exactly the bytes the socket has not been able to send.
    pub(in crate::socket) fn take(
        &self,
        cx: &Context<'_>,
        batch: &mut VecDeque<Bytes>,
        max_frames: usize,
        max_bytes: usize,
    ) -> Next {
        let mut s = self.lock();
        let mut bytes = 0;
        let mut frames = 0;
        while frames < max_frames && bytes < max_bytes {
            let Some((frame, rest)) = s.queue.pop() else {
                break;
            };
            frames += 1;
            bytes += frame.len() + rest.len();
            batch.push_back(frame);
            if !rest.is_empty() {
                batch.push_back(rest);
            }
        }
        if !batch.is_empty() {
            self.in_flight.fetch_add(bytes, Ordering::Relaxed);
            return Next::Write;
        }
        match s.state {
            State::Open => {
                match &mut s.waker {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    w => *w = Some(cx.waker().clone()),
                }
                Next::Wait
            }
            State::Finishing => Next::Finish,
            State::Aborted | State::Gone => Next::Abort,
        }
    }

    /// `n` bytes reached the kernel: they leave the gauge, and a socket
    /// that fell below its mark hears [`Drained`] if it was congested or
    /// has just crossed the mark (its reading paused over it).
    pub(in crate::socket) fn sent(&self, n: usize, on_drain: &Nudge<Drained>) {
        self.in_flight.fetch_sub(n, Ordering::Relaxed);
        let left = self.gauge.release(n);
        let mark = self.gauge.high_water();
        if left < mark && (self.gauge.is_congested() || left + n > mark) {
            on_drain.do_send(Drained);
        }
        if self.recovering.load(Ordering::Acquire) > 0 {
            let mut s = self.lock();
            let pumped = self.pump(&mut s);
            drop(s);
            let pumped = pumped.and(self.pump_feeds());
            self.signal(pumped, Some(on_drain));
        }
    }

    /// The connection is gone: nothing more will be sent. What is queued,
    /// and the `unsent` bytes the transport still held, leave the gauge.
    pub(in crate::socket) fn gone(&self, unsent: usize) {
        let mut s = self.lock();
        s.state = State::Gone;
        self.ending.store(Ending::Abort as u8, Ordering::Release);
        let bytes = s.queue.clear();
        self.in_flight.store(0, Ordering::Relaxed);
        drop(s);
        self.gauge.release(bytes + unsent);
    }
}
