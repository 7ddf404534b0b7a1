//! Request bodies are part of the request (issue 38): a connection whose
//! head is whole but whose body is still arriving goes on counting toward
//! its address's `handshake.ip_max_unfinished`, and its body must be whole
//! within `http.body_timeout_ms` of the head ([`Watched`](super::Watched)
//! drops the connection past it). The app's outermost middleware marks the
//! head whole and wraps the body in a stream that marks it whole at its
//! end, so this holds on every route, whether or not the route reads the
//! body.

use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use actix_http::ConnectionType;
use actix_web::body::MessageBody;
use actix_web::dev::{Payload, ServiceRequest, ServiceResponse};
use actix_web::error::PayloadError;
use actix_web::middleware::Next;
use actix_web::{Error, HttpMessage};
use bytes::Bytes;
use futures_util::Stream;

use super::Unfinished;

/// The middleware (`actix_web::middleware::from_fn`): the head is whole
/// when the request reaches the app; the body when its stream ends. A
/// request answered before its body is whole gets `Connection: close`: the
/// connection takes no other request, and counts until it closes.
pub async fn middleware(
    mut req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, Error> {
    let watch = req.conn_data::<Unfinished>().cloned();
    if let Some(w) = &watch {
        match req.take_payload() {
            Payload::None => w.head_whole(false),
            payload => {
                w.head_whole(true);
                let counted = Counted {
                    inner: payload,
                    watch: w.clone(),
                    ended: false,
                };
                req.set_payload(Payload::Stream {
                    payload: Box::pin(counted),
                });
            }
        }
    }
    let response = next.call(req).await;
    match (watch, response) {
        (Some(w), Ok(mut response)) => {
            if !w.answered() {
                response
                    .response_mut()
                    .head_mut()
                    .set_connection_type(ConnectionType::Close);
            }
            Ok(response)
        }
        (Some(w), Err(e)) => {
            w.answered();
            Err(e)
        }
        (None, response) => response,
    }
}

/// A request's body, which tells the connection's [`Unfinished`] when it
/// has arrived whole.
struct Counted {
    inner: Payload,
    watch: Unfinished,
    /// The stream has ended (whole, or with an error).
    ended: bool,
}

impl Counted {
    fn end(&mut self, item: &Option<Result<Bytes, PayloadError>>) {
        match item {
            None => {
                self.ended = true;
                self.watch.body_whole();
            }
            // Incomplete or malformed: the connection ends with it, and
            // counts until it does.
            Some(Err(_)) => self.ended = true,
            Some(Ok(_)) => {}
        }
    }
}

impl Stream for Counted {
    type Item = Result<Bytes, PayloadError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.ended {
            return Poll::Ready(None);
        }
        let item = std::task::ready!(Pin::new(&mut this.inner).poll_next(cx));
        this.end(&item);
        Poll::Ready(item)
    }
}

impl Drop for Counted {
    /// A route that did not read the body to its end drops it. What has
    /// arrived already is discarded here; the rest is read (and discarded)
    /// as it arrives, by a task of the connection's worker, so a body that
    /// becomes whole still stops counting (an SSE stream's request, which
    /// lives on). The task holds the connection's state weakly: the
    /// connection's end (the body's deadline at the latest) ends the body
    /// with an error, and the task with it.
    fn drop(&mut self) {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        while !self.ended {
            match Pin::new(&mut self.inner).poll_next(&mut cx) {
                Poll::Ready(item) => self.end(&item),
                Poll::Pending => break,
            }
        }
        if self.ended {
            return;
        }
        let mut rest = std::mem::replace(&mut self.inner, Payload::None);
        let watch = Rc::downgrade(&self.watch.0);
        actix_rt::spawn(async move {
            use futures_util::StreamExt;
            while let Some(item) = rest.next().await {
                if item.is_err() {
                    return;
                }
            }
            if let Some(watch) = watch.upgrade() {
                Unfinished(watch).body_whole();
            }
        });
    }
}
