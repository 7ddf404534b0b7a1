//! Moves the balance metadata of a unary reply from its headers into its
//! trailers. tonic sends a unary handler's response metadata as headers;
//! §8 promises trailing metadata on every finished call (streams and
//! refusals already put it there), and a client reading trailers must find
//! it in the same place whatever the method.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use tonic::codegen::Service;

use super::status::{COST, LIMIT, REMAINING, RESET};

/// The tower layer for [`tonic::transport::Server::layer`].
#[derive(Debug, Clone, Copy, Default)]
pub struct TrailersLayer;

impl<S> tower_layer::Layer<S> for TrailersLayer {
    type Service = Trailers<S>;

    fn layer(&self, inner: S) -> Trailers<S> {
        Trailers { inner }
    }
}

#[derive(Debug, Clone)]
pub struct Trailers<S> {
    inner: S,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<S, Req, ResBody> Service<http::Request<Req>> for Trailers<S>
where
    S: Service<http::Request<Req>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<Req>) -> Self::Future {
        let fut = self.inner.call(req);
        Box::pin(async move {
            let (mut parts, body) = fut.await?.into_parts();
            too_large_is_invalid_argument(&mut parts.headers);
            let mut moved = HeaderMap::new();
            // A trailers-only answer (a refusal) already ends in its headers.
            if !parts.headers.contains_key("grpc-status") {
                for name in [LIMIT, REMAINING, RESET, COST] {
                    if let Some(v) = parts.headers.remove(name) {
                        moved.insert(name, v);
                    }
                }
            }
            let body = if moved.is_empty() {
                tonic::body::Body::new(body)
            } else {
                tonic::body::Body::new(WithTrailers {
                    inner: Box::pin(body),
                    extra: Some(moved),
                })
            };
            Ok(http::Response::from_parts(parts, body))
        })
    }
}

/// tonic refuses a request past `grpc.max_message_bytes` before the
/// handler sees it, with `OUT_OF_RANGE`; §8 names `INVALID_ARGUMENT` for
/// anything too large, and a client's error handling follows the contract,
/// so a unary refusal (trailers-only: the status is in the headers) is
/// given the contract's code, keeping tonic's message with the sizes.
/// Nothing in the broker itself answers `OUT_OF_RANGE`.
fn too_large_is_invalid_argument(headers: &mut HeaderMap) {
    if headers
        .get("grpc-status")
        .is_some_and(|v| v == OUT_OF_RANGE)
    {
        headers.insert(
            "grpc-status",
            http::HeaderValue::from_static(INVALID_ARGUMENT),
        );
    }
}

const OUT_OF_RANGE: &str = "11";
const INVALID_ARGUMENT: &str = "3";

/// A body whose trailers gain `extra`.
struct WithTrailers<B> {
    inner: Pin<Box<B>>,
    extra: Option<HeaderMap>,
}

impl<B: Body<Data = Bytes>> Body for WithTrailers<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = &mut *self;
        match std::task::ready!(this.inner.as_mut().poll_frame(cx)) {
            Some(Ok(frame)) => match frame.into_trailers() {
                Ok(mut trailers) => {
                    if let Some(extra) = this.extra.take() {
                        trailers.extend(extra);
                    }
                    Poll::Ready(Some(Ok(Frame::trailers(trailers))))
                }
                Err(frame) => Poll::Ready(Some(Ok(frame))),
            },
            None => Poll::Ready(this.extra.take().map(|t| Ok(Frame::trailers(t)))),
            Some(Err(e)) => Poll::Ready(Some(Err(e))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.extra.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
