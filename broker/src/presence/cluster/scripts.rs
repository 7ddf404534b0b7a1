//! The presence scripts. Each touches the keys of one channel only, all
//! under the channel's `{<channel>}` hash tag and all passed as KEYS, so
//! they run unchanged on Redis Cluster (on the shard of the channel's
//! slot). The keys, in KEYS order:
//!
//! 1. `m`: sorted set, every member's sort key (`wire::sort_key`) at
//!    score 0, so `ZRANGEBYLEX` reads the first `limit` in §13's order;
//! 2. `i`: hash, sort key → the member as stored (`["user","conn",info]`);
//! 3. `u`: hash, the user part of a sort key → its connections here
//!    (`HLEN` is the user count);
//! 4. `w`: hash, sort key → the node instance that holds the member;
//! 5. `o`: sorted set, node instance → the end of its lease on this
//!    channel (unix ms, Redis's own clock);
//! 6. `v`: the channel's version, raised by every change, so a node can
//!    tell in one call that its view is current.
//!
//! Every key expires: a node renewing its lease gives every key of the
//! channel `lease_ms` more (`keep`), and a script that writes without
//! renewing gives any key it left without a TTL `lease_ms` (`bound`). So
//! a channel no live node holds members of is gone from Redis within a
//! lease, and a dead node's members leave (`prune`, in every script that
//! counts or lists) once its lease on the channel ended. Counts are read
//! with `ZCARD` and `HLEN`, never by listing members.

/// The functions every script shares (Lua 5.1; `'\0'` is the byte 0).
const PRELUDE: &str = r"
local m, i, u, w, o, v = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)

local function user_of(k)
  local z = string.find(k, '\0', 1, true)
  return string.sub(k, 1, (z or (#k + 1)) - 1)
end

local function bump()
  if redis.call('EXISTS', v) == 0 then redis.call('SET', v, now) end
  redis.call('INCR', v)
end

local function add(k, stored, node)
  if redis.call('HSET', w, k, node) == 1 then
    redis.call('ZADD', m, 0, k)
    redis.call('HINCRBY', u, user_of(k), 1)
  end
  redis.call('HSET', i, k, stored)
end

local function drop(k)
  local stored = redis.call('HGET', i, k)
  if redis.call('HDEL', w, k) == 1 then
    redis.call('ZREM', m, k)
    local uk = user_of(k)
    if redis.call('HINCRBY', u, uk, -1) <= 0 then redis.call('HDEL', u, uk) end
  end
  redis.call('HDEL', i, k)
  return stored
end

local function prune()
  local gone = {}
  local dead = redis.call('ZRANGEBYSCORE', o, '-inf', now)
  if #dead == 0 then return gone end
  local is_dead = {}
  for _, n in ipairs(dead) do is_dead[n] = true end
  redis.call('ZREMRANGEBYSCORE', o, '-inf', now)
  local owners = redis.call('HGETALL', w)
  for j = 1, #owners, 2 do
    if is_dead[owners[j + 1]] then
      local stored = drop(owners[j])
      if stored then gone[#gone + 1] = stored end
    end
  end
  if #gone > 0 then bump() end
  return gone
end

local function keep(ms)
  for _, k in ipairs(KEYS) do redis.call('PEXPIRE', k, ms) end
end

local function bound(ms)
  for _, k in ipairs(KEYS) do
    if redis.call('PTTL', k) == -1 then redis.call('PEXPIRE', k, ms) end
  end
end

local function reply(head, gone, rest)
  local r = head
  r[#r + 1] = #gone
  for _, x in ipairs(gone) do r[#r + 1] = x end
  if rest then for _, x in ipairs(rest) do r[#r + 1] = x end end
  return r
end
";

/// A member joins unless the channel is full. ARGV: node, sort key,
/// stored member, max_members, lease ms, events topic, sealed event,
/// `1` if this node holds other members of the channel, `1` if
/// max_members counts users (a user already in always joins). Answers
/// `[status, lapsed, #gone, gone...]`: status 1 joined (or was in), 0
/// full; lapsed 1 when the node expected to hold members here but its
/// lease on the channel had ended (its members were pruned: it must
/// register them again).
const JOIN: &str = r"
local gone = prune()
local lease = tonumber(ARGV[5])
local lapsed = 0
if ARGV[8] == '1' and not redis.call('ZSCORE', o, ARGV[1]) then lapsed = 1 end
local status = 1
if not redis.call('HGET', w, ARGV[2]) then
  local max = tonumber(ARGV[4])
  local full
  if ARGV[9] == '1' then
    local uk = user_of(ARGV[2])
    full = redis.call('HEXISTS', u, uk) == 0 and redis.call('HLEN', u) >= max
  else
    full = redis.call('ZCARD', m) >= max
  end
  if full then
    status = 0
  else
    add(ARGV[2], ARGV[3], ARGV[1])
    bump()
    if ARGV[7] ~= '' then redis.call('PUBLISH', ARGV[6], ARGV[7]) end
  end
end
if status == 1 then
  redis.call('ZADD', o, now + lease, ARGV[1])
  keep(lease)
else
  bound(lease)
end
return reply({status, lapsed}, gone)
";

/// A member of this node leaves. ARGV: node, sort key, lease ms, events
/// topic, sealed event. Answers 1 if it was there.
const LEAVE: &str = r"
local r = 0
if redis.call('HGET', w, ARGV[2]) == ARGV[1] then
  drop(ARGV[2])
  bump()
  if ARGV[5] ~= '' then redis.call('PUBLISH', ARGV[4], ARGV[5]) end
  r = 1
end
bound(tonumber(ARGV[3]))
return r
";

/// The counts and the first `limit` members (0: counts only). ARGV:
/// limit, lease ms. Answers `[connections, users, #gone, gone...,
/// stored...]`: the work is the pruning of dead nodes' members (each
/// once) plus `limit` members, whatever the channel holds.
const READ: &str = r"
local gone = prune()
local head = {redis.call('ZCARD', m), redis.call('HLEN', u)}
local rest = nil
local n = tonumber(ARGV[1])
if n > 0 then
  local ks = redis.call('ZRANGEBYLEX', m, '-', '+', 'LIMIT', 0, n)
  if #ks > 0 then rest = redis.call('HMGET', i, unpack(ks)) end
end
bound(tonumber(ARGV[2]))
return reply(head, gone, rest)
";

/// Renews this node's lease on the channel. ARGV: node, lease ms.
/// Answers `[status, #gone, gone...]`: 0 when Redis does not hold this
/// node's lease (lost, or ended and pruned): it must register again.
const RENEW: &str = r"
local gone = prune()
local lease = tonumber(ARGV[2])
local status = 0
if redis.call('ZSCORE', o, ARGV[1]) then
  redis.call('ZADD', o, now + lease, ARGV[1])
  keep(lease)
  status = 1
else
  bound(lease)
end
return reply({status}, gone)
";

/// Writes this node's members of the channel in full. ARGV: node, lease
/// ms, then sort key and stored member pairs. Members of this node that
/// are not given leave. Answers `[1, #gone, gone...]`: the dead nodes'
/// members pruned and this node's own that left.
const REGISTER: &str = r"
local gone = prune()
local lease = tonumber(ARGV[2])
local given = {}
for j = 3, #ARGV, 2 do given[ARGV[j]] = ARGV[j + 1] end
local owners = redis.call('HGETALL', w)
for j = 1, #owners, 2 do
  if owners[j + 1] == ARGV[1] and not given[owners[j]] then
    local stored = drop(owners[j])
    if stored then gone[#gone + 1] = stored end
  end
end
for k, stored in pairs(given) do add(k, stored, ARGV[1]) end
redis.call('ZADD', o, now + lease, ARGV[1])
bump()
keep(lease)
return reply({1}, gone)
";

/// The channel's version and counts, and, unless the caller's version
/// is current, every member's sort key (no infos). ARGV: the caller's
/// version (`''`: none), lease ms. Answers `[version, connections,
/// users, listed, #gone, gone..., keys...]`.
const IDS: &str = r"
local gone = prune()
local ver = redis.call('GET', v) or '0'
local head = {tonumber(ver), redis.call('ZCARD', m), redis.call('HLEN', u), 0}
local rest = nil
if ver ~= ARGV[1] then
  head[4] = 1
  rest = redis.call('ZRANGEBYLEX', m, '-', '+')
end
bound(tonumber(ARGV[2]))
return reply(head, gone, rest)
";

/// The scripts, each with the prelude, loaded once per process.
pub(super) struct Scripts {
    pub join: redis::Script,
    pub leave: redis::Script,
    pub read: redis::Script,
    pub renew: redis::Script,
    pub register: redis::Script,
    pub ids: redis::Script,
}

impl Scripts {
    pub fn new() -> Scripts {
        let s = |body: &str| redis::Script::new(&format!("{PRELUDE}{body}"));
        Scripts {
            join: s(JOIN),
            leave: s(LEAVE),
            read: s(READ),
            renew: s(RENEW),
            register: s(REGISTER),
            ids: s(IDS),
        }
    }

    /// Every script, for loading them all at start.
    pub fn all(&self) -> [&redis::Script; 6] {
        [
            &self.join,
            &self.leave,
            &self.read,
            &self.renew,
            &self.register,
            &self.ids,
        ]
    }
}
