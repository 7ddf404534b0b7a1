//! The gRPC listener's connections (issue 26): tonic takes a stream of
//! ready connections, and this is where they are bounded. At the accept a
//! connection takes a place under `grpc.max_connections` and its address's
//! `grpc.ip_max_connections` (refused: closed at once), held until it
//! closes; then, in its own task, its TLS handshake (when on) and the
//! HTTP/2 connection preface must arrive within `grpc.handshake_timeout_ms`
//! or it is closed. A silent connection holds one place for that long and
//! never the accept loop.

use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use dashmap::DashMap;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::{Connected, TcpConnectInfo};

use super::idle::{Activity, Registry};
use crate::exceeded::Exceeded;
use crate::gate::ip_key;
use crate::metrics::Layer;
use crate::node::Node;

/// `PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n`: the first bytes of every HTTP/2
/// connection (RFC 9113 §3.4).
const PREFACE_LEN: usize = 24;
/// Finished connections waiting for the server to take them.
const READY: usize = 64;

/// Connections open on the listener, in all and per address.
#[derive(Debug, Default)]
struct Counts {
    all: AtomicUsize,
    /// One entry per address with a connection open: bounded by
    /// `grpc.max_connections`.
    per_ip: DashMap<IpAddr, u32>,
}

/// One connection's place in [`Counts`], given back on drop.
#[derive(Debug)]
struct Place {
    counts: Arc<Counts>,
    ip: IpAddr,
}

impl Drop for Place {
    fn drop(&mut self) {
        self.counts.all.fetch_sub(1, Ordering::AcqRel);
        self.counts.per_ip.remove_if_mut(&self.ip, |_, n| {
            *n -= 1;
            *n == 0
        });
    }
}

impl Counts {
    /// A place for a connection from `ip`, or the refusal's reason.
    fn take(self: &Arc<Self>, ip: IpAddr, max: usize, ip_max: u32) -> Result<Place, &'static str> {
        if self.all.fetch_add(1, Ordering::AcqRel) >= max {
            self.all.fetch_sub(1, Ordering::AcqRel);
            return Err("too_many_connections");
        }
        let mut n = self.per_ip.entry(ip).or_insert(0);
        if *n >= ip_max {
            drop(n);
            self.all.fetch_sub(1, Ordering::AcqRel);
            self.per_ip.remove_if(&ip, |_, n| *n == 0);
            return Err("ip_too_many_connections");
        }
        *n += 1;
        Ok(Place {
            counts: self.clone(),
            ip,
        })
    }
}

/// A connection's stream, plain or TLS.
enum Io {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// A connection handed to tonic: its stream, the preface read off it (given
/// back first), and its place.
pub struct Conn {
    io: Io,
    preface: [u8; PREFACE_LEN],
    replayed: usize,
    info: TcpConnectInfo,
    idle: Idleness,
    _place: Place,
}

/// A connection's calls and its idle deadline (`grpc.idle_timeout_ms`).
struct Idleness {
    activity: Arc<Activity>,
    registry: Registry,
    peer: std::net::SocketAddr,
    /// `None`: no idle timeout.
    after: Option<Duration>,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    node: Arc<Node>,
}

impl Drop for Idleness {
    fn drop(&mut self) {
        self.registry
            .remove_if(&self.peer, |_, a| Arc::ptr_eq(a, &self.activity));
    }
}

impl Idleness {
    /// Whether the connection has been idle too long; arms the timer for
    /// its deadline otherwise.
    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(after) = self.after else {
            return false;
        };
        let Some(deadline) = self.activity.idle_deadline(after) else {
            self.timer = None;
            return false;
        };
        if Instant::now() >= deadline {
            Exceeded::new(Layer::Grpc, "idle_timeout", "")
                .conn(&self.peer.ip().to_string())
                .emit(&self.node.metrics);
            return true;
        }
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline.into())));
        if timer.deadline() != deadline.into() {
            timer.as_mut().reset(deadline.into());
        }
        // Registers the wake-up; at the deadline the next read looks again.
        let _ = timer.as_mut().poll(cx);
        false
    }
}

impl Connected for Conn {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.info.clone()
    }
}

/// Accepts on `listener` under the node's `[grpc]` bounds and yields the
/// connections that sent their preface in time. Must run inside a tokio
/// runtime; ends when the stream is dropped (at the next accept).
pub fn incoming(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    node: Arc<Node>,
    registry: Registry,
) -> ReceiverStream<io::Result<Conn>> {
    let (tx, rx) = mpsc::channel(READY);
    let acceptor = tls.map(TlsAcceptor::from);
    let counts = Arc::new(Counts::default());
    tokio::spawn(async move {
        loop {
            let (tcp, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    // EMFILE and the like: wait a moment, as tonic does.
                    tracing::debug!(error = %e, "gRPC accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            if tx.is_closed() {
                return;
            }
            let config = node.config.load();
            let ip = peer.ip().to_canonical();
            let key = ip_key(ip, config.handshake.ipv6_prefix_len);
            let place = match counts.take(
                key,
                config.grpc.max_connections,
                config.grpc.ip_max_connections,
            ) {
                Ok(p) => p,
                Err(reason) => {
                    Exceeded::new(Layer::Grpc, reason, "")
                        .conn(&ip.to_string())
                        .emit(&node.metrics);
                    continue;
                }
            };
            // Replies are small and latency matters (see server.rs).
            let _ = tcp.set_nodelay(true);
            let deadline = Duration::from_millis(config.grpc.handshake_timeout_ms);
            let after = (config.grpc.idle_timeout_ms > 0)
                .then(|| Duration::from_millis(config.grpc.idle_timeout_ms));
            let (acceptor, tx, node) = (acceptor.clone(), tx.clone(), node.clone());
            let registry = registry.clone();
            tokio::spawn(async move {
                let info = TcpConnectInfo {
                    local_addr: tcp.local_addr().ok(),
                    remote_addr: Some(peer),
                };
                match tokio::time::timeout(deadline, handshake(tcp, acceptor)).await {
                    Ok(Ok((io, preface))) => {
                        let activity = Arc::new(Activity::default());
                        registry.insert(peer, activity.clone());
                        let conn = Conn {
                            io,
                            preface,
                            replayed: 0,
                            info,
                            idle: Idleness {
                                activity,
                                registry,
                                peer,
                                after,
                                timer: None,
                                node,
                            },
                            _place: place,
                        };
                        let _ = tx.send(Ok(conn)).await;
                    }
                    Ok(Err(e)) => tracing::debug!(error = %e, "gRPC handshake failed"),
                    Err(_) => {
                        Exceeded::new(Layer::Grpc, "handshake_timeout", "")
                            .conn(&ip.to_string())
                            .emit(&node.metrics);
                    }
                }
            });
        }
    });
    ReceiverStream::new(rx)
}

/// The TLS handshake (when on), then the HTTP/2 preface.
async fn handshake(
    tcp: TcpStream,
    acceptor: Option<TlsAcceptor>,
) -> io::Result<(Io, [u8; PREFACE_LEN])> {
    let mut preface = [0u8; PREFACE_LEN];
    let io = match acceptor {
        None => {
            let mut tcp = tcp;
            tcp.read_exact(&mut preface).await?;
            Io::Plain(tcp)
        }
        Some(a) => {
            let mut tls = a.accept(tcp).await?;
            tls.read_exact(&mut preface).await?;
            Io::Tls(Box::new(tls))
        }
    };
    Ok((io, preface))
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.replayed < PREFACE_LEN {
            let rest = &this.preface[this.replayed..];
            let n = rest.len().min(buf.remaining());
            buf.put_slice(&rest[..n]);
            this.replayed += n;
            return Poll::Ready(Ok(()));
        }
        let read = match &mut this.io {
            Io::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        };
        match read {
            // Nothing to read and no call for too long: end of stream, and
            // the server closes the connection.
            Poll::Pending if this.idle.expired(cx) => Poll::Ready(Ok(())),
            other => other,
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match &self.io {
            Io::Plain(s) => s.is_write_vectored(),
            Io::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_flush(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
