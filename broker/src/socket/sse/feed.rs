//! An SSE stream's writer on a connection it took whole (`tcp.rs`): the
//! socket's transport (`socket/transport.rs`) with this feed instead of a
//! WebSocket's frames.
//!
//! Each batch of frames taken from the outbox becomes one HTTP chunk,
//! written as slices: the stream's own bytes (`id:` lines, its other
//! events) in one buffer made per batch, and each message's shared lines
//! as the memo holds them (`memo.rs`), never copied. Nothing is kept
//! between batches, so an idle stream holds no I/O buffer.
//!
//! A frame leaves the gauge once rendered into the batch, as it left it
//! once handed to the dispatcher on the other path (`body.rs`); what the
//! batch holds is bounded by [`FRAMES`] events. A reader that stops
//! reading leaves the rest in the outbox, where the socket's mark, grace
//! and 4008 apply; its close is not read either, so the socket's close
//! timer shuts the connection through the [`Ender`].

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::rc::Rc;
use std::task::Context;

use actix::Recipient;
use bytes::{BufMut, Bytes, BytesMut};

use super::Ender;
use super::render::{Out, Render};
use crate::socket::inbound::Pipe;
use crate::socket::outbox::{Drained, Next, Outbox};
use crate::socket::transport::{BATCH_BYTES, Feed};

/// The most frames one batch takes: each is at most two slices (its
/// `id:` line and its shared lines), plus the chunk's size line and end,
/// within the transport's 64 slices per write.
const FRAMES: usize = 31;

/// The end of a chunked body.
const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// The slices of one batch's chunk.
struct Slices<'a> {
    own: BytesMut,
    out: &'a mut VecDeque<Bytes>,
}

impl Slices<'_> {
    fn flush(&mut self) {
        if !self.own.is_empty() {
            self.out.push_back(self.own.split().freeze());
        }
    }
}

impl Out for Slices<'_> {
    fn own(&mut self) -> &mut BytesMut {
        &mut self.own
    }

    fn share(&mut self, bytes: &Bytes) {
        self.flush();
        self.out.push_back(bytes.clone());
    }
}

/// One stream's feed.
pub(super) struct SseFeed {
    /// The response head and the `retry:` chunk, written first.
    head: Option<Bytes>,
    render: Render,
    /// Frames taken from the outbox for the batch being rendered (at most
    /// [`FRAMES`]; no allocation kept while idle).
    frames: VecDeque<Bytes>,
    /// The last chunk is in the batch: once written, the stream is over.
    ended: bool,
    ender: Ender,
    /// The actor's inbound stream, ended with the body: the actor stops
    /// then, not when the connection has lingered (as when the dispatcher
    /// dropped the body).
    pipe: Rc<Pipe>,
}

impl SseFeed {
    pub(super) fn new(head: Bytes, render: Render, ender: Ender, pipe: Rc<Pipe>) -> SseFeed {
        SseFeed {
            head: Some(head),
            render,
            frames: VecDeque::new(),
            ended: false,
            ender,
            pipe,
        }
    }
}

/// Appends `bytes` as one HTTP chunk (the head's `retry:`).
pub(super) fn chunk(head: &mut BytesMut, bytes: &[u8]) {
    write!(head, "{:x}\r\n", bytes.len()).expect("a buffer takes it");
    head.put_slice(bytes);
    head.put_slice(b"\r\n");
}

impl Feed for SseFeed {
    fn fill(
        &mut self,
        cx: &Context<'_>,
        outbox: &Outbox,
        on_drain: &Recipient<Drained>,
        batch: &mut VecDeque<Bytes>,
    ) -> Next {
        if let Some(head) = self.head.take() {
            batch.push_back(head);
            return Next::Write;
        }
        loop {
            if self.ended {
                self.pipe.end();
                return Next::Finish;
            }
            match outbox.take(cx, &mut self.frames, FRAMES, BATCH_BYTES) {
                Next::Write => {}
                Next::Finish => {
                    // The socket ended without a close event: the body
                    // ends all the same.
                    self.ended = true;
                    batch.push_back(Bytes::from_static(LAST_CHUNK));
                    return Next::Write;
                }
                other => {
                    self.frames = VecDeque::new();
                    return other;
                }
            }
            // The chunk's size line goes first, once its size is known.
            let at = batch.len();
            batch.push_back(Bytes::new());
            let mut slices = Slices {
                own: BytesMut::with_capacity(self.frames.len() * self.render.id_hint()),
                out: batch,
            };
            let mut taken = 0;
            for frame in self.frames.drain(..) {
                taken += frame.len();
                self.render.frame(&frame, &mut slices);
            }
            slices.flush();
            outbox.sent(taken, on_drain);
            let size: usize = slices.out.iter().skip(at + 1).map(Bytes::len).sum();
            if size == 0 {
                slices.out.truncate(at);
            } else {
                write!(slices.own, "{size:x}\r\n").expect("a buffer takes it");
                slices.out[at] = slices.own.split().freeze();
                slices.out.push_back(Bytes::from_static(b"\r\n"));
            }
            // After the close event the body ends.
            if self.render.closed() {
                self.ended = true;
                batch.push_back(Bytes::from_static(LAST_CHUNK));
            }
            if !batch.is_empty() {
                return Next::Write;
            }
        }
    }

    fn wrote(&mut self, _: usize, _: &Outbox, _: &Recipient<Drained>) {}

    /// A stream has nothing to say: what its client sends (a pipelined
    /// request) is read and dropped, so the client's end of file is seen.
    fn heard(&mut self, _: &Pipe, _: &[u8]) {}

    /// Frames left the gauge when rendered.
    fn counted(&self, _: &VecDeque<Bytes>) -> usize {
        0
    }
}

impl Drop for SseFeed {
    fn drop(&mut self) {
        // The transport (and the connection) goes with this feed.
        self.ender.forget();
    }
}
