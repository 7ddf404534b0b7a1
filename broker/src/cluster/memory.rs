//! Single-node mode: the hub is the whole cluster.

use std::sync::Arc;

use super::Bridge;
use crate::hub::{Hub, Joined, Subscriber};

#[derive(Debug)]
pub struct MemoryBridge {
    hub: Arc<Hub>,
}

impl MemoryBridge {
    pub fn new(hub: Arc<Hub>) -> MemoryBridge {
        MemoryBridge { hub }
    }
}

impl Bridge for MemoryBridge {
    fn publish(&self, channel: &str, data: &str) -> u64 {
        self.hub.publish(channel, data)
    }

    fn subscribe(&self, channel: &str, sub: Subscriber, since: Option<u64>) -> Joined {
        self.hub.subscribe(channel, sub, since)
    }

    fn unsubscribe(&self, channel: &str, conn: u64) {
        self.hub.unsubscribe(channel, conn);
    }
}
