//! The cluster bridge: how a node shares fan-out (and, in cluster mode,
//! `seq`, history and account state) with other nodes. The rest of the
//! broker talks to a [`Bridge`] and does not know which one runs.

mod memory;

use std::sync::Arc;

pub use memory::MemoryBridge;

use crate::hub::{Joined, Subscriber};

/// Fan-out and channel state, local or shared.
pub trait Bridge: Send + Sync + std::fmt::Debug {
    /// Publishes `data` (raw JSON) on `channel`; returns its `seq`.
    fn publish(&self, channel: &str, data: &str) -> u64;
    /// Subscribes a socket, recovering history after `since`.
    fn subscribe(&self, channel: &str, sub: Subscriber, since: Option<u64>) -> Joined;
    fn unsubscribe(&self, channel: &str, conn: u64);
}

pub type SharedBridge = Arc<dyn Bridge>;
