//! The Lua scripts of the Redis bridge (those that read a channel's
//! history list are in `reads.rs`). Each runs atomically in Redis and
//! costs one round trip (EVALSHA). Numbers that leave Lua as strings go
//! through `string.format('%d')`: Lua 5.1's default conversion keeps 14
//! significant digits, and `seq` values have 16.

use std::sync::LazyLock;

use redis::Script;

/// Publish: next `seq` (raised to at least the node's floor; a missing
/// counter starts from the clock floor), the message JSON built once,
/// appended to the bounded history and published, in one step.
///
/// With an idempotency key (§17), the key is checked and recorded in the
/// same step: a key already held answers with its `seq` and publishes
/// nothing; otherwise it is set to the new `seq` for the window. One
/// `SET NX` does both for a first publish (a `GET` then a `SET` was a
/// sixth of Redis's work for a keyed publish); it is the script's first
/// write, so a Redis out of memory refuses the script before anything is
/// written. The window stays the string it came as: a Lua number handed
/// to `redis.call` is printed back through `snprintf("%.17g")`, which was
/// about a seventh of what a key added to Redis's work a publish
/// (bench/README.md, stop 52).
///
/// KEYS: seq counter, history list (on Redis Cluster the owner key), and
/// last the idempotency key when ARGV[9] is not `0`. ARGV: topic, channel, data,
/// history size, history TTL ms, node floor, clock floor, counter TTL ms,
/// idempotency window ms (0: no key).
/// Returns {seq, the message's length, `len:seq` of each message the
/// `size` trim popped, 1 when this was a duplicate} (the middle two feed
/// the cluster-wide byte budget, `history.rs`; 0 and none without history
/// or for a duplicate).
pub static PUBLISH: LazyLock<Script> = LazyLock::new(|| Script::new(PUBLISH_SOURCE));

/// The source of [`PUBLISH`] (the Redis Cluster variant, in `fence.rs`,
/// swaps its `PUBLISH` for `SPUBLISH` and fences the counter first).
pub const PUBLISH_SOURCE: &str = r#"
local window = ARGV[9]
local cur = redis.call('GET', KEYS[1])
local floor = tonumber(ARGV[6])
if cur then cur = tonumber(cur) else cur = math.max(floor, tonumber(ARGV[7])) end
if cur < floor then cur = floor end
local seq = string.format('%d', cur + 1)
if window and window ~= '0' then
  local idem = KEYS[#KEYS]
  if not redis.call('SET', idem, seq, 'NX', 'PX', window) then
    return { redis.call('GET', idem), 0, {}, 1 }
  end
end
redis.call('SET', KEYS[1], seq, 'PX', ARGV[8])
local msg = '{"type":"message","channel":"' .. ARGV[2] .. '","seq":' .. seq .. ',"data":' .. ARGV[3] .. '}'
local size = tonumber(ARGV[4])
local kept = 0
local popped = {}
if size > 0 then
  kept = #msg
  local over = redis.call('RPUSH', KEYS[2], msg) - size
  while over > 0 do
    local old = redis.call('LPOP', KEYS[2])
    popped[#popped + 1] = string.format('%d', #old) .. ':' .. (string.match(old, '"seq":(%d+)') or '0')
    over = over - 1
  end
  redis.call('PEXPIRE', KEYS[2], ARGV[5])
end
redis.call('PUBLISH', ARGV[1], msg)
return { seq, kept, popped, 0 }
"#;

/// Raises a `seq` counter to at least ARGV[1] (after an outage, so the
/// cluster never reissues a `seq` a node handed out alone).
/// KEYS: seq counter. ARGV: floor, counter TTL ms.
/// (Sent with EVAL inside a pipeline, hence the bare source.)
pub const RAISE: &str = r#"
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
if cur < tonumber(ARGV[1]) then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) end
return 1
"#;

/// A cost-aware token bucket (seed 004), timed by Redis's clock so nodes'
/// clocks do not matter. KEYS: bucket. ARGV: capacity, refill per second,
/// cost, and optionally `1` to take it even below zero (a debt: a
/// recovery's history, `charge::recovery`; the key then lives until the
/// refill has paid it off). Returns {allowed, remaining (floor), retry
/// ms, ms until full}.
pub static BUCKET: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local cap = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local st = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(st[1]) or cap
local ts = tonumber(st[2]) or now
tokens = math.min(cap, tokens + math.max(0, now - ts) / 1000 * rate)
local allowed = 0
if tokens >= cost or ARGV[4] == '1' then
  tokens = tokens - cost
  allowed = 1
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', string.format('%d', now))
redis.call('PEXPIRE', KEYS[1], math.ceil(math.max(cap, cap - tokens) / rate * 1000) + 1000)
local retry = 0
if allowed == 0 then retry = math.ceil((cost - tokens) / rate * 1000) end
return { allowed, math.floor(tokens), retry, math.ceil((cap - tokens) / rate * 1000) }
"#,
    )
});

/// Gives back part of a charge that turned out cheaper (GraphQL's refund,
/// §12), to a key's bucket or an account's budget alike: the tokens as of
/// the bucket's last update, plus the units, capped at capacity (the next
/// charge adds the refill since). A missing bucket is full: nothing to do.
/// KEYS: bucket. ARGV: capacity, units. Returns the balance (floor).
pub static REFUND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local cap = tonumber(ARGV[1])
local tokens = tonumber(redis.call('HGET', KEYS[1], 'tokens'))
if not tokens then return math.floor(cap) end
tokens = math.min(cap, tokens + tonumber(ARGV[2]))
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens))
return math.floor(tokens)
"#,
    )
});

/// The account budget: [`crate::limiter::SampledBucket`] in Redis, timed by
/// Redis's clock. A charge comes late, after its units were admitted; the
/// refill the cap discarded is kept (`spill`) and a charge gets back the
/// part that fell after its first unit, up to its own units, so the account
/// is judged as if charged unit by unit. A missing bucket is full as of the
/// charge's first unit. A wait is credited for at most the horizon, and the
/// key lives the horizon plus its time to refill after the last charge.
/// KEYS: bucket. ARGV: capacity, refill per second, units, ms since the
/// first unit was admitted, horizon ms, and optionally `1` to take the
/// units even below zero (a debt, as in [`BUCKET`]).
/// Returns {allowed, remaining (floor), retry ms}.
pub static ACCOUNT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local cap = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local units = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local horizon = tonumber(ARGV[5])
local since = now - math.min(tonumber(ARGV[4]), horizon)
local st = redis.call('HMGET', KEYS[1], 'tokens', 'ts', 'spill', 'spilled')
local tokens = tonumber(st[1]) or cap
local ts = tonumber(st[2]) or since
local spill = tonumber(st[3]) or 0
local spilled = tonumber(st[4]) or ts
if now > ts then
  local raw = tokens + (now - ts) / 1000 * rate
  if raw > cap then
    spill = spill + raw - cap
    spilled = now
    tokens = cap
  else
    tokens = raw
  end
  ts = now
end
tokens = math.min(tokens, cap)
local credit = math.min(spill, units, math.max(0, spilled - since) / 1000 * rate)
local balance = tokens + credit - units
local allowed = 0
local retry = 0
if balance >= 0 or ARGV[6] == '1' then
  allowed = 1
  spill = spill - credit
  tokens = math.min(balance, cap)
  redis.call('PEXPIRE', KEYS[1], math.ceil(math.max(cap, cap - tokens) / rate * 1000) + horizon)
else
  retry = math.ceil(-balance / rate * 1000)
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', string.format('%d', ts),
  'spill', tostring(spill), 'spilled', string.format('%d', spilled))
if redis.call('PTTL', KEYS[1]) < 0 then
  redis.call('PEXPIRE', KEYS[1], math.ceil(math.max(cap, cap - tokens) / rate * 1000) + horizon)
end
return { allowed, math.floor(tokens), retry }
"#,
    )
});

/// Counts one connection of this node for an account if the account is
/// under its cap, summing only nodes whose lease is live (a dead node's
/// counts are dropped here). The hash expires ARGV[3] ms after the last
/// reserve or lease renewal of a node counting in it.
/// KEYS: the account's per-node counts, the node leases. ARGV: node id,
/// cap, the hash's TTL ms. Returns {admitted, open}.
pub static RESERVE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local counts = redis.call('HGETALL', KEYS[1])
local total = 0
for i = 1, #counts, 2 do
  local node = counts[i]
  local n = tonumber(counts[i + 1])
  if node ~= ARGV[1] then
    local exp = redis.call('ZSCORE', KEYS[2], node)
    if (not exp) or tonumber(exp) < now then
      redis.call('HDEL', KEYS[1], node)
      n = 0
    end
  end
  total = total + n
end
if total >= tonumber(ARGV[2]) then return { 0, total } end
redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return { 1, total + 1 }
"#,
    )
});

/// Gives back one connection. KEYS: the account's per-node counts.
/// ARGV: node id.
pub static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
if redis.call('HINCRBY', KEYS[1], ARGV[1], -1) <= 0 then redis.call('HDEL', KEYS[1], ARGV[1]) end
return 1
"#,
    )
});

/// Renews this node's lease, forgets expired ones, and returns how many
/// nodes are live. The set expires with its latest lease (scores are
/// Redis ms, as its clock's): past it every member has expired anyway, and
/// a live node renews its own every third of a lease.
/// KEYS: the node leases. ARGV: node id, lease ms.
pub static LEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local latest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2]
redis.call('PEXPIREAT', KEYS[1], string.format('%d', tonumber(latest) + 1))
return redis.call('ZCARD', KEYS[1])
"#,
    )
});
