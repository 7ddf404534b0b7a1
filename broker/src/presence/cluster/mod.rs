//! Presence across nodes on one Redis or a Redis Cluster (§13).
//!
//! - Members: six keys per channel, all under the channel's hash tag
//!   (`{prefix}pr:{<channel>}:m`, `:i`, `:u`, `:w`, `:o`, `:v`; see
//!   `scripts.rs`): the members sorted the way reads answer, their infos,
//!   the user counts, each member's node, each node's lease on the
//!   channel, and a version. Every key expires: each node holding members
//!   renews its lease on the channel every third of `cluster.lease_ms`,
//!   which gives every key of the channel a lease more; a node that dies
//!   stops renewing, its members leave once its lease ends (pruned by the
//!   next script that counts or lists the channel, and told to the other
//!   nodes as leaves), and a channel no live node holds is gone from
//!   Redis within a lease.
//! - A join is one script call (prune, refuse past `max_members` with
//!   `ZCARD`, add, publish the join); a leave is one (remove, publish).
//!   Reads cost what they return: counts from `ZCARD`/`HLEN`, and the
//!   first `limit` members by `ZRANGEBYLEX` and `HMGET`.
//! - Events: every node hears the joins and leaves on `{prefix}pr:events`
//!   and folds the other nodes' into its view and its diff windows
//!   (`link.rs`). Each is sealed with `cluster.secret` by the control
//!   topic's own signer ([`ControlSigner`]: HMAC, clock window, replay
//!   memory), so a client of the same Redis cannot forge a join or leave.
//! - Every third of the lease a node renews its leases and brings each
//!   channel it sends diffs of in line with Redis, reading the members'
//!   keys only when the channel's version moved (`renew.rs`, `sync.rs`).
//! - While Redis is away joins are checked against this node's view and
//!   reads answer with this node's own members, `partial: true`.
//! - The scripts go over the bridge's command connection
//!   ([`crate::cluster::redis::Shared`]), so they wait for the same
//!   reconnection as the bridge's; only the events subscription is a
//!   connection of presence's own (`link.rs`).

mod link;
mod renew;
mod reply;
mod scripts;
mod sync;
mod wire;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use super::{Full, Presence, Read};
use crate::cluster::redis::{ControlSigner, RedisTarget, Shared};
use crate::config::ClusterSecrets;
use crate::metrics::Metrics;
use crate::protocol::presence::{Counts, Member};
use reply::Reply;
use scripts::Scripts;
use wire::{Event, Wire, sort_key};

const COMMAND_TIMEOUT: Duration = Duration::from_secs(1);

/// Where presence meets Redis: what `RedisPresence::new` needs.
pub struct RedisSettings<'a> {
    /// Where Redis is, for the events subscription (`link.rs`).
    pub target: RedisTarget,
    /// The bridge's command connection, which presence's scripts share.
    pub link: Shared,
    /// Redis Cluster rather than one Redis.
    pub sharded: bool,
    pub prefix: &'a str,
    pub node: &'a str,
    pub lease_ms: u64,
    /// `cluster.secret` (and `accept_secrets`): the events are sealed
    /// and checked as the control topic's messages are.
    pub secrets: ClusterSecrets,
    pub metrics: Arc<Metrics>,
}

pub struct RedisPresence {
    presence: OnceLock<Weak<Presence>>,
    target: RedisTarget,
    sharded: bool,
    /// The bridge's command connection (made when the bridge starts).
    link: Shared,
    prefix: String,
    /// `{prefix}pr:events`.
    topic: String,
    /// This process in the member hashes: the node id and a per-start
    /// suffix, so a restarted node's old members expire by themselves.
    node: String,
    lease_ms: u64,
    up: AtomicBool,
    /// A change may not have reached Redis (a failed or skipped call, or
    /// one that crossed a registration): the next renewal writes this
    /// node's members again in full, so a leave lost in an outage leaves
    /// no ghost behind.
    rewrite: AtomicBool,
    /// Raised when a renewal round starts writing members and when it
    /// ends (odd while one runs): a join or leave that saw it move may
    /// have crossed the registration, so it asks for a rewrite.
    registering: AtomicU64,
    scripts: Scripts,
    /// Seals this node's events and opens the others' (the control
    /// topic's signer, on the events topic).
    signer: ControlSigner,
    metrics: Arc<Metrics>,
}

impl RedisPresence {
    pub fn new(s: RedisSettings<'_>) -> Arc<Self> {
        let topic = format!("{}pr:events", s.prefix);
        Arc::new(RedisPresence {
            presence: OnceLock::new(),
            target: s.target,
            sharded: s.sharded,
            link: s.link,
            prefix: s.prefix.to_owned(),
            topic: topic.clone(),
            node: format!("{}:{:08x}", s.node, rand::random::<u32>()),
            lease_ms: s.lease_ms,
            up: AtomicBool::new(false),
            rewrite: AtomicBool::new(false),
            registering: AtomicU64::new(0),
            scripts: Scripts::new(),
            signer: ControlSigner::new(topic, s.secrets),
            metrics: s.metrics,
        })
    }

    pub(super) fn attach(&self, presence: Weak<Presence>) {
        let _ = self.presence.set(presence);
    }

    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Acquire)
    }

    fn set_up(&self, up: bool) {
        if !up {
            self.rewrite.store(true, Ordering::Release);
        }
        if self.up.swap(up, Ordering::AcqRel) != up {
            tracing::info!(up, "presence: Redis reachability changed");
        }
    }

    /// The six keys of `channel`, in the scripts' KEYS order.
    fn keys(&self, channel: &str) -> [String; 6] {
        ["m", "i", "u", "w", "o", "v"].map(|k| format!("{}pr:{{{channel}}}:{k}", self.prefix))
    }

    fn topic(&self) -> &str {
        &self.topic
    }

    /// The event, sealed (empty without a signing secret, which cluster
    /// mode requires: the scripts then publish nothing).
    fn event(&self, channel: &str, joins: &[&Member], leaves: &[&Member]) -> String {
        let body = serde_json::to_string(&Event {
            n: self.node.clone(),
            c: channel.to_owned(),
            j: joins.iter().map(|m| Wire::from(*m)).collect(),
            l: leaves.iter().map(|m| Wire::from(*m)).collect(),
        })
        .unwrap_or_default();
        self.signer
            .seal(&body, crate::clock::unix_ms())
            .unwrap_or_default()
    }

    /// The bridge's connection, waiting for it as long as a command may
    /// take (before the bridge started).
    pub(super) async fn conn(&self) -> Option<crate::cluster::redis::Conn> {
        self.link.conn(COMMAND_TIMEOUT).await.ok()
    }

    /// Where a registration round stands (see `registering`).
    pub(super) fn registrations(&self) -> u64 {
        self.registering.load(Ordering::Acquire)
    }

    /// A change that started at registration count `before` is over: if
    /// a registration ran meanwhile, the next renewal rewrites.
    pub(super) fn settle(&self, before: u64) {
        if before % 2 == 1 || self.registrations() != before {
            self.rewrite.store(true, Ordering::Release);
        }
    }

    /// Adds the member in Redis: `None` if Redis did not answer (then the
    /// node checks its own view). `others`: this node holds other members
    /// of the channel (so its lease there should be in force).
    pub(super) async fn join(
        self: &Arc<Self>,
        channel: &str,
        m: &Member,
        (max, by_user): (u32, bool),
        others: bool,
    ) -> Option<Result<(), Full>> {
        let mut conn = self.conn().await?;
        let stored = serde_json::to_string(&Wire::from(m)).unwrap_or_default();
        let mut inv = self.scripts.join.prepare_invoke();
        for k in self.keys(channel) {
            inv.key(k);
        }
        inv.arg(&self.node)
            .arg(sort_key(&m.user, &m.conn_id))
            .arg(stored)
            .arg(max)
            .arg(self.lease_ms)
            .arg(self.topic())
            .arg(self.event(channel, &[m], &[]))
            .arg(if others { "1" } else { "0" })
            .arg(if by_user { "1" } else { "0" });
        let call = inv.invoke_async::<redis::Value>(&mut conn);
        let Ok(Ok(value)) = tokio::time::timeout(COMMAND_TIMEOUT, call).await else {
            self.set_up(false);
            return None;
        };
        let mut r = Reply::new(value);
        let (status, lapsed) = (r.int(), r.int());
        self.gone(channel, r.members());
        if lapsed == 1 {
            self.rewrite.store(true, Ordering::Release);
        }
        Some(if status == 1 {
            Ok(())
        } else {
            Err(Full { max })
        })
    }

    /// Removes the member in Redis (in the background; while Redis is
    /// away the lease takes it, and the next renewal rewrites).
    pub(super) fn leave(self: &Arc<Self>, channel: &str, m: &Member) {
        if !self.is_up() {
            self.rewrite.store(true, Ordering::Release);
            return;
        }
        let this = self.clone();
        let keys = self.keys(channel);
        let args = (
            sort_key(&m.user, &m.conn_id),
            self.topic().to_owned(),
            self.event(channel, &[], &[m]),
        );
        let before = self.registrations();
        tokio::spawn(async move {
            let mut inv = this.scripts.leave.prepare_invoke();
            for k in keys {
                inv.key(k);
            }
            inv.arg(&this.node)
                .arg(args.0)
                .arg(this.lease_ms)
                .arg(args.1)
                .arg(args.2);
            let call = async {
                let mut conn = this.conn().await.ok_or_else(|| {
                    redis::RedisError::from((redis::ErrorKind::Io, "Redis not reachable"))
                })?;
                inv.invoke_async::<i64>(&mut conn).await
            };
            let done = tokio::time::timeout(COMMAND_TIMEOUT, call).await;
            if !matches!(done, Ok(Ok(_))) {
                this.rewrite.store(true, Ordering::Release);
            }
            this.settle(before);
        });
    }

    /// The counts and the first `limit` members of `channel` (0: counts
    /// only), or `None` when Redis is away.
    pub(super) async fn read(self: &Arc<Self>, channel: &str, limit: usize) -> Option<Read> {
        if !self.is_up() {
            return None;
        }
        let mut conn = self.conn().await?;
        let mut inv = self.scripts.read.prepare_invoke();
        for k in self.keys(channel) {
            inv.key(k);
        }
        inv.arg(limit).arg(self.lease_ms);
        let call = inv.invoke_async::<redis::Value>(&mut conn);
        let Ok(Ok(value)) = tokio::time::timeout(COMMAND_TIMEOUT, call).await else {
            self.set_up(false);
            return None;
        };
        let mut r = Reply::new(value);
        let counts = Counts {
            connections: r.int().max(0) as u64,
            users: r.int().max(0) as u64,
        };
        self.gone(channel, r.members());
        Some(Read {
            members: r.rest_members(),
            counts,
            partial: false,
        })
    }

    /// Members Redis let go (a dead node's, pruned, or this node's own
    /// that left while Redis was away): this node's view and windows
    /// drop them, and the other nodes are told.
    fn gone(self: &Arc<Self>, channel: &str, leaves: Vec<Member>) {
        if leaves.is_empty() {
            return;
        }
        let refs: Vec<&Member> = leaves.iter().collect();
        let event = self.event(channel, &[], &refs);
        if !event.is_empty() {
            let this = self.clone();
            tokio::spawn(async move {
                if let Some(mut conn) = this.conn().await {
                    let publish = redis::cmd("PUBLISH")
                        .arg(this.topic())
                        .arg(event)
                        .to_owned();
                    let call = publish.query_async::<i64>(&mut conn);
                    let _ = tokio::time::timeout(COMMAND_TIMEOUT, call).await;
                }
            });
        }
        if let Some(p) = self.presence.get().and_then(Weak::upgrade) {
            p.remote(channel, Vec::new(), leaves);
        }
    }

    /// Starts the events subscription and the renewals (after the bridge
    /// started: the commands go over its connection).
    pub(super) fn start(self: Arc<Self>) {
        if self.sharded {
            actix_rt::spawn(link::events_cluster(self.clone()));
        } else {
            actix_rt::spawn(link::events_single(self.clone()));
        }
        actix_rt::spawn(self.clone().preload());
        actix_rt::spawn(self.renew_loop());
    }

    /// Loads every script at start, while the cluster is presumably whole,
    /// so that none is loaded first during an outage (`register`, say,
    /// runs first when Redis lost a node's members): a script's first
    /// call answered `NOSCRIPT` sends `SCRIPT LOAD`, which the cluster
    /// client sends to every node, and one sent to a master that just
    /// died stalls the connection the bridge's publishes share
    /// ([`crate::cluster::redis::Conn::ping_one`] says how). A load that
    /// fails is left to the script's first call, as before.
    async fn preload(self: Arc<Self>) {
        let Ok(mut conn) = self.link.conn(COMMAND_TIMEOUT * 30).await else {
            return;
        };
        for script in self.scripts.all() {
            let loaded = tokio::time::timeout(COMMAND_TIMEOUT, script.load_async(&mut conn)).await;
            if !matches!(loaded, Ok(Ok(_))) {
                tracing::debug!("presence: a script was not loaded at start");
            }
        }
    }

    /// An event from the topic: applied when a node of this cluster
    /// sealed it; anything else is counted (with the control topic's
    /// forgeries), logged at most every ten seconds, and ignored.
    pub(super) fn on_event(&self, payload: &[u8]) {
        let now = crate::clock::unix_ms();
        let opened = std::str::from_utf8(payload)
            .map_err(|_| crate::cluster::redis::Forged::Unsigned)
            .and_then(|text| self.signer.open(text, now));
        let body = match opened {
            Ok(body) => body,
            Err(why) => {
                self.metrics.control_rejected(why.as_str());
                if let Some(ignored) = self.signer.log_due(now) {
                    tracing::warn!(
                        reason = why.as_str(),
                        ignored,
                        "presence event from Redis not sealed by a node of this cluster; ignored (check cluster.secret, the nodes' clocks, and who may PUBLISH on this Redis)"
                    );
                }
                return;
            }
        };
        let Ok(e) = serde_json::from_str::<Event>(body) else {
            return;
        };
        if e.n == self.node {
            return;
        }
        let Some(p) = self.presence.get().and_then(Weak::upgrade) else {
            return;
        };
        let joins = e.j.into_iter().map(Member::from).collect();
        let leaves = e.l.into_iter().map(Member::from).collect();
        p.remote(&e.c, joins, leaves);
    }
}
