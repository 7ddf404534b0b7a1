//! Reads of the hub that do not subscribe (GraphQL's `channel` and
//! `channels`): what a channel holds, which channels are occupied.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use super::Hub;

impl Hub {
    /// The channel's last `seq` on this node and every message it holds,
    /// oldest first (reads that do not subscribe).
    pub fn held(&self, channel: &str) -> (u64, Vec<(u64, Bytes)>) {
        let Some(ch) = self.channels.get(channel).map(|c| c.clone()) else {
            return (0, Vec::new());
        };
        let mut st = ch.state.lock();
        self.budget
            .trim(&mut st.history, *self.history.read(), Instant::now());
        let held = st
            .history
            .iter()
            .map(|h| (h.seq, h.frame.clone()))
            .collect();
        (st.seq, held)
    }

    /// This node's channels starting with `prefix` that have subscribers,
    /// and how many.
    pub fn occupied(&self, prefix: &str) -> Vec<(Arc<str>, u64)> {
        self.channels
            .iter()
            .filter(|e| e.key().starts_with(prefix))
            .map(|e| {
                (
                    e.key().clone(),
                    e.value().state.lock().subscribers.len() as u64,
                )
            })
            .filter(|(_, n)| *n > 0)
            .collect()
    }
}
