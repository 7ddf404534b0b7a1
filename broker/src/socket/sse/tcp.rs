//! A plain TCP connection whose first request is a stream takes the
//! connection whole, as an upgraded socket does (issue 28's benchmark):
//! through actix-http's h1 dispatcher every event was copied into its
//! write buffer, and the dispatcher kept 8 KiB to read and 8 KiB to write
//! for the stream's life. Here the listener reads the first request head
//! itself ([`Taker::first`]), before the HTTP service, and a stream then
//! runs on the socket's transport (`feed.rs`), which writes events as
//! slices and holds no I/O buffer while idle.
//!
//! Anything else goes on to the HTTP service as before, the bytes read
//! replayed first: other requests (decided on the request line's first
//! bytes), a stream request the dispatcher must see (not HTTP/1.1, with a
//! body, `Expect`, an upgrade), TLS (never read here), and a keep-alive
//! connection's later requests.
//!
//! The head's bounds stay those of `unfinished`: the connection is counted
//! against its IP from the accept (`ip_max_unfinished`) until the head is
//! whole, and the head must be whole `request_timeout_ms` after the
//! accept (408, as actix answers); a connection handed on after some of
//! that time keeps the accept's deadline ([`Watched::first_deadline`]).
//! The head is parsed by actix-http's own codec, and the response head
//! written by it, so both are the dispatcher's bytes.

use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_codec::{Decoder, Encoder, Framed};
use actix_http::body::BodySize;
use actix_http::h1::{self, MessageType};
use actix_http::header::HeaderMap;
use actix_http::{Method, Request, RequestHead, Response, ServiceConfig, StatusCode, Version};
use actix_web::HttpResponse;
use actix_web::rt::net::TcpStream;
use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::feed::{SseFeed, chunk};
use super::{Opened, PATH, open};
use crate::node::Node;
use crate::socket::Transport;
use crate::unfinished::{Watched, WatchedStream};

/// The request line a stream's head starts with (then `?` or a space).
const LINE: &[u8] = b"GET /v1/sse";

/// The most head bytes read here: a longer head is the HTTP service's to
/// refuse. Bounds the buffer each connection holds until its head is
/// whole.
const MAX_HEAD: usize = 16 * 1024;

/// Adds what the app's middleware adds to an answer (CORS,
/// `crate::cors::decorate`).
pub type Decorate = fn(&Node, &RequestHead, &mut HeaderMap);

/// One worker's taker of streams (its codec config, with the worker's
/// date clock, is shared by its connections).
#[derive(Clone)]
pub struct Taker(Rc<Inner>);

struct Inner {
    node: Arc<Node>,
    codec: ServiceConfig,
    decorate: Decorate,
    /// `[socket] send_buffer_bytes`, applied to a taken connection.
    send_buffer: usize,
}

/// Whether `buf` starts a stream's request line: `None` until it says.
fn wanted(buf: &[u8]) -> Option<bool> {
    let n = buf.len().min(LINE.len());
    if buf[..n] != LINE[..n] {
        return Some(false);
    }
    let next = buf.get(LINE.len())?;
    Some(matches!(next, b' ' | b'?'))
}

/// Whether the head is whole (a blank line at or after `from`).
fn whole(buf: &[u8], from: usize) -> bool {
    let rest = &buf[from.saturating_sub(3)..];
    rest.windows(2).any(|w| w == b"\n\n") || rest.windows(4).any(|w| w == b"\r\n\r\n")
}

/// Whether a decoded stream request can be served here: what actix-http
/// would treat specially (no HTTP/1.1, a body, `Expect`, an upgrade) goes
/// to it.
fn takes(req: &Request, codec: &h1::Codec) -> bool {
    req.method() == Method::GET
        && req.path() == PATH
        && req.version() == Version::HTTP_11
        && codec.message_type() == MessageType::None
        && !codec.upgrade()
        && !req.head().headers.contains_key(actix_http::header::EXPECT)
}

impl Taker {
    pub fn new(node: Arc<Node>, codec: ServiceConfig, decorate: Decorate) -> Taker {
        let send_buffer = node.config.load().socket.send_buffer_bytes;
        Taker(Rc::new(Inner {
            node,
            codec,
            decorate,
            send_buffer,
        }))
    }

    /// Reads a new connection's first request head: a stream is served
    /// here (`None`), anything else is the HTTP service's, returned with
    /// what was read to be read again. `None` too for a connection gone
    /// or timed out before its head.
    pub async fn first(&self, io: TcpStream) -> Option<Watched<TcpStream>> {
        let node = &self.0.node;
        let mut io = Watched::new(io);
        if !crate::unfinished::accept(node, io.watch(), io.tcp()) {
            // Shut already: the service reads its end and drops it.
            return Some(io);
        }
        let timeout = node.config.load().handshake.request_timeout_ms;
        let deadline = Instant::now() + Duration::from_millis(timeout);
        let mut buf = BytesMut::new();
        let (mut reads, mut scanned) = (0, 0);
        loop {
            match wanted(&buf) {
                Some(false) => break,
                Some(true) if whole(&buf, scanned) => {
                    let mut codec = h1::Codec::new(self.0.codec.clone());
                    match codec.decode(&mut buf.clone()) {
                        Ok(Some(h1::Message::Item(req))) if takes(&req, &codec) => {
                            self.serve(req, codec, io).await;
                            return None;
                        }
                        Ok(None) => {}
                        _ => break,
                    }
                }
                _ => {}
            }
            if buf.len() >= MAX_HEAD {
                break;
            }
            scanned = buf.len();
            buf.reserve(1024);
            let read = tokio::time::timeout_at(deadline.into(), io.read_buf(&mut buf));
            match read.await {
                Err(_) => {
                    self.request_timeout(io).await;
                    return None;
                }
                Ok(Ok(0) | Err(_)) => return None,
                Ok(Ok(_)) => reads += 1,
            }
        }
        if reads > 1 {
            io.first_deadline(deadline);
        }
        io.replay(buf.freeze());
        Some(io)
    }

    /// A stream's request, whole: the §14 checks, then the stream on this
    /// connection, or the refusal (after which it closes).
    async fn serve(&self, mut req: Request, mut codec: h1::Codec, io: Watched<TcpStream>) {
        // The head is whole, and the connection never reads another.
        io.watch().off();
        req.head_mut().peer_addr = io.tcp().peer_addr().ok();
        let node = self.0.node.clone();
        let fd = io.tcp().as_raw_fd();
        let opened = open(req.head(), node.clone(), Some(fd)).await;
        let decorate = |response: &mut HttpResponse| {
            (self.0.decorate)(&node, req.head(), response.headers_mut());
        };
        let Opened {
            mut response,
            started,
            retry,
            render,
            ender,
        } = match opened {
            Ok(o) => o,
            Err(mut refused) => {
                decorate(&mut refused);
                let framed = Framed::new(io, codec);
                if let Err(e) = crate::socket::handshake::refuse(framed, refused).await {
                    tracing::debug!(error = %e, "stream refusal not delivered");
                }
                return;
            }
        };
        let mut response = response.finish();
        decorate(&mut response);
        let (response, _) = Response::from(response).into_parts();
        let mut head = BytesMut::new();
        let item = h1::Message::Item((response, BodySize::Stream));
        if codec.encode(item, &mut head).is_err() {
            return;
        }
        chunk(&mut head, &retry);
        let io = io.into_inner();
        if self.0.send_buffer > 0 {
            // Best effort, as for every connection (`server.rs`).
            let _ = socket2::SockRef::from(&io).set_send_buffer_size(self.0.send_buffer);
        }
        let linger = Duration::from_millis(node.config.load().socket.close_timeout_ms);
        let feed = SseFeed::new(head.freeze(), render, ender, started.pipe.clone());
        actix_rt::spawn(Transport::with_feed(
            io,
            feed,
            started.pipe,
            started.outbox,
            started.on_drain,
            linger,
        ));
    }

    /// The first head did not arrive in time: 408, as actix answers it,
    /// then the connection closes.
    async fn request_timeout(&self, mut io: Watched<TcpStream>) {
        let mut codec = h1::Codec::new(self.0.codec.clone());
        let response = Response::with_body(StatusCode::REQUEST_TIMEOUT, ());
        let mut out = BytesMut::new();
        let item = h1::Message::Item((response, BodySize::Sized(0)));
        if codec.encode(item, &mut out).is_ok() {
            let _ = io.write_all(&out).await;
            let _ = io.shutdown().await;
        }
    }
}
