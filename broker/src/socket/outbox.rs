//! The socket's outbound queue, which is also the HTTP response body.
//!
//! This is why Tidegate does not use `actix-web-actors`' `WebsocketContext`
//! or `actix-ws`' `Session`: both hide their queues (an unbounded
//! `VecDeque` inside the context; a 32-slot channel that makes the sender
//! wait), so the actor cannot see how many bytes are unsent. Here the
//! actor, and the hub straight from whichever thread publishes
//! (`socket/delivery.rs`), push already-encoded WebSocket frames into a
//! queue shared with the response body; the body hands them to actix-http's
//! h1 dispatcher only when the dispatcher asks for more, which it does only
//! while its own write buffer is below `h1_write_buffer_size` and the
//! kernel accepts writes. So [`OutboundGauge::pending`] is exactly the
//! bytes the socket has not yet been able to send (minus at most one
//! dispatcher buffer) — the server-side equivalent of a browser's
//! `bufferedAmount`.
//!
//! The queue is behind a mutex because the hub writes from other threads;
//! the body (on the socket's worker) registers its waker there, and a push
//! wakes it only if it is waiting, so a burst of pushes costs one wake.
//!
//! When the socket is done (its close frame answered or acknowledged), the
//! body ends after the close frame and shuts the connection's read side
//! ([`ConnFd`]): actix-http would otherwise linger after an upgraded
//! response, waiting for the client to close first, while RFC 6455 §7.1.1
//! has the server close TCP first.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use actix::{Message, Recipient};
use actix_web::body::{BodySize, MessageBody};
use bytes::Bytes;
use parking_lot::{Mutex, MutexGuard};

use super::delivery::{Congested, Subs};
use super::queue::OutQueue;
use crate::hub::OutboundGauge;
use crate::metrics::Metrics;

/// Sent to the socket when a congested outbox drains below its mark.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct Drained;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Open,
    /// Send what is queued, then end the body (clean close).
    Finishing,
    /// End the body with an error: the dispatcher drops the TCP connection.
    Aborted,
    /// The HTTP layer dropped the body: the peer is gone.
    Gone,
}

/// What the actor, the hub and the body share, under one lock: the frames
/// and the subscriptions' positions must change together, so that a
/// message is queued exactly once, in `seq` order, after its subscribe ack.
pub(super) struct Shared {
    queue: OutQueue,
    pub(super) subs: Subs,
    /// The socket sent or answered a close frame: live messages are no
    /// longer queued.
    pub(super) closing: bool,
    waker: Option<Waker>,
    state: State,
}

/// A socket's outbound side, shared (`Arc`) by the actor, the hub's
/// subscriptions ([`crate::hub::Sink::Socket`]) and the response body.
pub struct Outbox {
    shared: Mutex<Shared>,
    pub(super) gauge: Arc<OutboundGauge>,
    pub(super) metrics: Arc<Metrics>,
    /// The actor's mailbox, for the start of a drop episode.
    pub(super) control: Recipient<Congested>,
}

/// The HTTP layer's end: a streaming response body.
pub struct OutboxBody {
    outbox: Arc<Outbox>,
    on_drain: Recipient<Drained>,
    conn: Option<ConnFd>,
}

/// The TCP connection a WebSocket was upgraded on, as the server's
/// `on_connect` saw it (`HttpRequest::conn_data`).
///
/// Why it is needed: after an upgraded response's body ends, actix-http's
/// h1 dispatcher still holds the request payload (the WebSocket's inbound
/// bytes), so it lingers, reading and discarding until the client closes
/// or `client_disconnect_timeout` passes. A client that follows RFC 6455
/// §7.1.1 waits for the server to close TCP first, so both sides wait.
/// Shutting the read side makes the dispatcher's next read return end of
/// stream: it then flushes what it holds (the close frame), shuts the
/// write side (FIN) and drops the connection, with no timer involved.
#[derive(Debug, Clone, Copy)]
pub struct ConnFd(#[cfg(unix)] pub std::os::fd::RawFd);

impl ConnFd {
    /// Shuts the read side; errors (the peer already gone) change nothing.
    fn shut_read(self) {
        #[cfg(unix)]
        {
            // SAFETY: the descriptor belongs to the connection whose HTTP
            // dispatcher owns both the TCP stream and this body; it polls
            // the body (the only caller) only while it holds the stream,
            // so the descriptor is open and still that connection's.
            let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(self.0) };
            let _ = socket2::SockRef::from(&fd).shutdown(std::net::Shutdown::Read);
        }
    }
}

impl Outbox {
    pub fn new(
        gauge: Arc<OutboundGauge>,
        metrics: Arc<Metrics>,
        control: Recipient<Congested>,
        on_drain: Recipient<Drained>,
        conn: Option<ConnFd>,
    ) -> (Arc<Outbox>, OutboxBody) {
        let outbox = Arc::new(Outbox {
            shared: Mutex::new(Shared {
                queue: OutQueue::default(),
                subs: Subs::default(),
                closing: false,
                waker: None,
                state: State::Open,
            }),
            gauge,
            metrics,
            control,
        });
        (
            outbox.clone(),
            OutboxBody {
                outbox,
                on_drain,
                conn,
            },
        )
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock()
    }

    /// Releases the lock, then wakes the body if it was waiting (outside
    /// the lock: the body's worker may be another thread).
    pub(super) fn unlock_and_wake(mut s: MutexGuard<'_, Shared>) {
        let waker = s.waker.take();
        drop(s);
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Queues a frame whose bytes are already counted in the gauge (or
    /// releases them if the body will not send it).
    #[inline]
    pub(super) fn push_reserved(&self, s: &mut Shared, frame: Bytes) {
        if s.state != State::Open {
            self.gauge.release(frame.len());
            return;
        }
        s.queue.push(frame);
    }

    /// Queues a message of a conflating channel whose bytes the hub already
    /// counted, replacing the unsent one with the same key (§11) and
    /// keeping the gauge exact. A new key is refused (and released) while
    /// the unsent keyed frames are at or over the high-water mark: the
    /// caller counts it as a drop.
    pub(super) fn push_conflated(
        &self,
        s: &mut Shared,
        channel: &Arc<str>,
        key: Arc<str>,
        frame: Bytes,
    ) -> super::queue::Keyed {
        use super::queue::Keyed;
        let len = frame.len();
        if s.state != State::Open {
            // Discarded, as `push_reserved` does: nobody will read it.
            self.gauge.release(len);
            return Keyed::Queued(0);
        }
        let done = s
            .queue
            .push_keyed(channel, key, frame, self.gauge.high_water());
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

    /// Queues a frame the socket itself produced (acks, errors, pings).
    pub fn send(&self, frame: Bytes) {
        self.gauge.add(frame.len());
        let mut s = self.lock();
        self.push_reserved(&mut s, frame);
        Self::unlock_and_wake(s);
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

    /// Ends the body once what is queued has been taken.
    pub fn finish(&self) {
        self.set_state(State::Finishing);
    }

    /// Ends the body now with an error, which makes the HTTP layer drop the
    /// TCP connection (a close frame that could not be delivered in time).
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
        }
        Self::unlock_and_wake(s);
    }
}

impl MessageBody for OutboxBody {
    type Error = io::Error;

    fn size(&self) -> BodySize {
        BodySize::Stream
    }

    fn poll_next(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, io::Error>>> {
        let this = self.get_mut();
        let gauge = &this.outbox.gauge;
        let mut s = this.outbox.lock();
        if let Some(frame) = s.queue.pop() {
            drop(s);
            let left = gauge.release(frame.len());
            if gauge.is_congested() && left < gauge.high_water() {
                this.on_drain.do_send(Drained);
            }
            return Poll::Ready(Some(Ok(frame)));
        }
        match s.state {
            State::Open => {
                match &mut s.waker {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    w => *w = Some(cx.waker().clone()),
                }
                Poll::Pending
            }
            State::Finishing => {
                // Everything queued, the close frame last, is with the
                // dispatcher: let it close TCP now (see `ConnFd`).
                if let Some(conn) = this.conn.take() {
                    conn.shut_read();
                }
                Poll::Ready(None)
            }
            State::Gone => Poll::Ready(None),
            State::Aborted => Poll::Ready(Some(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "close frame not delivered in time",
            )))),
        }
    }
}

impl Drop for OutboxBody {
    fn drop(&mut self) {
        let mut s = self.outbox.lock();
        s.state = State::Gone;
        let bytes = s.queue.clear();
        self.outbox.gauge.release(bytes);
    }
}
