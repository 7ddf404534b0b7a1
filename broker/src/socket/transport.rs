//! The upgraded TCP connection, owned by the socket once the handshake is
//! done: client bytes go to the actor's inbound stream, frames from the
//! outbox go to the kernel.
//!
//! Why not actix-http's h1 dispatcher (the path an upgraded response body
//! takes): it keeps two 8 KiB buffers for the life of the connection,
//! sized for HTTP bursts, which were half of an idle socket's memory
//! (issue 10). actix-http's own upgrade hook (`HttpServiceBuilder::upgrade`)
//! hands the TCP stream over instead, so the socket reads into a stack
//! buffer and writes the outbox's frames as they are (vectored, no copy),
//! and an idle socket holds no I/O buffer at all.
//!
//! What goes out is the transport's [`Feed`]: a WebSocket's frames as they
//! are ([`Frames`]), or an SSE stream's events on a connection it took
//! whole (`socket/sse/feed.rs`).
//!
//! Closing follows RFC 6455 §7.1.1: when the socket is done, the close
//! frame is written, then the write side is shut (the server closes TCP
//! first), and the connection lingers, discarding, until the client
//! closes its side or `close_timeout_ms` passes. Closing at once with
//! unread bytes would make the kernel answer with a reset, which can
//! destroy the close frame before the client reads it. A peer that stops
//! reading does not stretch this: once the socket has ended, the bytes
//! still to write get `close_timeout_ms`, and an aborted socket's none
//! (`Transport::blocked`).

use std::collections::VecDeque;
use std::future::Future;
use std::io::IoSlice;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::Drained;
use super::Nudge;
use super::inbound::Pipe;
use super::outbox::{Ending, Next, Outbox};

/// What a transport writes, and what client bytes are to it.
pub trait Feed: Unpin {
    /// Fills the (empty) `batch` with the next bytes to write.
    fn fill(
        &mut self,
        cx: &Context<'_>,
        outbox: &Outbox,
        on_drain: &Nudge<Drained>,
        batch: &mut VecDeque<Bytes>,
    ) -> Next;
    /// `n` bytes of the batch reached the kernel.
    fn wrote(&mut self, n: usize, outbox: &Outbox, on_drain: &Nudge<Drained>);
    /// Client bytes read off the connection.
    fn heard(&mut self, pipe: &Pipe, bytes: &[u8]);
    /// How many of the batch's bytes the outbox's gauge still counts.
    fn counted(&self, batch: &VecDeque<Bytes>) -> usize;
}

/// A WebSocket's feed: the outbox's frames, written as they are, counted
/// until the kernel takes them; client bytes go to the actor.
pub struct Frames;

impl Feed for Frames {
    fn fill(
        &mut self,
        cx: &Context<'_>,
        outbox: &Outbox,
        _: &Nudge<Drained>,
        batch: &mut VecDeque<Bytes>,
    ) -> Next {
        outbox.take(cx, batch, BATCH_FRAMES, BATCH_BYTES)
    }

    fn wrote(&mut self, n: usize, outbox: &Outbox, on_drain: &Nudge<Drained>) {
        outbox.sent(n, on_drain);
    }

    fn heard(&mut self, pipe: &Pipe, bytes: &[u8]) {
        pipe.push(bytes);
    }

    fn counted(&self, batch: &VecDeque<Bytes>) -> usize {
        batch.iter().map(Bytes::len).sum()
    }
}

/// One read's worth of client bytes (on the stack, not kept).
const READ_CHUNK: usize = 4096;
/// Reads (and writes) per wake-up before yielding to other connections.
const TURNS: usize = 16;
/// The most frames, and about the most bytes, one vectored write takes.
pub(super) const BATCH_FRAMES: usize = 64;
pub(super) const BATCH_BYTES: usize = 64 * 1024;
/// The most slices one vectored write takes: a frame queued as a pair
/// (its own head and a shared body, `socket/outbox/queue.rs`) is two.
const BATCH_SLICES: usize = 2 * BATCH_FRAMES;

enum Phase {
    Open,
    /// The write side is shut: discard what the client still sends until
    /// it closes, or until the deadline.
    Lingering(Pin<Box<actix_rt::time::Sleep>>),
}

/// Drives one socket's TCP connection until it is closed.
pub struct Transport<T, F: Feed = Frames> {
    io: T,
    feed: F,
    /// To the actor's inbound stream; `None` once the client's side ended.
    inbound: Option<Rc<Pipe>>,
    outbox: Arc<Outbox>,
    on_drain: Nudge<Drained>,
    /// Bytes the feed gave, not yet (wholly) written (a WebSocket's are
    /// still counted in the gauge: [`Feed::counted`]).
    batch: VecDeque<Bytes>,
    phase: Phase,
    linger: Duration,
    /// Once the socket has ended, when the rest of its bytes stop being
    /// waited for: a peer that never reads again does not keep the
    /// connection.
    give_up: Option<Pin<Box<actix_rt::time::Sleep>>>,
}

impl<T: AsyncRead + AsyncWrite + Unpin> Transport<T> {
    pub fn new(
        io: T,
        inbound: Rc<Pipe>,
        outbox: Arc<Outbox>,
        on_drain: Nudge<Drained>,
        linger: Duration,
    ) -> Self {
        Transport::with_feed(io, Frames, inbound, outbox, on_drain, linger)
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin, F: Feed> Transport<T, F> {
    pub(super) fn with_feed(
        io: T,
        feed: F,
        inbound: Rc<Pipe>,
        outbox: Arc<Outbox>,
        on_drain: Nudge<Drained>,
        linger: Duration,
    ) -> Self {
        Transport {
            io,
            feed,
            inbound: Some(inbound),
            outbox,
            on_drain,
            batch: VecDeque::new(),
            phase: Phase::Open,
            linger,
            give_up: None,
        }
    }

    /// Moves client bytes to the actor while it takes them (otherwise
    /// reading stops and TCP pushes back). `Err` when the connection
    /// failed.
    fn read(&mut self, cx: &mut Context<'_>) -> Result<(), ()> {
        let Some(pipe) = &self.inbound else {
            return Ok(());
        };
        for _ in 0..TURNS {
            // The actor stopped (its stream is gone): nothing reads.
            if Rc::strong_count(pipe) == 1 || !pipe.has_room(cx) {
                return Ok(());
            }
            // Not zeroed: the reader only fills it (a 4 KiB memset a read
            // was a visible share of a small frame's cost).
            let mut chunk = [MaybeUninit::<u8>::uninit(); READ_CHUNK];
            let mut buf = ReadBuf::uninit(&mut chunk);
            match Pin::new(&mut self.io).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) if buf.filled().is_empty() => {
                    pipe.end();
                    self.inbound = None;
                    return Ok(());
                }
                Poll::Ready(Ok(())) => self.feed.heard(pipe, buf.filled()),
                Poll::Ready(Err(_)) => return Err(()),
                Poll::Pending => return Ok(()),
            }
        }
        cx.waker().wake_by_ref();
        Ok(())
    }

    /// Writes the outbox's frames while the kernel takes them. `Ready` when
    /// the socket is done (`Ok`) or the connection must be dropped (`Err`).
    fn write(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ()>> {
        for _ in 0..TURNS {
            if self.batch.is_empty() {
                // An idle socket keeps no large batch allocation; its first
                // is room for one frame, not four (its welcome, then an ack:
                // 32 bytes kept, not 128; issue 42). A busy socket grows it.
                if self.batch.capacity() > 8 {
                    self.batch = VecDeque::new();
                }
                if self.batch.capacity() == 0 {
                    self.batch.reserve_exact(1);
                }
                match self
                    .feed
                    .fill(cx, &self.outbox, &self.on_drain, &mut self.batch)
                {
                    Next::Write => {}
                    Next::Wait => return Poll::Pending,
                    Next::Finish => return Poll::Ready(Ok(())),
                    Next::Abort => return Poll::Ready(Err(())),
                }
            }
            let mut slices = [IoSlice::new(&[]); BATCH_SLICES];
            let mut n = 0;
            for frame in self.batch.iter().take(BATCH_SLICES) {
                slices[n] = IoSlice::new(frame);
                n += 1;
            }
            match Pin::new(&mut self.io).poll_write_vectored(cx, &slices[..n]) {
                Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => return Poll::Ready(Err(())),
                Poll::Ready(Ok(written)) => {
                    self.advance(written);
                    self.feed.wrote(written, &self.outbox, &self.on_drain);
                }
                Poll::Pending => return self.blocked(cx),
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// The kernel takes no more bytes. The transport waits for it while
    /// the socket is open; once the socket has ended, what is left gets
    /// `close_timeout_ms` (the close frame's own time) to go out, and an
    /// aborted socket none: otherwise a peer that stops reading would hold
    /// the connection and the batch for as long as it likes, after its
    /// counts were given back.
    fn blocked(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ()>> {
        match self.outbox.ending(cx) {
            Ending::Open => Poll::Pending,
            Ending::Abort => Poll::Ready(Err(())),
            Ending::Finishing => {
                let linger = self.linger;
                let give_up = self
                    .give_up
                    .get_or_insert_with(|| Box::pin(actix_rt::time::sleep(linger)));
                give_up.as_mut().poll(cx).map(|()| Err(()))
            }
        }
    }

    /// Drops the first `n` written bytes from the batch.
    fn advance(&mut self, mut n: usize) {
        while n > 0 {
            let Some(front) = self.batch.front_mut() else {
                return;
            };
            if n < front.len() {
                front.advance(n);
                return;
            }
            n -= front.len();
            self.batch.pop_front();
        }
    }
}

/// Discards client bytes until the client closes (`Ready`).
fn discard<T: AsyncRead + Unpin>(io: &mut T, cx: &mut Context<'_>) -> Poll<()> {
    for _ in 0..TURNS {
        let mut chunk = [0u8; READ_CHUNK];
        let mut buf = ReadBuf::new(&mut chunk);
        match Pin::new(&mut *io).poll_read(cx, &mut buf) {
            Poll::Ready(Ok(())) if !buf.filled().is_empty() => {}
            Poll::Ready(_) => return Poll::Ready(()),
            Poll::Pending => return Poll::Pending,
        }
    }
    cx.waker().wake_by_ref();
    Poll::Pending
}

impl<T: AsyncRead + AsyncWrite + Unpin, F: Feed> Future for Transport<T, F> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if let Phase::Lingering(deadline) = &mut this.phase {
            if discard(&mut this.io, cx).is_ready() {
                return Poll::Ready(());
            }
            return deadline.as_mut().poll(cx);
        }
        if this.read(cx).is_err() {
            return Poll::Ready(());
        }
        match this.write(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(())) => Poll::Ready(()),
            Poll::Ready(Ok(())) => {
                // The close frame is out: FIN, then wait for the client's.
                match Pin::new(&mut this.io).poll_shutdown(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Err(_)) => return Poll::Ready(()),
                    Poll::Ready(Ok(())) => {}
                }
                this.phase = Phase::Lingering(Box::pin(actix_rt::time::sleep(this.linger)));
                Pin::new(this).poll(cx)
            }
        }
    }
}

impl<T, F: Feed> Drop for Transport<T, F> {
    fn drop(&mut self) {
        // The actor's stream ends, so it stops (if it has not).
        if let Some(pipe) = self.inbound.take() {
            pipe.end();
        }
        let unsent = self.feed.counted(&self.batch);
        self.outbox.gone(unsent);
    }
}
