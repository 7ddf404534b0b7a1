//! The HTTP listener's connection stream: the TCP stream, watched for
//! request heads after the first (actix bounds only the first), for a TLS
//! connection's handshake and first head, and for request bodies.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use actix_rt::net::{ActixStream, Ready, TcpStream};
use actix_tls::accept::rustls_0_23::TlsStream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

use super::{Phase, Unfinished};

/// A TCP stream that drops its connection when a request head after the
/// first, or a request body, is not whole in time (or its IP holds too
/// many unfinished heads). Under TLS it sits below the TLS layer: records
/// count as bytes.
pub struct Watched<T> {
    io: T,
    watch: Unfinished,
    /// The deadline of the head or body arriving now (one timer per
    /// connection, made when a later head starts, by
    /// [`Watched::first_deadline`], or for a body, reset to its deadline).
    timer: Option<Pin<Box<Sleep>>>,
    /// Bytes the listener read before the HTTP service took the
    /// connection (the start of its first head, `socket/sse/tcp.rs`):
    /// read again first. At most one request head.
    replay: Option<bytes::Bytes>,
}

impl<T> Watched<T> {
    pub fn new(io: T) -> Watched<T> {
        Watched {
            io,
            watch: Unfinished::default(),
            timer: None,
            replay: None,
        }
    }

    pub fn get_ref(&self) -> &T {
        &self.io
    }

    /// The stream itself, no longer watched (a connection an SSE stream
    /// took).
    pub fn into_inner(self) -> T {
        self.io
    }

    /// `bytes` are read before anything more from the connection.
    pub fn replay(&mut self, bytes: bytes::Bytes) {
        self.replay = (!bytes.is_empty()).then_some(bytes);
    }

    /// The first head must be whole by `deadline` (the accept's, when the
    /// listener spent some of its time already: actix's own timeout
    /// starts later).
    pub fn first_deadline(&mut self, deadline: std::time::Instant) {
        self.timer = Some(Box::pin(tokio::time::sleep_until(deadline.into())));
    }
}

/// What the accept hook needs of a connection's stream, plain or TLS.
pub trait WatchedStream {
    fn tcp(&self) -> &TcpStream;
    fn watch(&self) -> &Unfinished;
}

impl WatchedStream for Watched<TcpStream> {
    fn tcp(&self) -> &TcpStream {
        &self.io
    }

    fn watch(&self) -> &Unfinished {
        &self.watch
    }
}

impl WatchedStream for TlsStream<Watched<TcpStream>> {
    fn tcp(&self) -> &TcpStream {
        &self.get_ref().0.io
    }

    fn watch(&self) -> &Unfinished {
        &self.get_ref().0.watch
    }
}

fn timed_out() -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        "the request head or body did not arrive in time",
    )
}

impl<T> Watched<T> {
    /// The timer, set for `deadline` (made or reset only when it changes).
    fn arm(&mut self, deadline: std::time::Instant) {
        let at = tokio::time::Instant::from_std(deadline);
        match &mut self.timer {
            Some(t) if t.deadline() == at => {}
            Some(t) => t.as_mut().reset(at),
            None => self.timer = Some(Box::pin(tokio::time::sleep_until(at))),
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(replay) = &mut this.replay {
            let n = replay.len().min(buf.remaining());
            buf.put_slice(&replay.split_to(n));
            if replay.is_empty() {
                this.replay = None;
            }
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) if buf.filled().len() > before => {
                if let Some(deadline) = this.watch.bytes_arrived()? {
                    this.timer = Some(Box::pin(tokio::time::sleep_until(deadline.into())));
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => {
                let watched = match this.watch.phase() {
                    Phase::Later => true,
                    Phase::First => this.timer.is_some(),
                    Phase::Body => match this.watch.body_deadline() {
                        Some(deadline) => {
                            this.arm(deadline);
                            true
                        }
                        None => false,
                    },
                    _ => false,
                };
                if !watched {
                    this.timer = None;
                    return Poll::Pending;
                }
                // Waiting for more of a head or body: wake at its deadline.
                let expired = this
                    .timer
                    .as_mut()
                    .is_some_and(|t| t.as_mut().poll(cx).is_ready());
                if expired {
                    Poll::Ready(Err(timed_out()))
                } else {
                    Poll::Pending
                }
            }
            other => other,
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

impl<T: ActixStream> ActixStream for Watched<T> {
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<Ready>> {
        self.io.poll_read_ready(cx)
    }

    fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<Ready>> {
        self.io.poll_write_ready(cx)
    }
}
