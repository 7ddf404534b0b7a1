//! What differs on Redis Cluster (`cluster.mode = "redis-cluster"`): every
//! script touches keys of one hash slot only.
//!
//! - A channel's counter, history and topic are tagged with the channel
//!   (`{prefix}seq:{doc:1}`, see `RedisBridge::key`), and the publish script
//!   sends with `SPUBLISH`, so a publish runs on the shard owning the
//!   channel and its message goes out from there only; it and the join
//!   script fence the counter against a failover first (`fence.rs`).
//! - The connection-cap script cannot read the node lease set (another
//!   slot), so each account's hash keeps its own copy of the expiry of every
//!   node counting in it (`lease@{member}` beside the `{member}` count),
//!   stamped at each reserve and renewed with the node's lease.
//! - After an outage no pipeline may cross slots: counters are raised and
//!   counts re-asserted one key per command, concurrently.

use std::sync::LazyLock;

use futures_util::future::{join_all, try_join_all};
use redis::{Script, ScriptInvocation};

use super::{Conn, RedisBridge, SEQ_TTL_MS, scripts};

/// Keys touched per burst of concurrent commands during a re-sync.
const BURST: usize = 256;

/// [`scripts::RESERVE`] on the account's hash alone: fields `{member}` (a
/// node's count) and `lease@{member}` (its lease expiry, Redis ms). A count
/// whose lease copy is missing or past is dropped. The caller's own lease
/// copy is stamped now + lease ms. KEYS: the account's counts. ARGV: node
/// member, cap, lease ms. Returns {admitted, open}.
static RESERVE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local fields = redis.call('HGETALL', KEYS[1])
local total = 0
for i = 1, #fields, 2 do
  local node = fields[i]
  if string.sub(node, 1, 6) ~= 'lease@' then
    local n = tonumber(fields[i + 1])
    if node ~= ARGV[1] then
      local exp = redis.call('HGET', KEYS[1], 'lease@' .. node)
      if (not exp) or tonumber(exp) < now then
        redis.call('HDEL', KEYS[1], node, 'lease@' .. node)
        n = 0
      end
    end
    total = total + n
  end
end
if total >= tonumber(ARGV[2]) then return { 0, total } end
redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
redis.call('HSET', KEYS[1], 'lease@' .. ARGV[1], string.format('%d', now + tonumber(ARGV[3])))
redis.call('PEXPIRE', KEYS[1], 3 * tonumber(ARGV[3]))
return { 1, total + 1 }
"#,
    )
});

/// Gives back one connection, dropping the lease copy with the last one.
/// KEYS: the account's counts. ARGV: node member.
static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
if redis.call('HINCRBY', KEYS[1], ARGV[1], -1) <= 0 then
  redis.call('HDEL', KEYS[1], ARGV[1], 'lease@' .. ARGV[1])
end
return 1
"#,
    )
});

/// Renews this node's lease copy in one account's hash, first setting its
/// count when ARGV[2] is not empty (re-assertion after an outage).
/// KEYS: the account's counts. ARGV: node member, count or '', lease ms.
static RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[2] ~= '' then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  redis.call('HSET', KEYS[1], 'lease@' .. ARGV[1], string.format('%d', now + tonumber(ARGV[3])))
  redis.call('PEXPIRE', KEYS[1], 3 * tonumber(ARGV[3]))
end
return 1
"#,
    )
});

impl RedisBridge {
    /// Counting one more connection of `account` under `max`.
    pub(super) fn reserve_invocation(&self, account: &str, max: u32) -> ScriptInvocation<'static> {
        if self.sharded {
            let mut inv = RESERVE.key(self.key("conns", account));
            inv.arg(&self.member).arg(max).arg(self.lease_ms);
            return inv;
        }
        let mut inv = scripts::RESERVE.key(self.key("conns", account));
        inv.key(format!("{}nodes", self.prefix))
            .arg(&self.member)
            .arg(max)
            .arg(self.conns_ttl_ms());
        inv
    }

    /// Giving back one connection of `account`.
    pub(super) fn release_invocation(&self, account: &str) -> ScriptInvocation<'static> {
        let script: &'static Script = if self.sharded {
            &RELEASE
        } else {
            &scripts::RELEASE
        };
        let mut inv = script.key(self.key("conns", account));
        inv.arg(&self.member);
        inv
    }

    /// Renewing this node's lease copy in `account`'s hash, first setting
    /// its count there to `assert` if given.
    pub(super) fn renew_invocation(
        &self,
        account: &str,
        assert: Option<u32>,
    ) -> ScriptInvocation<'static> {
        let mut inv = RENEW.key(self.key("conns", account));
        inv.arg(&self.member)
            .arg(assert.map(|n| n.to_string()).unwrap_or_default())
            .arg(self.lease_ms);
        inv
    }

    /// Renews this node's lease copy in every account it holds connections
    /// of (or, with `assert`, also sets its counts there).
    async fn renew_accounts(&self, conn: &Conn, assert: bool) -> redis::RedisResult<()> {
        let counts = self.local.all_connections();
        for chunk in counts.chunks(BURST) {
            try_join_all(chunk.iter().map(|(account, n)| {
                let mut conn = conn.clone();
                let inv = self.renew_invocation(account, assert.then_some(*n));
                async move { inv.invoke_async::<i64>(&mut conn).await }
            }))
            .await?;
        }
        Ok(())
    }

    /// The lease renewal while connected: the node lease and every
    /// account's lease copy, each on its own shard; one that fails marks
    /// its slot down (the slot recovery re-asserts it) and the rest go on.
    pub(super) async fn renew_leases_sharded(&self, conn: &Conn) {
        let nodes = self.nodes_key();
        if !self.down.is_down(&nodes) {
            let mut c = conn.clone();
            let fut = self.renew_node_lease(&mut c);
            match tokio::time::timeout(super::COMMAND_TIMEOUT, fut).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => self.failed_at(&nodes, &e),
                Err(_) => self.failed_at(&nodes, &(redis::ErrorKind::Io, "timed out").into()),
            }
        }
        let counts = self.local.all_connections();
        for chunk in counts.chunks(BURST) {
            join_all(chunk.iter().map(|(account, _)| {
                let mut conn = conn.clone();
                let key = self.key("conns", account);
                let inv = self.renew_invocation(account, None);
                async move {
                    if self.down.is_down(&key) {
                        return;
                    }
                    if let Err(e) = inv.invoke_async::<i64>(&mut conn).await {
                        self.failed_at(&key, &e);
                    }
                }
            }))
            .await;
        }
    }

    /// With each lease renewal: the per-account copies.
    pub(super) async fn renew_account_leases(&self, conn: &Conn) -> redis::RedisResult<()> {
        self.renew_accounts(conn, false).await
    }

    /// The script that raises a channel's `seq` counter to at least `seq`,
    /// one key per call: a node's own counts after a resync, or on a
    /// promoted replica that may have missed the last writes.
    pub(super) fn raise_seq(&self, channel: &str, seq: u64) -> redis::Cmd {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(scripts::RAISE)
            .arg(1)
            .arg(self.key("seq", channel))
            .arg(seq.to_string())
            .arg(SEQ_TTL_MS.max(self.history().1));
        cmd
    }

    /// [`RedisBridge::resync`] without cross-slot pipelines.
    pub(super) async fn resync_sharded(&self, conn: &mut Conn) -> redis::RedisResult<()> {
        for chunk in self.hub.seqs().chunks(BURST) {
            try_join_all(chunk.iter().map(|(channel, seq)| {
                let mut conn = conn.clone();
                let cmd = self.raise_seq(channel, *seq);
                async move { cmd.query_async::<i64>(&mut conn).await }
            }))
            .await?;
        }
        self.renew_accounts(conn, true).await?;
        self.renew_lease(conn).await
    }
}
