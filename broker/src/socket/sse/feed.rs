//! An SSE stream's writer on a connection it took whole (`tcp.rs`): the
//! socket's transport (`socket/transport.rs`) with this feed instead of a
//! WebSocket's frames.
//!
//! Each batch of frames taken from the outbox becomes one HTTP chunk,
//! written as slices: the stream's own bytes (`id:` lines, its other
//! events) in one buffer made per batch, and each message's shared lines
//! as the memo holds them (`memo.rs`), not copied, when they are large
//! enough for that to pay ([`SHARE_MIN`]). Nothing is kept between
//! batches, so an idle stream holds no I/O buffer.
//!
//! A frame leaves the gauge once rendered into the batch, as it left it
//! once handed to the dispatcher on the other path (`body.rs`); what the
//! batch holds is bounded by [`FRAMES`] events. A reader that stops
//! reading leaves the rest in the outbox, where the socket's mark, grace
//! and 4008 apply; its close is not read either, so the socket's close
//! timer shuts the connection through the [`Ender`].

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::io::Write as _;
use std::rc::Rc;
use std::task::Context;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::Ender;
use super::render::{Out, Render};
use crate::socket::Nudge;
use crate::socket::inbound::Pipe;
use crate::socket::outbox::{Drained, Next, Outbox};
use crate::socket::transport::{BATCH_BYTES, Feed};

/// The most frames one batch takes (and about [`BATCH_BYTES`] of them): a
/// reader that fell behind gets many events per write, as the dispatcher
/// gathered them in its buffer (fewer, larger writes: measured 21 events
/// per write with 31 frames a batch against the dispatcher's 35). Small
/// events are one slice for the batch; large ones two slices each, which
/// the transport writes 64 at a time.
const FRAMES: usize = 256;

/// The end of a chunked body.
const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// Room for a chunk's size line before its data (`{:x}\r\n` of any
/// `usize`).
const SIZE_ROOM: usize = 18;

/// Shared lines shorter than this are copied into the stream's own
/// buffer: a slice of its own costs reference counts and an I/O vector
/// entry, more than copying a small event (64-byte messages measured
/// slower as slices).
const SHARE_MIN: usize = 512;

/// One batch's chunk as it is rendered: the stream's own bytes in one
/// buffer, shared lines as slices of their own between them.
struct Slices<'a> {
    /// Starts with [`SIZE_ROOM`] bytes for the size line.
    own: BytesMut,
    /// The first of the chunk's own bytes, once a shared slice followed
    /// them (it keeps the size line's room).
    first: Option<BytesMut>,
    out: &'a mut VecDeque<Bytes>,
    /// The chunk's data bytes so far.
    size: usize,
}

impl<'a> Slices<'a> {
    fn new(capacity: usize, out: &'a mut VecDeque<Bytes>) -> Slices<'a> {
        let mut own = BytesMut::with_capacity(SIZE_ROOM + capacity);
        own.put_bytes(0, SIZE_ROOM);
        Slices {
            own,
            first: None,
            out,
            size: 0,
        }
    }

    fn own_len(&self) -> usize {
        let room = if self.first.is_none() { SIZE_ROOM } else { 0 };
        self.own.len() - room
    }

    /// Ends the chunk: its size line in front, `\r\n` after; nothing when
    /// it holds no bytes. The chunk's first slice goes where `at` is.
    fn finish(mut self, at: usize) {
        let size = self.size + self.own_len();
        if size == 0 {
            self.out.truncate(at);
            return;
        }
        self.own.put_slice(b"\r\n");
        let rest = (self.first.is_some()).then(|| self.own.split().freeze());
        let mut first = self.first.take().unwrap_or_else(|| self.own.split());
        let mut line = [0u8; SIZE_ROOM];
        let mut cursor = &mut line[..];
        write!(cursor, "{size:x}\r\n").expect("room for any size");
        let len = SIZE_ROOM - cursor.len();
        let start = SIZE_ROOM - len;
        first[start..SIZE_ROOM].copy_from_slice(&line[..len]);
        first.advance(start);
        self.out[at] = first.freeze();
        if let Some(rest) = rest {
            self.out.push_back(rest);
        }
    }
}

impl Out for Slices<'_> {
    fn own(&mut self) -> &mut BytesMut {
        &mut self.own
    }

    fn share(&mut self, bytes: &Bytes) {
        if bytes.len() < SHARE_MIN {
            self.own.put_slice(bytes);
            return;
        }
        self.size += self.own_len() + bytes.len();
        match &self.first {
            None => self.first = Some(self.own.split()),
            Some(_) if !self.own.is_empty() => self.out.push_back(self.own.split().freeze()),
            Some(_) => {}
        }
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
        on_drain: &Nudge<Drained>,
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
            // The chunk's first slice (with its size line) goes here.
            let at = batch.len();
            batch.push_back(Bytes::new());
            // Small events are copied in whole, larger ones only their `id:`.
            let (id, extra) = (self.render.id_hint(), self.render.event_hint());
            let capacity = (self.frames.iter())
                .map(|f| {
                    if f.len() < SHARE_MIN {
                        f.len() + extra
                    } else {
                        id
                    }
                })
                .sum();
            let mut slices = Slices::new(capacity, batch);
            let mut taken = 0;
            for frame in self.frames.drain(..) {
                taken += frame.len();
                self.render.frame(&frame, &mut slices);
            }
            slices.finish(at);
            outbox.sent(taken, on_drain);
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

    fn wrote(&mut self, _: usize, _: &Outbox, _: &Nudge<Drained>) {}

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
