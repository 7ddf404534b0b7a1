//! The gRPC server on its own thread and multi-threaded tokio runtime.
//! actix-web runs one single-threaded runtime per worker; tonic wants a
//! work-stealing one, and the two share nothing but `Arc<Node>` (which is
//! `Send + Sync`) and the hub's sinks.

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{oneshot, watch};
use tokio::time::Instant;
use tonic::transport::Server;

use super::proto::broker_server::BrokerServer;
use super::service::BrokerService;
use super::trailers::TrailersLayer;
use crate::node::Node;

/// Time for the last answers to be written before connections are cut.
const LAST_WRITES: Duration = Duration::from_millis(50);

/// A running gRPC server. Dropping it stops it without a drain.
#[derive(Debug)]
pub struct GrpcServer {
    addr: SocketAddr,
    drain: watch::Sender<Option<Instant>>,
    open: Arc<AtomicUsize>,
    stop: watch::Sender<bool>,
    done: Option<oneshot::Receiver<()>>,
}

/// Serves `tidegate.v1.Broker` on `listener` until stopped.
pub fn start(node: Arc<Node>, listener: TcpListener) -> io::Result<GrpcServer> {
    let config = node.config.load_full();
    let grpc = config.grpc.clone();
    let workers = match grpc.workers {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("tidegate-grpc")
        .enable_all()
        .build()?;
    node.metrics
        .alive
        .runtime("grpc", runtime.handle().clone(), false);
    let (drain_tx, drain_rx) = watch::channel(None);
    let (stop_tx, stop_rx) = watch::channel(false);
    let (done_tx, done_rx) = oneshot::channel();
    let open = Arc::new(AtomicUsize::new(0));
    let service_open = open.clone();
    let server_open = open.clone();
    let close_grace = Duration::from_millis(config.socket.close_timeout_ms);
    std::thread::Builder::new()
        .name("tidegate-grpc".into())
        .spawn(move || {
            let open = server_open;
            runtime.block_on(async move {
                let listener = match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::error!(error = %e, "gRPC listener");
                        return;
                    }
                };
                let tls = node.tls.grpc.clone();
                let incoming_node = node.clone();
                let registry = super::idle::Registry::default();
                let service = BrokerServer::new(BrokerService::new(node, drain_rx, service_open))
                    .max_decoding_message_size(grpc.max_message_bytes);
                let mut builder = Server::builder()
                    .max_concurrent_streams(grpc.max_concurrent_streams)
                    // A peer that stops answering PINGs is dropped.
                    .http2_keepalive_interval(Some(Duration::from_millis(
                        grpc.keepalive_interval_ms,
                    )))
                    .http2_keepalive_timeout(Some(Duration::from_millis(
                        grpc.keepalive_timeout_ms,
                    )));
                if grpc.max_connection_age_ms > 0 {
                    builder = builder
                        .max_connection_age(Duration::from_millis(grpc.max_connection_age_ms))
                        .max_connection_age_grace(close_grace);
                }
                let router = builder
                    .layer(TrailersLayer)
                    .layer(super::idle::IdleLayer(registry.clone()))
                    .add_service(service);
                let shutdown = stopped(stop_rx.clone());
                // Connection caps, handshake and preface deadline
                // (`incoming`); `[grpc] tls_cert_file`: HTTP/2 over TLS,
                // the certificate from the store SIGHUP swaps.
                let tls = tls.map(|store| Arc::new(crate::tls::server_config(store, &[b"h2"])));
                let incoming = super::incoming::incoming(listener, tls, incoming_node, registry);
                let serve = router.serve_with_incoming_shutdown(incoming, shutdown);
                tracing::info!(%addr, workers, "gRPC serving");
                tokio::select! {
                    r = serve => if let Err(e) = r {
                        tracing::error!(error = %e, "gRPC server");
                    },
                    // After the stop, connections are cut once no call is
                    // open (a client's idle connection does not hold the
                    // node), or past the close timeout.
                    () = async {
                        stopped(stop_rx).await;
                        let cut = Instant::now() + close_grace;
                        while open.load(Ordering::Acquire) > 0 && Instant::now() < cut {
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                        tokio::time::sleep(LAST_WRITES).await;
                    } => {}
                }
            });
            runtime.shutdown_timeout(Duration::from_millis(100));
            let _ = done_tx.send(());
        })?;
    Ok(GrpcServer {
        addr,
        drain: drain_tx,
        open,
        stop: stop_tx,
        done: Some(done_rx),
    })
}

async fn stopped(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|stop| *stop).await;
}

impl GrpcServer {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Starts the drain: open streams end at staggered moments within
    /// `within` (new calls are refused through `Node::is_draining`).
    pub fn drain(&self, within: Duration) {
        self.drain.send_replace(Some(Instant::now() + within));
    }

    /// Waits until no stream is open or `deadline` passes.
    pub async fn until_idle(&self, deadline: std::time::Instant) {
        while self.open.load(Ordering::Acquire) > 0 && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops accepting, lets open calls finish (cut after
    /// `socket.close_timeout_ms`), and waits for the runtime to end.
    pub async fn stop(mut self) {
        self.stop.send_replace(true);
        if let Some(done) = self.done.take() {
            let _ = done.await;
        }
    }
}

impl Drop for GrpcServer {
    fn drop(&mut self) {
        self.stop.send_replace(true);
    }
}
