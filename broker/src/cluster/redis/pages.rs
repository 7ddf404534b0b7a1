//! A recovery's pages, read from the cluster's history (`hist:` list of the
//! channel, one slot on Redis Cluster) as the subscriber takes them: the
//! join only counts what `since` recovers (`fanout.rs`), and each page is
//! one [`reads::PAGE`] call of at most the budget the subscriber gives
//! (half its outbound mark), so no subscriber ever holds a copy of a whole
//! history.

use std::sync::Arc;

use super::fanout::parse_seq;
use super::resharding::invoke_following;
use super::{RedisBridge, reads};
use crate::hub::{Page, PageRead, Pages, Recovery};
use crate::protocol::wire;

/// One channel's history in Redis, as a recovery reads it.
struct History {
    bridge: Arc<RedisBridge>,
    channel: Arc<str>,
}

impl Pages for History {
    fn page(&self, after: u64, until: u64, budget: usize) -> PageRead {
        let (bridge, channel) = (self.bridge.clone(), self.channel.clone());
        Box::pin(async move { bridge.read_page(&channel, after, until, budget).await })
    }
}

impl RedisBridge {
    /// Where a recovery of `channel` reads its pages.
    pub(super) fn pages(&self, channel: &str) -> Arc<dyn Pages> {
        Arc::new(History {
            bridge: self.arc(),
            channel: channel.into(),
        })
    }

    /// One page; `None` when Redis is away for the channel or does not
    /// answer (the recovery then ends, and says what it lost: it never
    /// waits for Redis to come back).
    async fn read_page(
        &self,
        channel: &str,
        after: u64,
        until: u64,
        budget: usize,
    ) -> Option<Page> {
        let seq_key = self.key("seq", channel);
        let (mut conn, _in_flight) = self.command(&seq_key)?;
        let result: redis::RedisResult<(u64, Vec<Vec<u8>>)> = self
            .metrics
            .time_script(
                "page",
                invoke_following(
                    reads::PAGE
                        .key(self.key("hist", channel))
                        .arg(after)
                        .arg(until)
                        .arg(u64::try_from(budget).unwrap_or(u64::MAX)),
                    &mut conn,
                ),
            )
            .await;
        match result {
            Ok((held, messages)) => Some(Page {
                held,
                frames: messages
                    .iter()
                    .filter_map(|m| Some((parse_seq(channel, m)?, wire::text(m))))
                    .collect(),
            }),
            Err(e) => {
                self.failed_at(&seq_key, &e);
                None
            }
        }
    }

    /// Every frame of `recovery` at once, for the node's own catch-up
    /// (messages published while it had no subscription to a channel go
    /// into its hub, which keeps them as its history anyway).
    pub(super) async fn read_whole(&self, mut recovery: Recovery) -> Vec<(u64, bytes::Bytes)> {
        let mut out = Vec::new();
        loop {
            while let Some(frame) = recovery.pop() {
                out.push(frame);
            }
            let Some(read) = recovery.next_page(usize::MAX) else {
                return out;
            };
            if recovery.fill(read.await) > 0 {
                tracing::warn!(
                    "messages of a catch-up left the cluster's history before they were read"
                );
            }
        }
    }
}
