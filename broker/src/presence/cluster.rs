//! Presence across nodes on one Redis (§13).
//!
//! - Members: each node holds its members of a channel in its own hash
//!   `{prefix}pr:{<channel>}:<node>` (connection id → `[user, info]`),
//!   which expires `cluster.lease_ms` after the node last renewed it; the
//!   set `{prefix}pr:{<channel>}` names the nodes that have some. A node
//!   that dies stops renewing, so its members are gone within the lease.
//! - A join is one script call (count the live members, refuse past
//!   `max_members`, add, publish the join); a leave is one (remove,
//!   publish). Every node hears the events on `{prefix}pr:events` and
//!   folds the other nodes' into its view and its diff windows.
//! - Every third of the lease a node renews its hashes (registering its
//!   members again if Redis lost them) and re-reads each channel it has
//!   members of: members that vanished (a dead node's) become leaves,
//!   ones it missed become joins.
//! - While Redis is away joins are checked against this node's view and
//!   reads answer with this node's own members, `partial: true`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use serde::{Deserialize, Serialize};

use super::{Full, Presence, Roster};
use crate::cluster::redis::RedisTarget;
use crate::protocol::presence::Member;

const COMMAND_TIMEOUT: Duration = Duration::from_secs(1);

/// Adds a member unless the channel is full: KEYS[1] the node set,
/// KEYS[2] this node's hash; ARGV: node, connection id, `[user, info]`,
/// max_members, lease ms, events topic, event, hash key prefix.
const JOIN: &str = r"
local total = 0
for _, n in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local c = redis.call('HLEN', ARGV[8] .. n)
  if c == 0 then redis.call('SREM', KEYS[1], n) else total = total + c end
end
if redis.call('HEXISTS', KEYS[2], ARGV[2]) == 0 and total >= tonumber(ARGV[4]) then
  return 0
end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[5])
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('PUBLISH', ARGV[6], ARGV[7])
return 1
";

/// Removes a member: KEYS[1] this node's hash; ARGV: connection id,
/// events topic, event.
const LEAVE: &str = r"
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('PUBLISH', ARGV[2], ARGV[3])
return 1
";

/// Every live member: KEYS[1] the node set; ARGV[1] the hash key prefix.
/// Answers `[conn, value, ...]` and forgets nodes whose hash expired.
const READ: &str = r"
local out = {}
for _, n in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local all = redis.call('HGETALL', ARGV[1] .. n)
  if #all == 0 then redis.call('SREM', KEYS[1], n) end
  for i = 1, #all do out[#out + 1] = all[i] end
end
return out
";

/// What one node tells the others (on the events topic).
#[derive(Serialize, Deserialize)]
struct Event {
    /// The sending node (its own events are already applied).
    n: String,
    c: String,
    #[serde(default)]
    j: Vec<Wire>,
    #[serde(default)]
    l: Vec<Wire>,
}

/// A member as Redis and the events hold it: `[user, conn, info]`.
#[derive(Serialize, Deserialize)]
struct Wire(String, String, Option<String>);

impl From<&Member> for Wire {
    fn from(m: &Member) -> Wire {
        Wire(
            m.user.to_string(),
            m.conn_id.to_string(),
            m.info.as_deref().map(str::to_owned),
        )
    }
}

impl From<Wire> for Member {
    fn from(w: Wire) -> Member {
        Member {
            user: w.0.into(),
            conn_id: w.1.into(),
            info: w.2.map(Into::into),
        }
    }
}

pub struct RedisPresence {
    presence: OnceLock<Weak<Presence>>,
    target: RedisTarget,
    conn: OnceLock<ConnectionManager>,
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
    pub fn new(target: RedisTarget, prefix: &str, node: &str, lease_ms: u64) -> Arc<Self> {
        Arc::new(RedisPresence {
            presence: OnceLock::new(),
            target,
            conn: OnceLock::new(),
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

    fn conn(&self) -> Option<ConnectionManager> {
        self.conn.get().cloned()
    }

    /// Adds the member in Redis: `None` if Redis did not answer (then the
    /// node checks its own view).
    pub(super) async fn join(
        &self,
        channel: &str,
        m: &Member,
        max: u32,
    ) -> Option<Result<(), Full>> {
        let mut conn = self.conn()?;
        let value = serde_json::to_string(&Wire::from(m)).unwrap_or_default();
        let mut inv = self.join.prepare_invoke();
        inv.key(self.set_key(channel))
            .key(format!("{}{}", self.hash_prefix(channel), self.node))
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
        let this = self.clone();
        let Some(mut conn) = self.conn().filter(|_| self.is_up()) else {
            self.rewrite.store(true, Ordering::Release);
            return;
        };
        let script = self.leave.clone();
        let key = format!("{}{}", self.hash_prefix(channel), self.node);
        let args = (
            m.conn_id.to_string(),
            self.topic(),
            self.event(channel, &[], &[m]),
        );
        actix_rt::spawn(async move {
            let mut inv = script.prepare_invoke();
            inv.key(key).arg(args.0).arg(args.1).arg(args.2);
            let done =
                tokio::time::timeout(COMMAND_TIMEOUT, inv.invoke_async::<i64>(&mut conn)).await;
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
        let mut conn = self.conn()?;
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
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(COMMAND_TIMEOUT))
            .set_response_timeout(Some(COMMAND_TIMEOUT))
            .set_number_of_retries(1)
            .set_max_delay(COMMAND_TIMEOUT);
        match ConnectionManager::new_lazy_with_config(self.target.client.clone(), config) {
            Ok(c) => {
                let _ = self.conn.set(c);
            }
            Err(e) => tracing::error!(error = %e, "presence: cannot set up the Redis connection"),
        }
        actix_rt::spawn(self.clone().events());
        actix_rt::spawn(self.renew_loop());
    }

    /// Follows the other nodes' joins and leaves.
    async fn events(self: Arc<Self>) {
        loop {
            let connected =
                tokio::time::timeout(COMMAND_TIMEOUT * 2, self.target.client.get_async_pubsub())
                    .await;
            if let Ok(Ok(mut pubsub)) = connected
                && pubsub.subscribe(self.topic()).await.is_ok()
            {
                let mut stream = pubsub.on_message();
                while let Some(msg) = stream.next().await {
                    self.on_event(msg.get_payload_bytes());
                }
            }
            self.set_up(false);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn on_event(&self, payload: &[u8]) {
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

    /// Every third of the lease: renew this node's hashes and re-read
    /// each channel it has members of.
    async fn renew_loop(self: Arc<Self>) {
        let every = Duration::from_millis((self.lease_ms / 3).max(50));
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(p) = self.presence.get().and_then(Weak::upgrade) else {
                return;
            };
            let ok = tokio::time::timeout(COMMAND_TIMEOUT * 5, self.renew(&p)).await;
            self.set_up(matches!(ok, Ok(Ok(()))));
            if self.is_up() {
                for channel in p.channel_names() {
                    self.reconcile(&p, &channel).await;
                }
            }
        }
    }

    /// Renews (or, if Redis lost it, registers again) this node's hash of
    /// every channel it has members of.
    async fn renew(&self, p: &Presence) -> redis::RedisResult<()> {
        let Some(mut conn) = self.conn() else {
            return Err((redis::ErrorKind::Client, "not started").into());
        };
        let channels = p.channel_names();
        if channels.is_empty() {
            let _: () = redis::cmd("PING").query_async(&mut conn).await?;
            self.rewrite.store(false, Ordering::Release);
            return Ok(());
        }
        let rewrite = self.rewrite.swap(false, Ordering::AcqRel);
        let result = self.renew_channels(p, &mut conn, &channels, rewrite).await;
        if result.is_err() {
            self.rewrite.store(true, Ordering::Release);
        }
        result
    }

    /// Renews `channels`' hashes of this node; with `rewrite` (or where
    /// Redis lost one) writes its members in full.
    async fn renew_channels(
        &self,
        p: &Presence,
        conn: &mut ConnectionManager,
        channels: &[Arc<str>],
        rewrite: bool,
    ) -> redis::RedisResult<()> {
        for chunk in channels.chunks(256) {
            let mut pipe = redis::pipe();
            for c in chunk {
                pipe.cmd("PEXPIRE")
                    .arg(format!("{}{}", self.hash_prefix(c), self.node))
                    .arg(self.lease_ms);
            }
            let kept: Vec<i64> = pipe.query_async(conn).await?;
            let mut again = redis::pipe();
            let mut any = false;
            for (c, kept) in chunk.iter().zip(kept) {
                let Some(state) = p.state(c) else { continue };
                let local: Vec<Member> = state.lock().local.values().cloned().collect();
                if (kept == 1 && !rewrite) || local.is_empty() {
                    continue;
                }
                any = true;
                let hash = format!("{}{}", self.hash_prefix(c), self.node);
                again.del(&hash).ignore();
                for m in &local {
                    let value = serde_json::to_string(&Wire::from(m)).unwrap_or_default();
                    again.hset(&hash, &*m.conn_id, value).ignore();
                }
                again.pexpire(&hash, self.lease_ms as i64).ignore();
                again.sadd(self.set_key(c), &self.node).ignore();
            }
            if any {
                again.atomic().query_async::<()>(conn).await?;
            }
        }
        Ok(())
    }

    /// Brings this node's view of `channel` in line with Redis: members
    /// that vanished there (a dead node's) leave, missed ones join.
    async fn reconcile(&self, p: &Arc<Presence>, channel: &Arc<str>) {
        let Some(truth) = self.read(channel).await else {
            return;
        };
        let Some(state) = p.state(channel) else {
            return;
        };
        let (joins, leaves) = {
            let st = state.lock();
            let joins: Vec<Member> = truth
                .iter()
                .filter(|m| {
                    !st.roster
                        .members
                        .get(&m.user)
                        .is_some_and(|c| c.contains_key(&m.conn_id))
                })
                .collect();
            let leaves: Vec<Member> = st
                .roster
                .iter()
                .filter(|m| {
                    !st.local.contains_key(&m.conn_id)
                        && !truth
                            .members
                            .get(&m.user)
                            .is_some_and(|c| c.contains_key(&m.conn_id))
                })
                .collect();
            (joins, leaves)
        };
        if !joins.is_empty() || !leaves.is_empty() {
            p.remote(channel, joins, leaves);
        }
    }
}
