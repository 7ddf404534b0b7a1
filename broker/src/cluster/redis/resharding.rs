//! Resharding on Redis Cluster: a subscribed channel's slot moved to
//! another master (`CLUSTER SETSLOT … NODE`, as `redis-cli --cluster
//! reshard` ends). The old owner then drops every sharded subscription of
//! that slot and says so with an unasked `sunsubscribe` push per channel;
//! the client forgets them too, so nothing would resubscribe them. This
//! node subscribes each one again (the cluster connection follows `MOVED`
//! to the new owner and re-reads the topology) and then catches up from
//! the channel's history what was published while no subscription stood:
//! during the key migration (publishes follow `ASK` to the new owner,
//! where nobody listened yet) and until the new subscription was
//! confirmed. The catch-up runs before any later push is dispatched, so
//! messages still arrive in `seq` order.
//!
//! While the keys migrate, a script (publish, join, the account and key
//! buckets, the connection cap) may meet a redirect the client has no
//! retry left for, or `TRYAGAIN` (a multi-key script's keys split between
//! the masters): it is tried again shortly rather than taken for a shard
//! outage.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use redis::cluster_async::ClusterConnection;
use redis::{PushInfo, Value};

use super::{Conn, RedisBridge};

impl RedisBridge {
    /// The channel an `sunsubscribe` push dropped, if this node still has
    /// subscribers for it (the confirmation of its own `SUNSUBSCRIBE` names
    /// a channel without interest, and is left alone).
    pub(super) fn dropped(&self, push: &PushInfo) -> Option<Arc<str>> {
        let Some(Value::BulkString(topic)) = push.data.first() else {
            return None;
        };
        let topic = std::str::from_utf8(topic).ok()?;
        let channel = self.tagged_channel(topic)?;
        let mut interest = self.interest.lock();
        let key = interest.get_key_value(channel)?.0.clone();
        if let Some(entry) = interest.get_mut(channel) {
            entry.live = false;
        }
        Some(key)
    }

    /// Subscribes the `dropped` channels again where their slots live now,
    /// then delivers what they missed meanwhile.
    pub(super) async fn follow_moved(&self, conn: &ClusterConnection, dropped: Vec<Arc<str>>) {
        tracing::info!(
            channels = dropped.len(),
            "Redis Cluster slot moved; subscribing its channels on the new owner"
        );
        self.resubscribe(conn, dropped).await;
    }

    /// Subscribes `channels` again (after a slot moved, or its shard came
    /// back), then delivers from history what each missed since the last
    /// `seq` this node saw. Runs in the subscription task, so no later push
    /// overtakes the catch-up. A channel whose shard does not answer marks
    /// its slot down (the slot recovery takes it from there). Returns the
    /// channels subscribed.
    pub(super) async fn resubscribe(
        &self,
        conn: &ClusterConnection,
        channels: Vec<Arc<str>>,
    ) -> Vec<Arc<str>> {
        let subscribed = join_all(channels.into_iter().map(|channel| {
            let (mut conn, topic) = (conn.clone(), self.topic(&channel));
            async move {
                match conn.ssubscribe(&topic).await {
                    Ok(()) => Some(channel),
                    Err(e) => {
                        self.failed_at(&topic, &e);
                        None
                    }
                }
            }
        }))
        .await;
        let live: Vec<Arc<str>> = subscribed.into_iter().flatten().collect();
        self.confirm(&live);
        join_all(live.iter().map(|channel| self.catch_up(channel))).await;
        live
    }

    /// Delivers the channel's messages after the last one this node saw,
    /// from the cluster's history.
    async fn catch_up(&self, channel: &str) {
        let since = self.hub.seq(channel);
        if since == 0 {
            return;
        }
        match self.join_position(channel, Some(since)).await {
            Some((_, Some((true, backlog)))) => {
                for (seq, frame) in self.read_whole(backlog).await {
                    self.hub.deliver(channel, seq, frame);
                }
            }
            Some(_) => tracing::warn!(
                %channel,
                since,
                "messages published while the channel had no subscription are no longer all in history; some were not delivered"
            ),
            None => {}
        }
    }
}

/// Tries of a script whose slot is moving (see [`invoke_following`]),
/// 20 ms apart and doubling: about 0.6 s in all, room for the rest of a
/// channel's keys to follow the first across a migration.
const MOVING_TRIES: u32 = 6;

/// Whether `e` says the key's slot is moving rather than down: a redirect
/// the client had no retry left to follow, or `TRYAGAIN` (a multi-key
/// script whose keys are split between the two masters while `MIGRATE`
/// moves them in batches). Redis answers these before running anything.
fn moving(e: &redis::RedisError) -> bool {
    use redis::{ErrorKind, ServerErrorKind};
    matches!(
        e.kind(),
        ErrorKind::Server(
            ServerErrorKind::Moved | ServerErrorKind::Ask | ServerErrorKind::TryAgain
        )
    )
}

/// Runs `inv`, again after a short pause while its slot is moving, so a
/// resharding under traffic is not taken for an outage (which would serve
/// the channel alone). The script had not run, so a retry never publishes
/// twice.
pub(super) async fn invoke_following<T: redis::FromRedisValue>(
    inv: &redis::ScriptInvocation<'_>,
    conn: &mut Conn,
) -> redis::RedisResult<T> {
    let mut tries = 1;
    loop {
        match inv.invoke_async(conn).await {
            Err(e) if tries < MOVING_TRIES && moving(&e) => {
                tokio::time::sleep(Duration::from_millis(20 << (tries - 1))).await;
                tries += 1;
            }
            done => return done,
        }
    }
}
