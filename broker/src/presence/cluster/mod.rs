//! Presence across nodes on one Redis or a Redis Cluster (§13).
//!
//! - Members: each node holds its members of a channel in its own hash
//!   `{prefix}pr:{<channel>}:<node>` (connection id → `[user, conn,
//!   info]`), which expires `cluster.lease_ms` after the node last renewed
//!   it; the set `{prefix}pr:{<channel>}` names the nodes that have some.
//!   Both carry the channel as hash tag, so on Redis Cluster a channel's
//!   keys sit in one slot and every script runs on one shard. A node that
//!   dies stops renewing, so its members are gone within the lease.
//! - A join is one script call (count the live members, refuse past
//!   `max_members`, add, publish the join); a leave is one (remove,
//!   publish). Every node hears the events on `{prefix}pr:events` and
//!   folds the other nodes' into its view and its diff windows
//!   (`link.rs`).
//! - Every third of the lease a node renews its hashes and re-reads each
//!   channel it has members or observers of (`renew.rs`).
//! - While Redis is away joins are checked against this node's view and
//!   reads answer with this node's own members, `partial: true`.

mod link;
mod renew;
mod wire;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use super::{Full, Presence, Roster};
use crate::cluster::redis::{Link, RedisTarget};
use crate::protocol::presence::Member;
use wire::{Event, JOIN, LEAVE, READ, Wire};

const COMMAND_TIMEOUT: Duration = Duration::from_secs(1);

pub struct RedisPresence {
    presence: OnceLock<Weak<Presence>>,
    target: RedisTarget,
    /// Redis Cluster rather than one Redis.
    sharded: bool,
    /// The command connection, made at `start` (unset: it could not be
    /// set up, logged).
    link: OnceLock<Link>,
    prefix: String,
    /// This process in the member hashes: the node id and a per-start
    /// suffix, so a restarted node's old members expire by themselves.
    node: String,
    lease_ms: u64,
    up: AtomicBool,
    /// A change may not have reached Redis (a failed or skipped call):
    /// the next renewal writes this node's members again in full, so a
    /// leave lost in an outage leaves no ghost behind.
    rewrite: AtomicBool,
    join: redis::Script,
    leave: redis::Script,
    read: redis::Script,
}

impl RedisPresence {
    pub fn new(
        target: RedisTarget,
        sharded: bool,
        prefix: &str,
        node: &str,
        lease_ms: u64,
    ) -> Arc<Self> {
        Arc::new(RedisPresence {
            presence: OnceLock::new(),
            target,
            sharded,
            link: OnceLock::new(),
            prefix: prefix.to_owned(),
            node: format!("{node}:{:08x}", rand::random::<u32>()),
            lease_ms,
            up: AtomicBool::new(false),
            rewrite: AtomicBool::new(false),
            join: redis::Script::new(JOIN),
            leave: redis::Script::new(LEAVE),
            read: redis::Script::new(READ),
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

    fn set_key(&self, channel: &str) -> String {
        format!("{}pr:{{{channel}}}", self.prefix)
    }

    /// The prefix of a channel's node hashes (the node id follows).
    fn hash_prefix(&self, channel: &str) -> String {
        format!("{}pr:{{{channel}}}:", self.prefix)
    }

    fn topic(&self) -> String {
        format!("{}pr:events", self.prefix)
    }

    fn event(&self, channel: &str, joins: &[&Member], leaves: &[&Member]) -> String {
        serde_json::to_string(&Event {
            n: self.node.clone(),
            c: channel.to_owned(),
            j: joins.iter().map(|m| Wire::from(*m)).collect(),
            l: leaves.iter().map(|m| Wire::from(*m)).collect(),
        })
        .unwrap_or_default()
    }

    pub(super) async fn conn(&self) -> Option<crate::cluster::redis::Conn> {
        self.link.get()?.conn().await.ok()
    }

    /// This node's hash of `channel`'s members.
    fn own_hash(&self, channel: &str) -> String {
        format!("{}{}", self.hash_prefix(channel), self.node)
    }

    /// Adds the member in Redis: `None` if Redis did not answer (then the
    /// node checks its own view).
    pub(super) async fn join(
        &self,
        channel: &str,
        m: &Member,
        max: u32,
    ) -> Option<Result<(), Full>> {
        let mut conn = self.conn().await?;
        let value = serde_json::to_string(&Wire::from(m)).unwrap_or_default();
        let mut inv = self.join.prepare_invoke();
        inv.key(self.set_key(channel))
            .key(self.own_hash(channel))
            .arg(&self.node)
            .arg(&*m.conn_id)
            .arg(value)
            .arg(max)
            .arg(self.lease_ms)
            .arg(self.topic())
            .arg(self.event(channel, &[m], &[]))
            .arg(self.hash_prefix(channel));
        let call = inv.invoke_async::<i64>(&mut conn);
        match tokio::time::timeout(COMMAND_TIMEOUT, call).await {
            Ok(Ok(1)) => Some(Ok(())),
            Ok(Ok(_)) => Some(Err(Full { max })),
            _ => {
                self.set_up(false);
                None
            }
        }
    }

    /// Removes the member in Redis (in the background; while Redis is
    /// away the lease takes it).
    pub(super) fn leave(self: &Arc<Self>, channel: &str, m: &Member) {
        if !self.is_up() {
            self.rewrite.store(true, Ordering::Release);
            return;
        }
        let this = self.clone();
        let script = self.leave.clone();
        let key = self.own_hash(channel);
        let args = (
            m.conn_id.to_string(),
            self.topic(),
            self.event(channel, &[], &[m]),
        );
        actix_rt::spawn(async move {
            let mut inv = script.prepare_invoke();
            inv.key(key).arg(args.0).arg(args.1).arg(args.2);
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
        });
    }

    /// Every live member of `channel`, or `None` when Redis is away.
    pub(super) async fn read(&self, channel: &str) -> Option<Roster> {
        if !self.is_up() {
            return None;
        }
        let mut conn = self.conn().await?;
        let mut inv = self.read.prepare_invoke();
        inv.key(self.set_key(channel))
            .arg(self.hash_prefix(channel));
        let call = inv.invoke_async::<Vec<String>>(&mut conn);
        let flat = match tokio::time::timeout(COMMAND_TIMEOUT, call).await {
            Ok(Ok(v)) => v,
            _ => {
                self.set_up(false);
                return None;
            }
        };
        let mut roster = Roster::default();
        for pair in flat.chunks_exact(2) {
            if let Ok(w) = serde_json::from_str::<Wire>(&pair[1]) {
                roster.insert(&Member::from(w));
            }
        }
        Some(roster)
    }

    pub(super) fn start(self: Arc<Self>) {
        match Link::new(
            &self.target,
            self.sharded,
            COMMAND_TIMEOUT,
            COMMAND_TIMEOUT * 2,
        ) {
            Ok(l) => {
                let _ = self.link.set(l);
            }
            Err(e) => tracing::error!(error = %e, "presence: cannot set up the Redis connection"),
        }
        if self.sharded {
            actix_rt::spawn(link::events_cluster(self.clone()));
        } else {
            actix_rt::spawn(link::events_single(self.clone()));
        }
        actix_rt::spawn(self.renew_loop());
    }

    pub(super) fn on_event(&self, payload: &[u8]) {
        let Ok(e) = serde_json::from_slice::<Event>(payload) else {
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
