//! The TLS handshake of an HTTP/WebSocket connection (issue 38): it is
//! part of the connection's unfinished request. The connection is counted
//! against its address at the TCP accept, before the handshake
//! (`handshake.ip_max_unfinished`; past it, shut at once without any TLS
//! work), and the handshake and the first request head must both be done
//! within `handshake.request_timeout_ms` of the accept. The handshake runs
//! in the connection's own task: there is no per-worker cap on handshakes
//! in progress that silent connections could fill (actix-tls's acceptor
//! stops a worker's accepts at 256), so one address holds at most its
//! cap of them, for at most the deadline.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_tls::accept::rustls_0_23::TlsStream;
use actix_web::rt::net::TcpStream;
use tokio_rustls::TlsAcceptor;

use super::{Watched, WatchedStream};
use crate::node::Node;

/// The connection after its TLS handshake, counted and watched; `None`
/// when it was refused at the accept, failed its handshake or ran out of
/// time (the connection is dropped).
pub async fn handshake(
    node: &Arc<Node>,
    acceptor: &TlsAcceptor,
    io: TcpStream,
) -> Option<TlsStream<Watched<TcpStream>>> {
    let _ = io.set_nodelay(true);
    let mut io = Watched::new(io);
    if !super::accept(node, io.watch(), io.tcp()) {
        return None;
    }
    let timeout = node.config.load().handshake.request_timeout_ms;
    let deadline = Instant::now() + Duration::from_millis(timeout);
    // The head after the handshake keeps the accept's deadline.
    io.first_deadline(deadline);
    match tokio::time::timeout_at(deadline.into(), acceptor.accept(io)).await {
        Ok(Ok(tls)) => Some(TlsStream::from(tls)),
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "TLS handshake failed");
            None
        }
        // Counted as `request_timeout` when the connection's watch drops.
        Err(_) => None,
    }
}
