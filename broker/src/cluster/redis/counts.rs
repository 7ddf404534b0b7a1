//! Subscriber counts across the cluster, for pricing a publish by its
//! fan-out (`costs.publish_per_1k_subscribers`, docs/limits.md) without a
//! Redis round trip per publish.
//!
//! Every [`REFRESH`] each node writes its channels with at least
//! [`REPORT_MIN`] local subscribers into a hash of its own
//! (`{prefix}subs:{member}`, on Redis Cluster hash-tagged by the member:
//! one key per script, so one slot; expiring like its lease, so a dead
//! node's counts vanish), and reads the other live nodes' hashes into
//! memory, one `HGETALL` each (on Redis Cluster each on its own shard). A
//! publish then reads this node's exact count plus the others' last
//! reported ones: at most one refresh old, and low by at most
//! `REPORT_MIN - 1` per other node, which is under one price step (1,000)
//! for clusters of up to ten nodes.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::{AsyncCommands, Script};

use super::conn::Conn;
use super::{COMMAND_TIMEOUT, RedisBridge};

/// A node reports a channel once it has this many local subscribers.
pub const REPORT_MIN: u64 = 100;
/// How often counts are exchanged.
pub const REFRESH: Duration = Duration::from_secs(1);

/// Replaces a node's reported counts. KEYS: the node's hash. ARGV: TTL
/// ms, then channel, count pairs (none: the hash is just deleted). One key,
/// so it runs on one Redis and on a Redis Cluster alike.
static REPORT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
redis.call('DEL', KEYS[1])
for i = 2, #ARGV, 200 do
  redis.call('HSET', KEYS[1], unpack(ARGV, i, math.min(i + 199, #ARGV)))
end
if #ARGV > 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return 1
"#,
    )
});

impl RedisBridge {
    pub(super) async fn counts_loop(self: Arc<Self>) {
        let mut tick = tokio::time::interval(REFRESH);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(mut conn) = self.conn.get().cloned() else {
                continue;
            };
            let own = self.key("subs", &self.member);
            if !self.up_at(&own) {
                // Serving alone: the last counts seen stay the best guess.
                continue;
            }
            let result = match tokio::time::timeout(
                COMMAND_TIMEOUT,
                self.exchange_counts(&mut conn),
            )
            .await
            {
                Ok(r) => r,
                Err(_) => Err((redis::ErrorKind::Io, "timed out").into()),
            };
            match result {
                Ok(()) => {}
                // On Redis Cluster another node's hash may sit on a shard
                // that is down: the others' counts stay as last seen, and
                // the commands that matter mark slots down themselves.
                Err(e) if self.sharded => {
                    tracing::debug!(error = %e, "subscriber counts not exchanged")
                }
                Err(e) => self.failed(&e),
            }
        }
    }

    async fn exchange_counts(&self, conn: &mut Conn) -> redis::RedisResult<()> {
        let mine: Vec<(String, u64)> = self
            .hub
            .subscriber_counts()
            .into_iter()
            .filter(|(_, n)| *n >= REPORT_MIN)
            .map(|(c, n)| (c.to_string(), n))
            .collect();
        // The lease's length, but never less than three exchanges, so a
        // live node's counts do not blink out between two refreshes.
        let ttl = self.lease_ms.max(3 * REFRESH.as_millis() as u64);
        let mut report = REPORT.key(self.key("subs", &self.member));
        report.arg(ttl);
        for (channel, n) in &mine {
            report.arg(channel).arg(n);
        }
        report.invoke_async::<i64>(conn).await?;

        let members: Vec<String> = conn.zrange(format!("{}nodes", self.prefix), 0, -1).await?;
        let others: Vec<&String> = members.iter().filter(|m| **m != self.member).collect();
        let mut totals: HashMap<Arc<str>, u64> = HashMap::new();
        // One read per other node, not a pipeline: on a Redis Cluster each
        // node's hash may live on another shard (a handful of nodes, once
        // a second).
        for m in others {
            let counts: HashMap<String, u64> = conn.hgetall(self.key("subs", m)).await?;
            for (channel, n) in counts {
                *totals.entry(Arc::from(channel)).or_default() += n;
            }
        }
        *self.remote_subscribers.write() = totals;
        Ok(())
    }

    /// Fan-out for pricing: this node's subscribers of the channel plus
    /// the other nodes' last reported ones.
    pub(super) fn subscribers_impl(&self, channel: &str) -> u64 {
        self.hub.subscriber_count(channel)
            + self
                .remote_subscribers
                .read()
                .get(channel)
                .copied()
                .unwrap_or(0)
    }

    /// Occupied channels by `prefix`: this node's and the other nodes'
    /// last reported counts together.
    pub(super) fn occupied_impl(&self, prefix: &str) -> Vec<(Arc<str>, u64)> {
        let mut all: HashMap<Arc<str>, u64> = self.hub.occupied(prefix).into_iter().collect();
        for (ch, n) in self.remote_subscribers.read().iter() {
            if *n > 0 && ch.starts_with(prefix) {
                *all.entry(ch.clone()).or_insert(0) += n;
            }
        }
        all.into_iter().collect()
    }
}
