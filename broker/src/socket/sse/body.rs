//! An SSE stream's writer: the response body, which takes the socket's
//! frames from its outbox as the HTTP layer asks for more and hands them
//! on as events (`render.rs`).
//!
//! actix-web's h1 dispatcher polls a streaming body only while its write
//! buffer is below 32 KiB, so a reader that stops reading stops the
//! polling: frames stay in the outbox, counted in the gauge, and the
//! socket's high-water mark, grace and 4008 apply as to a WebSocket. A
//! frame leaves the gauge once handed to the dispatcher; what sits there
//! is bounded by its buffer and one batch.
//!
//! For the same reason an unread stream never sees its close, so the
//! connection is ended from outside ([`Ender`]): the socket's close timer
//! shuts the TCP connection, which wakes the dispatcher with an error and
//! drops it, and this body with it. Dropping the body ends the actor's
//! inbound stream, which stops the actor.

use std::cell::Cell;
use std::collections::VecDeque;
use std::net::Shutdown;
use std::os::fd::{BorrowedFd, RawFd};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use futures_util::Stream;

use super::render::Render;
use crate::socket::Nudge;
use crate::socket::inbound::Pipe;
use crate::socket::outbox::{Drained, Next, Outbox};

/// The most frames, and about the most bytes, one chunk takes.
const BATCH_FRAMES: usize = 64;
const BATCH_BYTES: usize = 64 * 1024;

/// Ends a stream's TCP connection while its response is alive: the
/// descriptor is shared with the body, which forgets it when dropped.
#[derive(Clone, Default)]
pub(in crate::socket) struct Ender(Rc<Cell<Option<RawFd>>>);

impl Ender {
    pub(super) fn new(fd: Option<RawFd>) -> Ender {
        Ender(Rc::new(Cell::new(fd)))
    }

    /// Shuts the connection (once): its reader gets what the kernel
    /// already holds, then the end of the stream.
    pub(in crate::socket) fn end(&self) {
        if let Some(fd) = self.0.take() {
            // SAFETY: the descriptor is the connection's, open while the
            // dispatcher that owns both the connection and the body lives.
            // The body clears it when dropped, and this runs on the same
            // (single-threaded) worker, so it is never a closed or reused
            // descriptor here.
            let fd = unsafe { BorrowedFd::borrow_raw(fd) };
            let _ = socket2::SockRef::from(&fd).shutdown(Shutdown::Both);
        }
    }

    /// The connection is no longer the stream's (or is gone).
    pub(super) fn forget(&self) {
        self.0.take();
    }
}

/// The response body of one stream.
pub(super) struct Body {
    outbox: Arc<Outbox>,
    on_drain: Nudge<Drained>,
    /// The actor's inbound stream: ended when the body is dropped.
    pipe: Rc<Pipe>,
    /// `retry:`, written first.
    head: Option<Bytes>,
    render: Render,
    /// Frames taken from the outbox for the chunk being built (at most
    /// [`BATCH_FRAMES`]).
    batch: VecDeque<Bytes>,
    ender: Ender,
    ended: bool,
}

impl Body {
    pub(super) fn new(
        outbox: Arc<Outbox>,
        on_drain: Nudge<Drained>,
        pipe: Rc<Pipe>,
        head: Bytes,
        render: Render,
        ender: Ender,
    ) -> Body {
        Body {
            outbox,
            on_drain,
            pipe,
            head: Some(head),
            render,
            batch: VecDeque::new(),
            ender,
            ended: false,
        }
    }
}

impl Stream for Body {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.ended {
            return Poll::Ready(None);
        }
        if let Some(head) = this.head.take() {
            return Poll::Ready(Some(Ok(head)));
        }
        loop {
            match this
                .outbox
                .take(cx, &mut this.batch, BATCH_FRAMES, BATCH_BYTES)
            {
                Next::Write => {}
                Next::Wait => return Poll::Pending,
                Next::Finish => {
                    this.ended = true;
                    return Poll::Ready(None);
                }
                Next::Abort => {
                    this.ended = true;
                    return Poll::Ready(Some(Err(std::io::Error::other("stream ended"))));
                }
            }
            // Each event is its frame's JSON, the `id:` line and a few
            // more: sized once instead of grown.
            let extra = this.render.event_hint();
            let size = this.batch.iter().map(|f| f.len() + extra).sum();
            let mut out = BytesMut::with_capacity(size);
            let mut taken = 0;
            for frame in this.batch.drain(..) {
                taken += frame.len();
                this.render.frame(&frame, &mut out);
            }
            this.outbox.sent(taken, &this.on_drain);
            // After the close event the response ends (the actor stops when
            // the body is dropped).
            this.ended = this.render.closed();
            if !out.is_empty() {
                return Poll::Ready(Some(Ok(out.freeze())));
            }
            if this.ended {
                return Poll::Ready(None);
            }
        }
    }
}

impl Drop for Body {
    fn drop(&mut self) {
        // The connection is the dispatcher's again (or gone): forget it.
        self.ender.forget();
        self.pipe.end();
        let unsent = self.batch.iter().map(Bytes::len).sum();
        self.outbox.gone(unsent);
    }
}
