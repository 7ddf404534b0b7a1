//! The cluster-wide history byte budget (`history.cluster_max_bytes`):
//! every channel's `hist:` list in Redis counts toward one total, and past
//! it the oldest messages go first, whichever channel holds them.
//!
//! Without it the per-channel bounds (`history.size` messages for
//! `history.ttl_ms`) multiply by the number of channels: an account with a
//! wildcard grant could park gigabytes in Redis by publishing to fresh
//! channel names.
//!
//! Why not in the publish script itself: on Redis Cluster a script touches
//! one slot, a channel's keys are tagged by its name, and an attacker
//! spreads channels over all 16384 slots, so a per-slot budget would have
//! to be `max / 16384` (less than one message) to bound the total. So the
//! index is one sorted set (`{prefix}hidx:{budget}`, with its byte counter
//! `{prefix}hbytes:{budget}` in the same slot), fed in batches:
//!
//! - the publish script (still one call per publish) returns the message's
//!   length and the entries its `size` trim popped; the node buffers them;
//! - every [`FLUSH`] (sooner once [`BATCH`] wait) the node sends them in
//!   one [`INDEX`] call, which adds the new entries (scored by the node's
//!   publish time, µs), removes the popped ones, removes entries older
//!   than `ttl_ms`, then pops the oldest while the total is over the
//!   budget, and returns what it removed by age or budget;
//! - the node trims those from their channels' lists ([`TRIM`], one call
//!   per channel, up to the newest `seq` removed there).
//!
//! So the bound holds across every node and every master, up to what the
//! nodes published in the last flush interval (at most [`MAX_BUFFERED`]
//! entries per node) and trims in flight. An entry is counted as its
//! message's bytes plus its index name. Entries whose message is already
//! gone (a race between nodes) are over-counted until they age out, which
//! only evicts earlier. Messages older than `ttl_ms` now leave their list
//! individually, as in memory mode, not only when the whole list expires.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::LazyLock;
use std::time::Duration;

use futures_util::StreamExt;
use parking_lot::Mutex;
use redis::Script;

use super::RedisBridge;
use super::resharding::invoke_following;

/// How often buffered entries reach the index.
const FLUSH: Duration = Duration::from_millis(100);
/// A flush starts early once this many entries wait; also the most
/// entries one [`INDEX`] call carries.
const BATCH: usize = 1024;
/// Entries a node buffers while the index cannot be reached; past it new
/// ones are left out of the index (their lists still expire with
/// `ttl_ms`), counted in `tidegate_redis_history_unindexed_total`.
const MAX_BUFFERED: usize = 65_536;
/// Channel trims in flight at once after a flush.
const TRIMS_IN_FLIGHT: usize = 16;

/// Updates the index and enforces the budget. KEYS: the index, the byte
/// counter. ARGV: budget bytes, TTL ms, number of added entries `n`, then
/// `n` (score, member) pairs, then members to remove. A member is
/// `len:seq:channel`; it costs `len` plus its own length. At most 4,096
/// entries leave by age and 8,192 by budget per call (the next flush goes
/// on), so one call never holds Redis long. Returns the counter after,
/// and the members removed by age or budget.
static INDEX: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local max = tonumber(ARGV[1])
local ttl = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local bytes = tonumber(redis.call('GET', KEYS[2]) or '0')
local function cost(m) return tonumber(string.match(m, '^(%d+):') or '0') + #m end
for i = 4, 3 + 2 * n, 2 do
  if redis.call('ZADD', KEYS[1], 'NX', ARGV[i], ARGV[i + 1]) == 1 then
    bytes = bytes + cost(ARGV[i + 1])
  end
end
for i = 4 + 2 * n, #ARGV do
  if redis.call('ZREM', KEYS[1], ARGV[i]) == 1 then bytes = bytes - cost(ARGV[i]) end
end
local gone = {}
local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - ttl * 1000, 'LIMIT', 0, 4096)
for _, m in ipairs(old) do
  redis.call('ZREM', KEYS[1], m)
  bytes = bytes - cost(m)
  gone[#gone + 1] = m
end
local pops = 0
while bytes > max and pops < 8192 do
  pops = pops + 1
  local p = redis.call('ZPOPMIN', KEYS[1])
  if #p == 0 then bytes = 0 break end
  bytes = bytes - cost(p[1])
  gone[#gone + 1] = p[1]
end
if bytes < 0 then bytes = 0 end
redis.call('SET', KEYS[2], string.format('%d', bytes), 'PX', ttl)
redis.call('PEXPIRE', KEYS[1], ttl)
return { string.format('%d', bytes), gone }
"#,
    )
});

/// Removes a channel's oldest held messages up to `seq` (ARGV[1]). KEYS:
/// the history list. Returns how many left.
static TRIM: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local upto = tonumber(ARGV[1])
local n = 0
while true do
  local m = redis.call('LINDEX', KEYS[1], 0)
  if not m then break end
  local s = tonumber(string.match(m, '"seq":(%d+)') or '0')
  if s > upto then break end
  redis.call('LPOP', KEYS[1])
  n = n + 1
end
return n
"#,
    )
});

/// What waits for the next flush (bounded by [`MAX_BUFFERED`] each).
#[derive(Debug, Default)]
pub(super) struct Pending {
    /// (score µs, member) of messages appended to a list.
    added: Vec<(u64, String)>,
    /// Members a publish's `size` trim popped.
    removed: Vec<String>,
    /// The last score handed out, so this node's scores strictly rise.
    last_score: u64,
}

/// The index member of `channel`'s message `seq` of `len` bytes.
fn member(len: u64, seq: &str, channel: &str) -> String {
    format!("{len}:{seq}:{channel}")
}

/// The channel and `seq` of an index member.
fn parse_member(m: &str) -> Option<(&str, u64)> {
    let mut parts = m.splitn(3, ':');
    let _len = parts.next()?;
    let seq = parts.next()?.parse().ok()?;
    Some((parts.next()?, seq))
}

fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

impl RedisBridge {
    fn index_keys(&self) -> (String, String) {
        (self.key("hidx", "budget"), self.key("hbytes", "budget"))
    }

    /// A publish appended `seq` (`len` bytes) to `channel`'s list and its
    /// `size` trim popped `trimmed` (`len:seq` each).
    pub(super) fn indexed(&self, channel: &str, seq: &str, len: u64, trimmed: Vec<String>) {
        let mut p = self.hist_pending.lock();
        let full = p.added.len() + 1 >= BATCH;
        if p.added.len() < MAX_BUFFERED {
            let score = now_us().max(p.last_score + 1);
            p.last_score = score;
            p.added.push((score, member(len, seq, channel)));
        } else {
            self.metrics.redis_history_unindexed.inc();
        }
        for t in trimmed {
            if p.removed.len() < MAX_BUFFERED {
                p.removed.push(format!("{t}:{channel}"));
            }
        }
        drop(p);
        if full {
            self.hist_flush_now.notify_one();
        }
    }

    /// Flushes the buffered entries every [`FLUSH`] (or sooner), trimming
    /// what the budget and the TTL evicted.
    pub(super) async fn history_loop(self: Arc<Self>) {
        loop {
            let _ = tokio::time::timeout(FLUSH, self.hist_flush_now.notified()).await;
            while self.flush_index().await {}
        }
    }

    /// One [`INDEX`] call with up to [`BATCH`] entries; `true` if more
    /// wait. Entries stay buffered while the index cannot be reached.
    async fn flush_index(&self) -> bool {
        let (idx, bytes_key) = self.index_keys();
        let (added, removed, more) = {
            let mut p = self.hist_pending.lock();
            if p.added.is_empty() && p.removed.is_empty() {
                return false;
            }
            let a = p.added.len().min(BATCH);
            let r = p.removed.len().min(BATCH);
            let added: Vec<(u64, String)> = p.added.drain(..a).collect();
            let removed: Vec<String> = p.removed.drain(..r).collect();
            (added, removed, !p.added.is_empty() || !p.removed.is_empty())
        };
        let Some((mut conn, _in_flight)) = self.command(&idx) else {
            self.requeue(added, removed);
            return false;
        };
        let (_, ttl, budget) = self.history();
        let mut inv = INDEX.key(&idx);
        inv.key(&bytes_key).arg(budget).arg(ttl).arg(added.len());
        for (score, m) in &added {
            inv.arg(*score).arg(m);
        }
        for m in &removed {
            inv.arg(m);
        }
        let result: redis::RedisResult<(String, Vec<String>)> = self
            .metrics
            .time_script("history_index", invoke_following(&inv, &mut conn))
            .await;
        let gone = match result {
            Ok((total, gone)) => {
                self.metrics
                    .redis_history_bytes
                    .set(total.parse().unwrap_or(0));
                gone
            }
            Err(e) => {
                self.failed_at(&idx, &e);
                self.requeue(added, removed);
                return false;
            }
        };
        self.trim_channels(&gone).await;
        more
    }

    /// Puts a batch back in front of what arrived meanwhile (within
    /// [`MAX_BUFFERED`]: the oldest are kept, as they were first).
    fn requeue(&self, added: Vec<(u64, String)>, removed: Vec<String>) {
        let mut p = self.hist_pending.lock();
        let newer = std::mem::replace(&mut p.added, added);
        p.added.extend(newer);
        if p.added.len() > MAX_BUFFERED {
            let over = p.added.len() - MAX_BUFFERED;
            self.metrics.redis_history_unindexed.inc_by(over as u64);
            p.added.truncate(MAX_BUFFERED);
        }
        let newer = std::mem::replace(&mut p.removed, removed);
        p.removed.extend(newer);
        p.removed.truncate(MAX_BUFFERED);
    }

    /// Trims each channel in `gone` up to the newest `seq` removed there.
    async fn trim_channels(&self, gone: &[String]) {
        // One entry per channel in `gone` (at most 12,288 members a call).
        let mut upto: HashMap<&str, u64> = HashMap::new();
        for (channel, seq) in gone.iter().filter_map(|m| parse_member(m)) {
            let e = upto.entry(channel).or_insert(seq);
            *e = (*e).max(seq);
        }
        futures_util::stream::iter(upto)
            .for_each_concurrent(TRIMS_IN_FLIGHT, |(channel, seq)| async move {
                let key = self.key("hist", channel);
                let Some((mut conn, _in_flight)) = self.command(&key) else {
                    return;
                };
                let mut inv = TRIM.key(&key);
                inv.arg(seq);
                let r: redis::RedisResult<u64> = self
                    .metrics
                    .time_script("history_trim", invoke_following(&inv, &mut conn))
                    .await;
                if let Err(e) = r {
                    self.failed_at(&key, &e);
                }
            })
            .await;
    }
}

/// The shared buffer a bridge keeps for the index.
pub(super) type Buffer = Mutex<Pending>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_name_their_channel_and_seq() {
        let m = member(812, "1796038664859005", "doc:a:b");
        assert_eq!(m, "812:1796038664859005:doc:a:b");
        assert_eq!(parse_member(&m), Some(("doc:a:b", 1_796_038_664_859_005)));
        assert_eq!(parse_member("nonsense"), None);
    }
}
