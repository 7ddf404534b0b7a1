//! Idle gRPC connections (issue 26): a connection with no call open for
//! `grpc.idle_timeout_ms` is closed, so a client that connects and never
//! calls holds no descriptor for ever (HTTP/2 keepalive PINGs, answered,
//! do not count as use). Calls are counted by a tower layer that finds the
//! connection by its peer address, unique while it is open.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use dashmap::DashMap;
use http_body::{Body, Frame, SizeHint};
use tonic::codegen::Service;
use tonic::transport::server::TcpConnectInfo;

/// The open connections' activity, by peer address: one entry per open
/// connection (bounded by `grpc.max_connections`), removed when it closes.
pub type Registry = Arc<DashMap<SocketAddr, Arc<Activity>>>;

/// One connection's calls.
#[derive(Debug)]
pub struct Activity {
    born: Instant,
    open: AtomicUsize,
    /// When the last call ended (ms since `born`).
    ended_ms: AtomicU64,
}

impl Default for Activity {
    fn default() -> Self {
        Activity {
            born: Instant::now(),
            open: AtomicUsize::new(0),
            ended_ms: AtomicU64::new(0),
        }
    }
}

impl Activity {
    /// When the connection is idle past, or `None` while a call is open.
    pub fn idle_deadline(&self, idle: Duration) -> Option<Instant> {
        if self.open.load(Ordering::Acquire) > 0 {
            return None;
        }
        let ended = Duration::from_millis(self.ended_ms.load(Ordering::Acquire));
        Some(self.born + ended + idle)
    }

    fn start(self: &Arc<Self>) -> CallGuard {
        self.open.fetch_add(1, Ordering::AcqRel);
        CallGuard(self.clone())
    }
}

/// One open call; ends on drop (its response body's end).
struct CallGuard(Arc<Activity>);

impl Drop for CallGuard {
    fn drop(&mut self) {
        let a = &self.0;
        let ms = u64::try_from(a.born.elapsed().as_millis()).unwrap_or(u64::MAX);
        a.ended_ms.store(ms, Ordering::Release);
        a.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The tower layer for [`tonic::transport::Server::layer`].
#[derive(Debug, Clone)]
pub struct IdleLayer(pub Registry);

impl<S> tower_layer::Layer<S> for IdleLayer {
    type Service = Idle<S>;

    fn layer(&self, inner: S) -> Idle<S> {
        Idle {
            inner,
            registry: self.0.clone(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Idle<S> {
    inner: S,
    registry: Registry,
}

impl<S, Req, ResBody> Service<http::Request<Req>> for Idle<S>
where
    S: Service<http::Request<Req>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
    ResBody: Body<Data = Bytes> + Send + 'static,
{
    type Response = http::Response<Counted<ResBody>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<Req>) -> Self::Future {
        let guard = req
            .extensions()
            .get::<TcpConnectInfo>()
            .and_then(|i| i.remote_addr)
            .and_then(|peer| self.registry.get(&peer).map(|a| a.start()));
        let fut = self.inner.call(req);
        Box::pin(async move {
            let (parts, body) = fut.await?.into_parts();
            Ok(http::Response::from_parts(
                parts,
                Counted {
                    inner: Box::pin(body),
                    _guard: guard,
                },
            ))
        })
    }
}

/// A response body that holds its call open until dropped.
pub struct Counted<B> {
    inner: Pin<Box<B>>,
    _guard: Option<CallGuard>,
}

impl<B: Body<Data = Bytes>> Body for Counted<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        self.inner.as_mut().poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
