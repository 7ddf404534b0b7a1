//! What the operator routes (§10) keep in Redis. Every key shares the hash
//! tag `{ops}`, so each script touches one slot and the same code runs on
//! one Redis and on Redis Cluster; nothing is found by `SCAN`:
//!
//! - `{prefix}admin:{ops}:bans`: the ban list, a sorted set (member the
//!   target's key, `account:acme` / `ip:203.0.113.7`; score its expiry in
//!   Unix ms), so a node that starts later or comes back from an outage
//!   reads the list in force. Expired bans are dropped whenever the list is
//!   read or written, and the list expires a minute after its latest ban.
//! - `{prefix}admin:{ops}:nodes` (hash: member → overview snapshot JSON)
//!   and `{prefix}admin:{ops}:alive` (sorted set: member → expiry, Redis
//!   ms): a node that stops renewing its snapshot drops out of the overview
//!   after the snapshot's ttl.
//! - Operator actions go to every node over the control channel (classic
//!   pub/sub, which Redis Cluster forwards to every shard).

use std::sync::LazyLock;

use redis::{AsyncCommands, Script};

use super::{COMMAND_TIMEOUT, Conn, RedisBridge};

/// The prefix of operator messages on the control channel.
pub const ADMIN_MESSAGE: &str = "admin:";

/// The Lua that gives the ban list (KEYS[1]) the TTL of its latest ban,
/// counted from `now` (Unix ms, the node's clock, as the bans' expiries
/// are) plus [`BAN_SLACK_MS`] for the nodes' clocks to disagree: the list
/// goes when its last ban would have.
const EXPIRE_WITH_LATEST: &str = r#"
local latest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2]
if latest then
  local ttl = math.max(1, tonumber(latest) - tonumber(now)) + {slack}
  redis.call('PEXPIRE', KEYS[1], string.format('%d', ttl))
end
"#;

/// How much longer than its latest ban the ban list lives.
const BAN_SLACK_MS: u64 = 60_000;

fn expire_with_latest() -> String {
    EXPIRE_WITH_LATEST.replace("{slack}", &BAN_SLACK_MS.to_string())
}

/// Stores a ban, first dropping the expired ones; the list lives as long
/// as its latest ban. KEYS: bans. ARGV: target key, expiry (Unix ms), now
/// (Unix ms).
static SET_BAN: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r#"
local now = ARGV[3]
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if tonumber(ARGV[2]) > tonumber(now) then
  redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
end
{}
return 1
"#,
        expire_with_latest()
    ))
});

/// The bans in force, the expired ones dropped (and the list's TTL set, for
/// a list an older version left without one). KEYS: bans. ARGV: now (Unix
/// ms). Returns a flat list: target key, expiry, ...
static BANS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r#"
local now = ARGV[1]
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
{}
local all = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for i = 2, #all, 2 do all[i] = string.format('%d', tonumber(all[i])) end
return all
"#,
        expire_with_latest()
    ))
});

/// The Lua that drops the snapshots whose node stopped renewing them (and
/// sets `now`, Redis ms). KEYS: snapshots, their expiries.
const DROP_EXPIRED: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local past = string.format('%d', now)
for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', past)) do
  redis.call('HDEL', KEYS[1], m)
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', past)
"#;

/// Publishes a node's snapshot for ARGV[3] ms; the keys expire with the
/// last node's. KEYS: snapshots, their expiries. ARGV: member, JSON, ttl.
static PUT_STATS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r#"{DROP_EXPIRED}
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], string.format('%d', now + tonumber(ARGV[3])), ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return 1
"#
    ))
});

/// Every live node's snapshot. KEYS: snapshots, their expiries.
static STATS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r#"{DROP_EXPIRED}
return redis.call('HVALS', KEYS[1])
"#
    ))
});

/// A handle for the admin routes' Redis work; taken only while the bridge
/// reaches the keys it needs.
#[derive(Clone)]
pub struct AdminStore {
    conn: Conn,
    prefix: String,
    control: String,
    signer: std::sync::Arc<super::ControlSigner>,
}

impl std::fmt::Debug for AdminStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AdminStore({})", self.prefix)
    }
}

fn timed_out() -> redis::RedisError {
    (redis::ErrorKind::Io, "Redis did not answer in time").into()
}

/// The key of one of the admin's Redis structures.
fn ops_key(prefix: &str, what: &str) -> String {
    format!("{prefix}admin:{{ops}}:{what}")
}

impl AdminStore {
    async fn timed<T>(
        &self,
        fut: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> redis::RedisResult<T> {
        tokio::time::timeout(COMMAND_TIMEOUT * 2, fut)
            .await
            .unwrap_or_else(|_| Err(timed_out()))
    }

    fn key(&self, what: &str) -> String {
        ops_key(&self.prefix, what)
    }

    /// Sends an operator action to every node (this one receives it too).
    pub async fn broadcast(&self, payload: &str) -> redis::RedisResult<()> {
        let mut conn = self.conn.clone();
        let Some(message) = self.signer.seal(
            &format!("{ADMIN_MESSAGE}{payload}"),
            super::control::now_ms(),
        ) else {
            return Err(redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "cluster.secret is not set: control messages cannot be signed",
            )));
        };
        self.timed(conn.publish::<_, _, i64>(&self.control, message))
            .await
            .map(drop)
    }

    /// Stores a ban of `key` (a target's key) until `expires_at` (Unix ms).
    pub async fn set_ban(&self, key: &str, expires_at: u64) -> redis::RedisResult<()> {
        let mut conn = self.conn.clone();
        let mut inv = SET_BAN.key(self.key("bans"));
        inv.arg(key).arg(expires_at).arg(crate::clock::unix_ms());
        self.timed(inv.invoke_async::<i64>(&mut conn))
            .await
            .map(drop)
    }

    pub async fn del_ban(&self, key: &str) -> redis::RedisResult<()> {
        let mut conn = self.conn.clone();
        self.timed(conn.zrem::<_, _, i64>(self.key("bans"), key))
            .await
            .map(drop)
    }

    /// Every ban in force: (target key, expiry in Unix ms).
    pub async fn bans(&self) -> redis::RedisResult<Vec<(String, u64)>> {
        let mut conn = self.conn.clone();
        let mut inv = BANS.key(self.key("bans"));
        inv.arg(crate::clock::unix_ms());
        let flat: Vec<String> = self.timed(inv.invoke_async(&mut conn)).await?;
        Ok(flat
            .chunks_exact(2)
            .filter_map(|p| Some((p[0].clone(), p[1].parse().ok()?)))
            .collect())
    }

    /// Publishes this node's overview snapshot for `ttl_ms`.
    pub async fn put_stats(&self, member: &str, json: &str, ttl_ms: u64) -> redis::RedisResult<()> {
        let mut conn = self.conn.clone();
        let mut inv = PUT_STATS.key(self.key("nodes"));
        inv.key(self.key("alive"))
            .arg(member)
            .arg(json)
            .arg(ttl_ms.max(1));
        self.timed(inv.invoke_async::<i64>(&mut conn))
            .await
            .map(drop)
    }

    /// Every live node's snapshot (JSON).
    pub async fn stats(&self) -> redis::RedisResult<Vec<String>> {
        let mut conn = self.conn.clone();
        let mut inv = STATS.key(self.key("nodes"));
        inv.key(self.key("alive"));
        self.timed(inv.invoke_async(&mut conn)).await
    }
}

impl RedisBridge {
    pub(super) fn admin_store_impl(&self) -> Option<AdminStore> {
        // On Redis Cluster, only the shards holding the admin keys and the
        // control topic matter.
        let control = self.control_topic();
        if !self.up_at(&ops_key(&self.prefix, "bans")) || !self.up_at(&control) {
            return None;
        }
        Some(AdminStore {
            conn: self.conn.get()?.clone(),
            prefix: self.prefix.clone(),
            control,
            signer: self.control.clone(),
        })
    }

    /// This process's name in snapshots (the node id and a per-start
    /// suffix).
    pub fn member(&self) -> &str {
        &self.member
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_admin_key_shares_one_slot() {
        let slot = super::super::slots::slot_of(&ops_key("tidegate:", "bans"));
        for what in ["nodes", "alive"] {
            assert_eq!(super::super::slots::slot_of(&ops_key("p:", what)), slot);
        }
    }
}
