//! Client frames off the wire: WebSocket decoding, reassembly of
//! fragmented messages under the payload limit, and a gate that stops
//! reading the socket (TCP back-pressure) while the actor wants it stopped.

use std::cell::{Cell, RefCell};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use actix_http::ws::{Codec, Frame, Item, ProtocolError};
use bytes::{Bytes, BytesMut};
use futures_util::Stream;
use tokio_util::codec::Decoder;

/// One complete client message or control frame.
#[derive(Debug)]
pub enum InFrame {
    Text(Bytes),
    /// Binary messages are refused; only their size is kept.
    Binary(usize),
    Ping(Bytes),
    Pong,
    Close(Option<u16>),
}

#[derive(Debug, thiserror::Error)]
pub enum InError {
    #[error("message larger than {0} bytes")]
    TooLarge(usize),
    #[error("WebSocket protocol error: {0}")]
    Protocol(String),
}

/// Shared between the actor and its inbound stream.
pub struct Gate {
    paused: Cell<bool>,
    waker: Cell<Option<Waker>>,
    max_size: Cell<usize>,
}

impl Gate {
    pub fn new(max_size: usize) -> Rc<Gate> {
        Rc::new(Gate {
            paused: Cell::new(false),
            waker: Cell::new(None),
            max_size: Cell::new(max_size),
        })
    }

    /// Stop reading: the HTTP layer's buffer fills and TCP pushes back.
    pub fn pause(&self) {
        self.paused.set(true);
    }

    pub fn resume(&self) {
        self.paused.set(false);
        if let Some(w) = self.waker.take() {
            w.wake();
        }
    }

    pub fn is_paused(&self) -> bool {
        self.paused.get()
    }

    pub fn set_max_size(&self, bytes: usize) {
        self.max_size.set(bytes);
    }
}

struct Partial {
    text: bool,
    data: BytesMut,
}

/// The bytes a client sent, as the broker decodes them: WebSocket frames
/// and fragmented messages reassembled under a size limit. Separate from
/// the socket's stream so it can be driven (and fuzzed) from plain bytes.
pub struct WsDecoder {
    buf: BytesMut,
    codec: Codec,
    partial: Option<Partial>,
}

impl Default for WsDecoder {
    fn default() -> Self {
        WsDecoder {
            buf: BytesMut::new(),
            // The payload limit is enforced below, before buffering; the
            // codec's own limit only needs to be out of its way.
            codec: Codec::new().max_size(usize::MAX >> 1),
            partial: None,
        }
    }
}

/// Client bytes on their way from the transport (`socket/transport.rs`) to
/// the actor's inbound stream; both run on the socket's worker. Reading
/// stops while more than [`PIPE_LIMIT`] bytes wait here, which happens only
/// while the actor has paused its stream: TCP then pushes back.
#[derive(Default)]
pub struct Pipe {
    bytes: RefCell<BytesMut>,
    /// The client's side ended (cleanly or not): no more bytes.
    ended: Cell<bool>,
    reader: Cell<Option<Waker>>,
    writer: Cell<Option<Waker>>,
}

/// Bytes the pipe holds before the transport stops reading.
pub const PIPE_LIMIT: usize = 32 * 1024;

impl Pipe {
    /// Whether the transport may read more; if not, it is woken when it
    /// may.
    pub fn has_room(&self, cx: &Context<'_>) -> bool {
        if self.bytes.borrow().len() < PIPE_LIMIT {
            return true;
        }
        self.writer.set(Some(cx.waker().clone()));
        false
    }

    /// Bytes read from the client.
    pub fn push(&self, bytes: &[u8]) {
        self.bytes.borrow_mut().extend_from_slice(bytes);
        if let Some(w) = self.reader.take() {
            w.wake();
        }
    }

    /// The client's side is done: the stream ends after what is here.
    pub fn end(&self) {
        self.ended.set(true);
        if let Some(w) = self.reader.take() {
            w.wake();
        }
    }
}

pub struct Inbound {
    pipe: Rc<Pipe>,
    decoder: WsDecoder,
    gate: Rc<Gate>,
    eof: bool,
}

impl Inbound {
    pub fn new(pipe: Rc<Pipe>, gate: Rc<Gate>) -> Inbound {
        Inbound {
            pipe,
            decoder: WsDecoder::default(),
            gate,
            eof: false,
        }
    }
}

impl WsDecoder {
    /// Bytes read from the socket.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Decodes one frame (a whole message, once reassembled) from what
    /// was fed, if a whole one is there; messages over `max` bytes are
    /// refused from their header, before their payload is buffered.
    pub fn decode(&mut self, max: usize) -> Result<Option<InFrame>, InError> {
        loop {
            // Refuse an oversized frame from its header, before its
            // payload is buffered (a 1 GiB length must not cost 1 GiB).
            if let Some(len) = declared_len(&self.buf) {
                let have = self.partial.as_ref().map_or(0, |p| p.data.len());
                if have.saturating_add(len) > max {
                    return Err(InError::TooLarge(max));
                }
            }
            let frame = match self.codec.decode(&mut self.buf) {
                Ok(Some(f)) => f,
                Ok(None) => return Ok(None),
                Err(e) => return Err(protocol(e)),
            };
            let out = match frame {
                Frame::Text(b) => InFrame::Text(b),
                Frame::Binary(b) => InFrame::Binary(b.len()),
                Frame::Ping(b) => InFrame::Ping(b),
                Frame::Pong(_) => InFrame::Pong,
                Frame::Close(reason) => InFrame::Close(reason.map(|r| r.code.into())),
                Frame::Continuation(item) => match self.continuation(item, max)? {
                    Some(f) => f,
                    None => continue,
                },
            };
            return Ok(Some(out));
        }
    }

    /// Reassembles a fragmented message, refusing it as soon as the
    /// pieces add up to more than the payload limit.
    fn continuation(&mut self, item: Item, max: usize) -> Result<Option<InFrame>, InError> {
        let (first, chunk, last) = match item {
            Item::FirstText(b) => (Some(true), b, false),
            Item::FirstBinary(b) => (Some(false), b, false),
            Item::Continue(b) => (None, b, false),
            Item::Last(b) => (None, b, true),
        };
        match (first, self.partial.as_mut()) {
            (Some(text), _) => {
                self.partial = Some(Partial {
                    text,
                    data: BytesMut::from(&chunk[..]),
                });
            }
            (None, Some(p)) => {
                if p.data.len() + chunk.len() > max {
                    return Err(InError::TooLarge(max));
                }
                p.data.extend_from_slice(&chunk);
            }
            (None, None) => {
                return Err(InError::Protocol(
                    "continuation frame without a first frame".into(),
                ));
            }
        }
        if !last {
            return Ok(None);
        }
        Ok(self.partial.take().map(|p| {
            if p.text {
                InFrame::Text(p.data.freeze())
            } else {
                InFrame::Binary(p.data.len())
            }
        }))
    }
}

impl Stream for Inbound {
    type Item = Result<InFrame, InError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if this.eof {
                return Poll::Ready(None);
            }
            if this.gate.is_paused() {
                this.gate.waker.set(Some(cx.waker().clone()));
                return Poll::Pending;
            }
            match this.decoder.decode(this.gate.max_size.get()) {
                Ok(Some(frame)) => return Poll::Ready(Some(Ok(frame))),
                Ok(None) => {}
                Err(e) => {
                    this.eof = true;
                    return Poll::Ready(Some(Err(e)));
                }
            }
            let mut bytes = this.pipe.bytes.borrow_mut();
            if !bytes.is_empty() {
                this.decoder.feed(&bytes);
                // Taken, not cleared: a burst's buffer is not kept.
                drop(std::mem::take(&mut *bytes));
                drop(bytes);
                if let Some(w) = this.pipe.writer.take() {
                    w.wake();
                }
                continue;
            }
            drop(bytes);
            if this.pipe.ended.get() {
                this.eof = true;
                return Poll::Ready(None);
            }
            this.pipe.reader.set(Some(cx.waker().clone()));
            return Poll::Pending;
        }
    }
}

fn protocol(e: ProtocolError) -> InError {
    match e {
        ProtocolError::Overflow => InError::Protocol("frame length overflow".into()),
        other => InError::Protocol(other.to_string()),
    }
}

/// The payload length a complete frame header in `buf` declares.
fn declared_len(buf: &[u8]) -> Option<usize> {
    if buf.len() < 2 {
        return None;
    }
    let len = buf[1] & 0x7f;
    match len {
        126 if buf.len() >= 4 => Some(usize::from(u16::from_be_bytes([buf[2], buf[3]]))),
        127 if buf.len() >= 10 => {
            let n = u64::from_be_bytes(buf[2..10].try_into().ok()?);
            Some(usize::try_from(n).unwrap_or(usize::MAX))
        }
        126 | 127 => None,
        n => Some(usize::from(n)),
    }
}
