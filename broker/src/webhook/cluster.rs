//! Cluster mode (§9): every endpoint's queue is a Redis stream with one
//! consumer group, read by one node at a time.
//!
//! - Any node appends (`ENQUEUE`, trimmed to `queue_max`, drops counted).
//! - One node owns an endpoint (`OWN`: a lock of `cluster.lease_ms` plus
//!   the endpoint's timeout). It starts an attempt only while its lock is
//!   valid for longer than the attempt can take, so when the lock expires
//!   nothing of the old owner is in flight: that is single flight across
//!   nodes. A new owner takes every pending entry over (`CLAIM`, with
//!   `XAUTOCLAIM`), so a node that died leaves its deliveries to the
//!   others, with the event ids they had (`webhook-id` is the same on every
//!   node).
//! - An entry is acknowledged and deleted only on a final outcome
//!   (delivered, rejected, 410): at least once.
//! - A receiver's `Retry-After` is a shared pause key the next owner
//!   honours too.
//!
//! Keys share the `{<endpoint>}` hash tag: `{prefix}wh:{<endpoint>}:q`
//! (stream), `:owner`, `:pause`. Every key expires: the stream a day after
//! its last append or owner's read, the lock and the pause with their own
//! time, the leases with the latest lease, occupancy a day after its last
//! change, the `limit.exceeded` marks after two minutes. Occupancy lives in
//! `{prefix}occ:{<channel>}` (see `occupancy.rs`), the webhook leases in
//! `{prefix}wh:nodes`. Every script touches one slot only, so the same
//! queues work on Redis Cluster (`cluster.mode = "redis-cluster"`): there,
//! leaving a channel reads the live leases first and hands them to the
//! occupancy script (`LEAVE_LIVE`), which cannot read the lease key itself.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::event::{Event, kind_of};
use super::scripts;
use crate::cluster::redis::{Conn, Link, RedisTarget};
use crate::config::{ClusterMode, Config};

const GROUP: &str = "tidegate";
/// Redis calls slower than this fail (and are retried by their loop).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(2);
/// Occupancy state outlives its last change (a join or leave of any node)
/// or its last renewal by this much: far longer than any vacated delay, so
/// an expiry only forgets a channel no node has touched for a day.
const OCCUPANCY_TTL_MS: u64 = 24 * 3600 * 1000;
/// How often a node renews the occupancy state of what it holds: a
/// channel (or member) occupied for longer than the TTL keeps its state,
/// so it is neither told occupied twice nor left without its vacated.
pub const OCCUPANCY_RENEW_EVERY: Duration = Duration::from_millis(OCCUPANCY_TTL_MS / 4);
/// An endpoint's stream outlives its last append or owner's read by this
/// much. The owner reads it every poll while any node serves the endpoint
/// (retries of a receiver that is down included), so only the stream of an
/// endpoint no node serves any more (removed from the config, or the whole
/// cluster down for a day) expires with its events.
const QUEUE_TTL_MS: u64 = 24 * 3600 * 1000;

/// What the webhooks need of the config to reach Redis.
#[derive(Debug, Clone)]
pub struct Params {
    /// Where Redis is (and its TLS settings); the error is the node's own
    /// (`Node::new` opens it first and stops on it).
    redis: Result<RedisTarget, String>,
    key_prefix: String,
    node_id: String,
    lease_ms: u64,
    /// Redis Cluster rather than one Redis.
    sharded: bool,
}

impl From<&Config> for Params {
    fn from(config: &Config) -> Params {
        Params {
            redis: RedisTarget::open(&config.cluster).map_err(|e| e.to_string()),
            key_prefix: config.cluster.key_prefix.clone(),
            node_id: config.node.id.clone(),
            lease_ms: config.cluster.lease_ms,
            sharded: config.cluster.mode == ClusterMode::RedisCluster,
        }
    }
}

/// The webhooks' shared state in Redis, reached over a [`Link`] (one
/// Redis, or a Redis Cluster connection routing each command to its slot's
/// shard).
pub struct Cluster {
    link: Link,
    prefix: String,
    /// This process in locks, consumer names and leases.
    pub member: String,
    pub lease: Duration,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "webhook::Cluster({})", self.member)
    }
}

impl Cluster {
    /// Must run inside the webhook runtime (the connection's tasks live
    /// there).
    pub fn new(config: &Params) -> Result<Arc<Cluster>, redis::RedisError> {
        let target = config.redis.clone().map_err(|e| {
            redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, "cluster", e))
        })?;
        let link = Link::new(&target, config.sharded, COMMAND_TIMEOUT, COMMAND_TIMEOUT)?;
        Ok(Arc::new(Cluster {
            link,
            prefix: config.key_prefix.clone(),
            member: format!("{}:{:08x}", config.node_id, rand::random::<u32>()),
            lease: Duration::from_millis(config.lease_ms),
        }))
    }

    fn key(&self, endpoint: &str, kind: &str) -> String {
        format!("{}wh:{{{endpoint}}}:{kind}", self.prefix)
    }

    /// A connection for one call; on Redis Cluster the first call
    /// connects (a failed attempt is retried by the next call).
    async fn conn(&self) -> redis::RedisResult<Conn> {
        self.link.conn().await
    }

    /// Appends `event`; returns how many old events the trim dropped.
    pub async fn enqueue(
        &self,
        endpoint: &str,
        event: &Event,
        max: usize,
    ) -> redis::RedisResult<u64> {
        scripts::ENQUEUE
            .key(self.key(endpoint, "q"))
            .arg(&*event.id)
            .arg(event.kind)
            .arg(&event.body[..])
            .arg(max)
            .arg(QUEUE_TTL_MS)
            .invoke_async(&mut self.conn().await?)
            .await
    }

    /// 2: newly owned, 1: still owned, 0: another node owns it.
    pub async fn own(&self, endpoint: &str, ttl: Duration) -> redis::RedisResult<u8> {
        scripts::OWN
            .key(self.key(endpoint, "owner"))
            .arg(&self.member)
            .arg(ttl.as_millis() as u64)
            .invoke_async(&mut self.conn().await?)
            .await
    }

    pub async fn claim(&self, endpoint: &str) -> redis::RedisResult<()> {
        scripts::CLAIM
            .key(self.key(endpoint, "q"))
            .arg(GROUP)
            .arg(&self.member)
            .arg(QUEUE_TTL_MS)
            .invoke_async::<i64>(&mut self.conn().await?)
            .await
            .map(drop)
    }

    /// This consumer's pending entries (`start` "0") or new ones (">").
    pub async fn read(
        &self,
        endpoint: &str,
        count: usize,
        start: &str,
    ) -> redis::RedisResult<Vec<Event>> {
        let flat: Vec<Vec<u8>> = scripts::READ
            .key(self.key(endpoint, "q"))
            .arg(GROUP)
            .arg(&self.member)
            .arg(count.max(1))
            .arg(start)
            .arg(QUEUE_TTL_MS)
            .invoke_async(&mut self.conn().await?)
            .await?;
        let mut out = Vec::with_capacity(flat.len() / 4);
        for e in flat.chunks_exact(4) {
            let entry: Arc<str> = String::from_utf8_lossy(&e[0]).into();
            let Some(kind) = kind_of(&String::from_utf8_lossy(&e[2])) else {
                // Not written by this version: drop it rather than loop on it.
                self.ack(endpoint, &entry).await?;
                continue;
            };
            let mut ev = Event::stored(
                String::from_utf8_lossy(&e[1]).into(),
                kind,
                Bytes::copy_from_slice(&e[3]),
                0,
            );
            ev.entry = Some(entry);
            out.push(ev);
        }
        Ok(out)
    }

    pub async fn ack(&self, endpoint: &str, entry: &str) -> redis::RedisResult<()> {
        scripts::ACK
            .key(self.key(endpoint, "q"))
            .arg(GROUP)
            .arg(entry)
            .invoke_async::<i64>(&mut self.conn().await?)
            .await
            .map(drop)
    }

    pub async fn pause(&self, endpoint: &str, wait: Duration) -> redis::RedisResult<()> {
        scripts::PAUSE
            .key(self.key(endpoint, "pause"))
            .arg((wait.as_millis() as u64).max(1))
            .invoke_async::<i64>(&mut self.conn().await?)
            .await
            .map(drop)
    }

    /// What is left of the endpoint's shared pause.
    pub async fn pause_left(&self, endpoint: &str) -> redis::RedisResult<Duration> {
        let ms: i64 = redis::cmd("PTTL")
            .arg(self.key(endpoint, "pause"))
            .query_async(&mut self.conn().await?)
            .await?;
        Ok(Duration::from_millis(ms.max(0) as u64))
    }

    pub async fn queue_len(&self, endpoint: &str) -> redis::RedisResult<usize> {
        redis::cmd("XLEN")
            .arg(self.key(endpoint, "q"))
            .query_async(&mut self.conn().await?)
            .await
    }

    fn leases(&self) -> String {
        format!("{}wh:nodes", self.prefix)
    }

    /// Renews this node's webhook lease (occupancy discounts the channels
    /// of nodes whose lease ran out) until the runtime stops.
    pub async fn lease_loop(self: Arc<Self>) {
        let mut tick = tokio::time::interval((self.lease / 3).max(Duration::from_millis(50)));
        loop {
            tick.tick().await;
            let r: redis::RedisResult<i64> = async {
                scripts::LEASE
                    .key(self.leases())
                    .arg(&self.member)
                    .arg(self.lease.as_millis() as u64)
                    .invoke_async(&mut self.conn().await?)
                    .await
            }
            .await;
            if let Err(e) = r {
                tracing::debug!(target: "tidegate::webhook", error = %e, "webhook lease renewal failed");
            }
        }
    }

    fn occupancy_key(&self, channel: &str) -> String {
        format!("{}occ:{{{channel}}}", self.prefix)
    }

    /// Returns the endpoints (of `tracking`) newly told the channel is
    /// occupied.
    pub async fn join(
        &self,
        channel: &str,
        tracking: &[String],
    ) -> redis::RedisResult<Vec<String>> {
        scripts::JOIN
            .key(self.occupancy_key(channel))
            .arg(&self.member)
            .arg(OCCUPANCY_TTL_MS)
            .arg(tracking)
            .invoke_async(&mut self.conn().await?)
            .await
    }

    /// Gives each subject's occupancy state its full TTL again; returns how
    /// many still had one (a subject whose state is gone is not recreated:
    /// its next join does that). One command a subject, in sequence: it
    /// runs every [`OCCUPANCY_RENEW_EVERY`], off the occupancy task.
    pub async fn renew(&self, subjects: &[std::sync::Arc<str>]) -> redis::RedisResult<usize> {
        let mut conn = self.conn().await?;
        let mut renewed = 0;
        for subject in subjects {
            let found: i64 = redis::cmd("PEXPIRE")
                .arg(self.occupancy_key(subject))
                .arg(OCCUPANCY_TTL_MS)
                .query_async(&mut conn)
                .await?;
            renewed += found as usize;
        }
        Ok(renewed)
    }

    /// The channel's generation if no live node has subscribers left.
    pub async fn leave(&self, channel: &str) -> redis::RedisResult<u64> {
        let mut conn = self.conn().await?;
        if let Link::Single(_) = self.link {
            return scripts::LEAVE
                .key(self.occupancy_key(channel))
                .key(self.leases())
                .arg(&self.member)
                .arg(OCCUPANCY_TTL_MS)
                .invoke_async(&mut conn)
                .await;
        }
        // Two slots: the live leases first, then the channel's hash alone.
        let live: Vec<String> = scripts::LIVE
            .key(self.leases())
            .invoke_async(&mut conn)
            .await?;
        scripts::LEAVE_LIVE
            .key(self.occupancy_key(channel))
            .arg(&self.member)
            .arg(OCCUPANCY_TTL_MS)
            .arg(live)
            .invoke_async(&mut conn)
            .await
    }

    pub async fn vacate(
        &self,
        channel: &str,
        generation: u64,
        endpoint: &str,
    ) -> redis::RedisResult<bool> {
        let n: i64 = scripts::VACATE
            .key(self.occupancy_key(channel))
            .arg(generation)
            .arg(endpoint)
            .invoke_async(&mut self.conn().await?)
            .await?;
        Ok(n == 1)
    }

    /// Whether this node is the first in the cluster to report
    /// `limit.exceeded` for (account, reason) in this minute.
    pub async fn limit_once(
        &self,
        account: &str,
        reason: &str,
        minute: u64,
    ) -> redis::RedisResult<bool> {
        let set: Option<String> = redis::cmd("SET")
            .arg(format!(
                "{}wh:limit:{{{account}}}:{reason}:{minute}",
                self.prefix
            ))
            .arg(1)
            .arg("NX")
            .arg("EX")
            .arg(120)
            .query_async(&mut self.conn().await?)
            .await?;
        Ok(set.is_some())
    }
}
