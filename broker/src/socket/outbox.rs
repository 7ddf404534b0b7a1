//! The socket's outbound queue, which is also the HTTP response body.
//!
//! This is why Tidegate does not use `actix-web-actors`' `WebsocketContext`
//! or `actix-ws`' `Session`: both hide their queues (an unbounded
//! `VecDeque` inside the context; a 32-slot channel that makes the sender
//! wait), so the actor cannot see how many bytes are unsent. Here the actor
//! pushes already-encoded WebSocket frames into a queue it shares with the
//! response body; the body hands them to actix-http's h1 dispatcher only
//! when the dispatcher asks for more, which it does only while its own
//! write buffer is below `h1_write_buffer_size` and the kernel accepts
//! writes. So [`OutboundGauge::pending`] is exactly the bytes the socket
//! has not yet been able to send (minus at most one dispatcher buffer) —
//! the server-side equivalent of a browser's `bufferedAmount`.

use std::cell::RefCell;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use actix::{Message, Recipient};
use actix_web::body::{BodySize, MessageBody};
use bytes::Bytes;

use super::queue::{Keyed, OutQueue};
use crate::hub::OutboundGauge;

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

struct Shared {
    queue: OutQueue,
    waker: Option<Waker>,
    state: State,
}

/// The actor's end.
pub struct Outbox {
    shared: Rc<RefCell<Shared>>,
    gauge: Arc<OutboundGauge>,
}

/// The HTTP layer's end: a streaming response body.
pub struct OutboxBody {
    shared: Rc<RefCell<Shared>>,
    gauge: Arc<OutboundGauge>,
    on_drain: Recipient<Drained>,
}

impl Outbox {
    pub fn new(gauge: Arc<OutboundGauge>, on_drain: Recipient<Drained>) -> (Outbox, OutboxBody) {
        let shared = Rc::new(RefCell::new(Shared {
            queue: OutQueue::default(),
            waker: None,
            state: State::Open,
        }));
        (
            Outbox {
                shared: shared.clone(),
                gauge: gauge.clone(),
            },
            OutboxBody {
                shared,
                gauge,
                on_drain,
            },
        )
    }

    /// Queues a frame whose bytes the hub already counted in the gauge.
    pub fn push_reserved(&self, frame: Bytes) {
        let mut s = self.shared.borrow_mut();
        if s.state != State::Open {
            drop(s);
            self.gauge.release(frame.len());
            return;
        }
        s.queue.push(frame);
        if let Some(w) = s.waker.take() {
            w.wake();
        }
    }

    /// Queues a message of a conflating channel whose bytes the hub already
    /// counted, replacing the unsent one with the same key (§11) and
    /// keeping the gauge exact. A new key is refused (and released) while
    /// the unsent keyed frames are at or over the high-water mark: the
    /// caller counts it as a drop.
    pub fn push_conflated(&self, channel: &Arc<str>, key: Arc<str>, frame: Bytes) -> Keyed {
        let mut s = self.shared.borrow_mut();
        let len = frame.len();
        if s.state != State::Open {
            // Discarded, as `push_reserved` does: nobody will read it.
            drop(s);
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
                return done;
            }
        }
        if let Some(w) = s.waker.take() {
            w.wake();
        }
        done
    }

    /// Queues a frame the socket itself produced (acks, errors, pings).
    pub fn send(&self, frame: Bytes) {
        self.gauge.add(frame.len());
        self.push_reserved(frame);
    }

    /// Throws away what is queued (a slow consumer being closed will not
    /// read it anyway); returns the bytes discarded.
    pub fn discard_queued(&self) -> usize {
        let bytes = self.shared.borrow_mut().queue.clear();
        self.gauge.release(bytes);
        bytes
    }

    /// Ends the body once what is queued has been taken.
    pub fn finish(&self) {
        self.set_state(State::Finishing);
    }

    /// Ends the body now with an error, which makes the HTTP layer drop the
    /// TCP connection (a close frame that could not be delivered in time).
    pub fn abort(&self) {
        self.discard_queued();
        self.set_state(State::Aborted);
    }

    fn set_state(&self, state: State) {
        let mut s = self.shared.borrow_mut();
        if matches!(s.state, State::Open | State::Finishing) {
            s.state = state;
        }
        if let Some(w) = s.waker.take() {
            w.wake();
        }
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
        let mut s = this.shared.borrow_mut();
        if let Some(frame) = s.queue.pop() {
            let left = this.gauge.release(frame.len());
            if this.gauge.is_congested() && left < this.gauge.high_water() {
                this.on_drain.do_send(Drained);
            }
            return Poll::Ready(Some(Ok(frame)));
        }
        match s.state {
            State::Open => {
                s.waker = Some(cx.waker().clone());
                Poll::Pending
            }
            State::Finishing | State::Gone => Poll::Ready(None),
            State::Aborted => Poll::Ready(Some(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "close frame not delivered in time",
            )))),
        }
    }
}

impl Drop for OutboxBody {
    fn drop(&mut self) {
        let mut s = self.shared.borrow_mut();
        s.state = State::Gone;
        let bytes = s.queue.clear();
        self.gauge.release(bytes);
    }
}
