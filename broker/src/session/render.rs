//! How a front says one delivered message in its own words.

use bytes::Bytes;

/// A front's rendering of one message of a subscription: the WebSocket
/// frame, the SSE event, a GraphQL `next` through its `Shape`, the gRPC
/// `Message`. The session decides which messages go out and in what
/// order ([`super::Subscription`]); the front renders each as it queues
/// or sends it, from the hub's `frame` (`wire::message`'s encoding, whose
/// `data` it may borrow).
pub trait Render {
    /// What the front queues or sends for one message.
    type Out;

    /// Message `seq` of `channel`, from the hub's `frame`.
    fn render(&self, channel: &str, seq: u64, frame: &Bytes) -> Self::Out;
}
