//! The gRPC listener's connections over TLS. tonic takes a stream of
//! ready connections; the handshakes run in their own tasks, at most
//! [`MAX_HANDSHAKES`] at once and each within [`HANDSHAKE_TIMEOUT`], so a
//! client that opens a connection and never finishes its handshake holds
//! one slot for a few seconds and never the accept loop.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;

/// Handshakes in progress at once (actix-tls's default for the HTTP
/// listener is 256 per worker).
const MAX_HANDSHAKES: usize = 256;
/// A handshake slower than this is dropped (actix-tls's default is 3 s).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(3);
/// Finished connections waiting for the server to take them.
const READY: usize = 64;

/// Accepts on `listener`, runs each handshake, and yields the connections
/// that completed one. Must run inside a tokio runtime; ends when the
/// stream is dropped (at the next accept).
pub fn tls_incoming(
    listener: TcpListener,
    config: Arc<rustls::ServerConfig>,
) -> ReceiverStream<std::io::Result<TlsStream<TcpStream>>> {
    let (tx, rx) = mpsc::channel(READY);
    let acceptor = TlsAcceptor::from(config);
    let slots = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    tokio::spawn(async move {
        loop {
            let Ok(slot) = slots.clone().acquire_owned().await else {
                return;
            };
            let tcp = match listener.accept().await {
                Ok((tcp, _)) => tcp,
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
            // Replies are small and latency matters (see server.rs).
            let _ = tcp.set_nodelay(true);
            let (acceptor, tx) = (acceptor.clone(), tx.clone());
            tokio::spawn(async move {
                let _slot = slot;
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(Ok(tls)) => {
                        let _ = tx.send(Ok(tls)).await;
                    }
                    Ok(Err(e)) => tracing::debug!(error = %e, "gRPC TLS handshake failed"),
                    Err(_) => tracing::debug!("gRPC TLS handshake timed out"),
                }
            });
        }
    });
    ReceiverStream::new(rx)
}
