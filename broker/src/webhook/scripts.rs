//! The Redis scripts of cluster-mode webhooks. Each is one atomic step, so
//! nodes racing on the same endpoint or channel see a single order.

use std::sync::LazyLock;

use redis::Script;

/// Appends an event to an endpoint's stream and trims it to `queue_max`
/// (oldest first), renewing the stream's TTL (`cluster.rs`, `QUEUE_TTL_MS`).
/// KEYS: stream. ARGV: event id, type, body, queue_max, ttl ms.
/// Returns how many events the trim dropped.
pub static ENQUEUE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
redis.call('XADD', KEYS[1], '*', 'i', ARGV[1], 'k', ARGV[2], 'b', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
local max = tonumber(ARGV[4])
if redis.call('XLEN', KEYS[1]) > max then
  return redis.call('XTRIM', KEYS[1], 'MAXLEN', max)
end
return 0
"#,
    )
});

/// Takes or keeps an endpoint's owner lock. KEYS: lock. ARGV: member, ttl
/// ms. Returns 1 (kept), 2 (newly taken), 0 (another node holds it).
pub static OWN: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if not cur then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 2
end
return 0
"#,
    )
});

/// A new owner takes over every pending entry (a dead or deposed owner's),
/// creating the group (and the stream, with its TTL) if needed.
/// KEYS: stream. ARGV: group, member, ttl ms.
pub static CLAIM: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local ok = pcall(redis.call, 'XGROUP', 'CREATE', KEYS[1], ARGV[1], '0', 'MKSTREAM')
redis.call('PEXPIRE', KEYS[1], ARGV[3])
local cursor = '0-0'
repeat
  local r = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, cursor, 'COUNT', 1000, 'JUSTID')
  cursor = r[1]
until cursor == '0-0'
return 1
"#,
    )
});

/// Reads up to COUNT entries for this consumer: its own pending ones
/// (start "0") or new ones (start ">"). Entries trimmed away while pending
/// are acknowledged and skipped. The owner's reads renew the stream's TTL,
/// so events wait for a receiver that is down as long as a node serves the
/// endpoint. KEYS: stream. ARGV: group, member, count, start, ttl ms.
/// Returns a flat list: entry, id, type, body, ...
pub static READ: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local r = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', ARGV[3], 'STREAMS', KEYS[1], ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
local out = {}
if not r then return out end
for _, e in ipairs(r[1][2]) do
  local f = e[2]
  if f then
    local m = {}
    for i = 1, #f, 2 do m[f[i]] = f[i + 1] end
    table.insert(out, e[1])
    table.insert(out, m['i'] or '')
    table.insert(out, m['k'] or '')
    table.insert(out, m['b'] or '')
  else
    redis.call('XACK', KEYS[1], ARGV[1], e[1])
  end
end
return out
"#,
    )
});

/// Done with an entry for good. KEYS: stream. ARGV: group, entry.
pub static ACK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
return redis.call('XDEL', KEYS[1], ARGV[2])
"#,
    )
});

/// Extends an endpoint's shared pause to at least ARGV[1] ms. KEYS: pause.
pub static PAUSE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], '1', 'PX', ARGV[1])
end
return 1
"#,
    )
});

/// Renews this node's webhook lease. The set expires with its latest
/// lease (Redis ms): past it no member is live, and a live node renews its
/// own every third of a lease. KEYS: leases. ARGV: member, ttl ms.
pub static LEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local latest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2]
redis.call('PEXPIREAT', KEYS[1], string.format('%d', tonumber(latest) + 1))
return 1
"#,
    )
});

/// This node got the channel's first local subscriber. KEYS: channel's
/// occupancy hash. ARGV: member, ttl ms, then the endpoints tracking the
/// channel. Returns the endpoints that had not been told it is occupied.
pub static JOIN: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
redis.call('HSET', KEYS[1], 'n:' .. ARGV[1], 1)
redis.call('HINCRBY', KEYS[1], 'gen', 1)
local out = {}
for i = 3, #ARGV do
  if redis.call('HSETNX', KEYS[1], 'a:' .. ARGV[i], 1) == 1 then table.insert(out, ARGV[i]) end
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return out
"#,
    )
});

/// This node lost the channel's last local subscriber. KEYS: occupancy
/// hash, webhook leases. ARGV: member, ttl ms. Returns the new generation
/// if no live node has subscribers left (a dead node's claim is dropped),
/// else 0. The hash's TTL is renewed (the generation's `HINCRBY` would
/// create a hash that expired meanwhile without one).
pub static LEAVE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
redis.call('HDEL', KEYS[1], 'n:' .. ARGV[1])
local gen = redis.call('HINCRBY', KEYS[1], 'gen', 1)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
  if string.sub(f, 1, 2) == 'n:' then
    local until_ms = redis.call('ZSCORE', KEYS[2], string.sub(f, 3))
    if until_ms and tonumber(until_ms) > now then return 0 end
    redis.call('HDEL', KEYS[1], f)
  end
end
return gen
"#,
    )
});

/// The members whose webhook lease is still valid (Redis Cluster: read
/// before [`LEAVE_LIVE`], which cannot reach this key's slot). KEYS: leases.
pub static LIVE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. string.format('%d', now), '+inf')
"#,
    )
});

/// [`LEAVE`] on the channel's hash alone, with the live members read just
/// before. KEYS: occupancy hash. ARGV: member, ttl ms, then the live
/// members.
pub static LEAVE_LIVE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
redis.call('HDEL', KEYS[1], 'n:' .. ARGV[1])
local gen = redis.call('HINCRBY', KEYS[1], 'gen', 1)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
local live = {}
for i = 3, #ARGV do live[ARGV[i]] = true end
for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
  if string.sub(f, 1, 2) == 'n:' then
    if live[string.sub(f, 3)] then return 0 end
    redis.call('HDEL', KEYS[1], f)
  end
end
return gen
"#,
    )
});

/// An endpoint's vacated delay ran out: it is told only if nothing joined
/// or left since (same generation) and it was told occupied. KEYS:
/// occupancy hash. ARGV: generation, endpoint. Returns 1 to send.
pub static VACATE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
if redis.call('HGET', KEYS[1], 'gen') ~= ARGV[1] then return 0 end
return redis.call('HDEL', KEYS[1], 'a:' .. ARGV[2])
"#,
    )
});

/// Every script, for loading them all at start (`Cluster::preload`).
pub fn all() -> [&'static Script; 12] {
    [
        &ENQUEUE,
        &OWN,
        &CLAIM,
        &READ,
        &ACK,
        &PAUSE,
        &LEASE,
        &JOIN,
        &LEAVE,
        &LIVE,
        &LEAVE_LIVE,
        &VACATE,
    ]
}
