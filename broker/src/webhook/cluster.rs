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
//! - Every command goes over the bridge's command connection, run on the
//!   bridge's runtime ([`Shared::run`]): the node keeps one connection,
//!   and none lives on the webhook thread.
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
use redis::{Cmd, FromRedisValue, ScriptInvocation};

use super::event::{Event, kind_of};
use super::scripts;
use crate::cluster::redis::Shared;
use crate::config::{ClusterMode, Config};

const GROUP: &str = "tidegate";
/// Redis calls slower than this fail (and are retried by their loop). The
/// bridge's connection they share answers each command within its own 1 s
/// (and retries it once), so this bounds the wait for it, the retry and
/// the hop to the bridge's runtime.
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

/// What the webhooks need to reach Redis.
#[derive(Debug, Clone)]
pub struct Params {
    /// The bridge's command connection (`Node::new` hands it over).
    link: Shared,
    key_prefix: String,
    node_id: String,
    lease_ms: u64,
    /// Redis Cluster rather than one Redis.
    sharded: bool,
}

impl Params {
    pub fn new(config: &Config, link: Shared) -> Params {
        Params {
            link,
            key_prefix: config.cluster.key_prefix.clone(),
            node_id: config.node.id.clone(),
            lease_ms: config.cluster.lease_ms,
            sharded: config.cluster.mode == ClusterMode::RedisCluster,
        }
    }
}

/// The webhooks' shared state in Redis, reached over the bridge's command
/// connection (one Redis, or a Redis Cluster connection routing each
/// command to its slot's shard). Every call runs on the bridge's runtime
/// ([`Shared::run`]), not on the webhooks' own.
pub struct Cluster {
    link: Shared,
    /// Redis Cluster: no script may read two slots (see `leave`).
    sharded: bool,
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
    pub fn new(config: &Params) -> Arc<Cluster> {
        Arc::new(Cluster {
            link: config.link.clone(),
            sharded: config.sharded,
            prefix: config.key_prefix.clone(),
            member: format!("{}:{:08x}", config.node_id, rand::random::<u32>()),
            lease: Duration::from_millis(config.lease_ms),
        })
    }

    fn key(&self, endpoint: &str, kind: &str) -> String {
        format!("{}wh:{{{endpoint}}}:{kind}", self.prefix)
    }

    /// One script call over the bridge's connection.
    async fn invoke<T>(&self, inv: ScriptInvocation<'static>) -> redis::RedisResult<T>
    where
        T: FromRedisValue + Send + 'static,
    {
        self.link
            .run(COMMAND_TIMEOUT, |mut conn| async move {
                inv.invoke_async(&mut conn).await
            })
            .await
    }

    /// One command over the bridge's connection.
    async fn query<T>(&self, cmd: Cmd) -> redis::RedisResult<T>
    where
        T: FromRedisValue + Send + 'static,
    {
        self.link
            .run(COMMAND_TIMEOUT, |mut conn| async move {
                cmd.query_async(&mut conn).await
            })
            .await
    }

    /// Appends `event`; returns how many old events the trim dropped.
    pub async fn enqueue(
        &self,
        endpoint: &str,
        event: &Event,
        max: usize,
    ) -> redis::RedisResult<u64> {
        let mut inv = scripts::ENQUEUE.key(self.key(endpoint, "q"));
        inv.arg(&*event.id)
            .arg(event.kind)
            .arg(&event.body[..])
            .arg(max)
            .arg(QUEUE_TTL_MS);
        self.invoke(inv).await
    }

    /// 2: newly owned, 1: still owned, 0: another node owns it.
    pub async fn own(&self, endpoint: &str, ttl: Duration) -> redis::RedisResult<u8> {
        let mut inv = scripts::OWN.key(self.key(endpoint, "owner"));
        inv.arg(&self.member).arg(ttl.as_millis() as u64);
        self.invoke(inv).await
    }

    pub async fn claim(&self, endpoint: &str) -> redis::RedisResult<()> {
        let mut inv = scripts::CLAIM.key(self.key(endpoint, "q"));
        inv.arg(GROUP).arg(&self.member).arg(QUEUE_TTL_MS);
        self.invoke::<i64>(inv).await.map(drop)
    }

    /// This consumer's pending entries (`start` "0") or new ones (">").
    pub async fn read(
        &self,
        endpoint: &str,
        count: usize,
        start: &str,
    ) -> redis::RedisResult<Vec<Event>> {
        let mut inv = scripts::READ.key(self.key(endpoint, "q"));
        inv.arg(GROUP)
            .arg(&self.member)
            .arg(count.max(1))
            .arg(start)
            .arg(QUEUE_TTL_MS);
        let flat: Vec<Vec<u8>> = self.invoke(inv).await?;
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
        let mut inv = scripts::ACK.key(self.key(endpoint, "q"));
        inv.arg(GROUP).arg(entry);
        self.invoke::<i64>(inv).await.map(drop)
    }

    pub async fn pause(&self, endpoint: &str, wait: Duration) -> redis::RedisResult<()> {
        let mut inv = scripts::PAUSE.key(self.key(endpoint, "pause"));
        inv.arg((wait.as_millis() as u64).max(1));
        self.invoke::<i64>(inv).await.map(drop)
    }

    /// What is left of the endpoint's shared pause.
    pub async fn pause_left(&self, endpoint: &str) -> redis::RedisResult<Duration> {
        let mut cmd = redis::cmd("PTTL");
        cmd.arg(self.key(endpoint, "pause"));
        let ms: i64 = self.query(cmd).await?;
        Ok(Duration::from_millis(ms.max(0) as u64))
    }

    pub async fn queue_len(&self, endpoint: &str) -> redis::RedisResult<usize> {
        let mut cmd = redis::cmd("XLEN");
        cmd.arg(self.key(endpoint, "q"));
        self.query(cmd).await
    }

    /// Loads every script when the webhooks start, while the cluster is
    /// presumably whole, so that none is loaded first during an outage: a
    /// script's first call answered `NOSCRIPT` sends `SCRIPT LOAD`, which
    /// the cluster client sends to every node, and one sent to a master
    /// that just died stalls the shared connection
    /// ([`crate::cluster::redis::Conn::ping_one`] says how). A load that
    /// fails is left to the script's first call, as before. A task of its
    /// own: the lease's renewals never wait for it.
    pub async fn preload(self: Arc<Self>) {
        for script in scripts::all() {
            let loaded = self
                .link
                .run(COMMAND_TIMEOUT * 5, move |mut conn| async move {
                    script.load_async(&mut conn).await
                })
                .await;
            if let Err(e) = loaded {
                tracing::debug!(target: "tidegate::webhook", error = %e, "webhook script not loaded at start");
            }
        }
    }

    /// The webhooks' own lease set, not the bridge's `nodes`: the two
    /// mean different things. The bridge renews its lease only while its
    /// subscription is up and re-synced (and, on Redis Cluster, its key's
    /// slot is up): "this node's counts in Redis are current", what the
    /// connection cap and the live-node share need. This one means "this
    /// process still holds the channels it recorded": a node whose
    /// subscription is down keeps its local subscribers, and were its
    /// occupancy discounted with the bridge's lease, another node's leave
    /// would tell `channel.vacated` for a channel still occupied, which
    /// nothing records again (only a local first subscriber joins).
    fn leases(&self) -> String {
        format!("{}wh:nodes", self.prefix)
    }

    /// Renews this node's webhook lease (occupancy discounts the channels
    /// of nodes whose lease ran out) until the runtime stops.
    pub async fn lease_loop(self: Arc<Self>) {
        let mut tick = tokio::time::interval((self.lease / 3).max(Duration::from_millis(50)));
        loop {
            tick.tick().await;
            let mut inv = scripts::LEASE.key(self.leases());
            inv.arg(&self.member).arg(self.lease.as_millis() as u64);
            if let Err(e) = self.invoke::<i64>(inv).await {
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
        let mut inv = scripts::JOIN.key(self.occupancy_key(channel));
        inv.arg(&self.member).arg(OCCUPANCY_TTL_MS).arg(tracking);
        self.invoke(inv).await
    }

    /// Gives each subject's occupancy state its full TTL again; returns how
    /// many still had one (a subject whose state is gone is not recreated:
    /// its next join does that). One command a subject, in sequence: it
    /// runs every [`OCCUPANCY_RENEW_EVERY`], off the occupancy task.
    pub async fn renew(&self, subjects: &[std::sync::Arc<str>]) -> redis::RedisResult<usize> {
        let mut renewed = 0;
        for subject in subjects {
            let mut cmd = redis::cmd("PEXPIRE");
            cmd.arg(self.occupancy_key(subject)).arg(OCCUPANCY_TTL_MS);
            let found: i64 = self.query(cmd).await?;
            renewed += found as usize;
        }
        Ok(renewed)
    }

    /// The channel's generation if no live node has subscribers left.
    pub async fn leave(&self, channel: &str) -> redis::RedisResult<u64> {
        if !self.sharded {
            let mut inv = scripts::LEAVE.key(self.occupancy_key(channel));
            inv.key(self.leases())
                .arg(&self.member)
                .arg(OCCUPANCY_TTL_MS);
            return self.invoke(inv).await;
        }
        // Two slots: the live leases first, then the channel's hash alone.
        let live: Vec<String> = self.invoke(scripts::LIVE.key(self.leases())).await?;
        let mut inv = scripts::LEAVE_LIVE.key(self.occupancy_key(channel));
        inv.arg(&self.member).arg(OCCUPANCY_TTL_MS).arg(live);
        self.invoke(inv).await
    }

    pub async fn vacate(
        &self,
        channel: &str,
        generation: u64,
        endpoint: &str,
    ) -> redis::RedisResult<bool> {
        let mut inv = scripts::VACATE.key(self.occupancy_key(channel));
        inv.arg(generation).arg(endpoint);
        let n: i64 = self.invoke(inv).await?;
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
        let mut cmd = redis::cmd("SET");
        cmd.arg(format!(
            "{}wh:limit:{{{account}}}:{reason}:{minute}",
            self.prefix
        ))
        .arg(1)
        .arg("NX")
        .arg("EX")
        .arg(120);
        let set: Option<String> = self.query(cmd).await?;
        Ok(set.is_some())
    }
}
