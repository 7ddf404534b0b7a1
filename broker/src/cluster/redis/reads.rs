//! The scripts that read a channel's history list (`hist:`): the join's
//! count of what `since` recovers, a recovery's page, and the newest
//! messages GraphQL's `history` asks for. Each reads about what it returns
//! and no more, whatever the list's length (issue 38: a read charged one or
//! two units must not walk a history of thousands of messages).
//!
//! They find where to start by `seq` without walking the list: the list
//! holds its messages in rising `seq` order (the publish script appends
//! under the counter), and `seq`s rise by one per message unless the
//! counter jumped (a floor raised after an outage, a failover's fence). So
//! the place of a `seq` is computed from the newest message's, checked
//! with one `LINDEX`, and binary-searched only when `seq`s jumped since.
//! Indexes are counted from the nearer end of the list, which is where
//! Redis starts walking.

use std::sync::LazyLock;

use redis::Script;

/// The Lua the reading scripts share. `first_after(key, n, x)`: the index
/// in list `key` (of length `n`) of the first message with a `seq` above
/// `x` (`n`: none). Every `seq` is at least one above the one before, so
/// no index below `n - (newest - x)` holds one above `x`: that index is
/// probed first, and is the answer unless `seq`s jumped after `x`.
const SEARCH: &str = r#"
local function seq_text(m)
  return string.match(m or '', '"seq":(%d+)') or '0'
end
local function near(n, i)
  if i > n / 2 then return i - n end
  return i
end
local function seq_at(key, n, i)
  return tonumber(seq_text(redis.call('LINDEX', key, near(n, i))))
end
local function first_after(key, n, x)
  if n == 0 then return 0 end
  local newest = seq_at(key, n, n - 1)
  if newest <= x then return n end
  local lo = n - (newest - x)
  if lo < 0 then lo = 0 end
  local hi = n - 1
  if seq_at(key, n, lo) > x then return lo end
  lo = lo + 1
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if seq_at(key, n, mid) > x then hi = mid else lo = mid + 1 end
  end
  return hi
end
"#;

/// Joining a channel: the `seq` the counter had ('0': none), the position
/// the subscription starts from, and (when ARGV[4] is '1') what recovery
/// after `since` (ARGV[6]) would deliver, read atomically but without
/// sending the messages: the `seq` of the oldest and newest held message
/// ('0': none) and the count and bytes of those after `since` (the
/// messages are read later in pages, [`PAGE`]). Only the messages after
/// `since` are read (for their bytes, what the recovery is priced by), and
/// only when the history covers `since`: a `since` at the counter reads
/// nothing. A missing counter is created as a publish would start it (the
/// node's floor or the clock floor), so the position exists before the
/// first message and `since` from it works. A counter a join creates lives
/// only ARGV[5] ms (the history's TTL), so a mere subscribe leaves nothing
/// long-lived behind (a publish gives the counter its full TTL).
/// KEYS: seq counter, history list. ARGV: node floor, clock floor, counter
/// TTL ms, with history, a new counter's TTL ms, since.
pub static JOIN: LazyLock<Script> = LazyLock::new(|| Script::new(&JOIN_SOURCE));

/// The source of [`JOIN`] (the Redis Cluster variant, in `fence.rs`,
/// fences the counter right after its first line that reads it).
pub static JOIN_SOURCE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "{SEARCH}{}",
        r#"local cur = redis.call('GET', KEYS[1])
local pos = cur
if not cur then
  pos = string.format('%d', math.max(tonumber(ARGV[1]), tonumber(ARGV[2])))
  redis.call('SET', KEYS[1], pos, 'PX', ARGV[5])
end
local oldest, newest, count, bytes = '0', '0', 0, 0
local since = tonumber(ARGV[6])
if ARGV[4] == '1' and cur and since < tonumber(cur) then
  local n = redis.call('LLEN', KEYS[2])
  if n > 0 then
    oldest = seq_text(redis.call('LINDEX', KEYS[2], 0))
    newest = seq_text(redis.call('LINDEX', KEYS[2], -1))
    if tonumber(oldest) <= since + 1 then
      local i = first_after(KEYS[2], n, since)
      count = n - i
      while i < n do
        local j = math.min(i + 31, n - 1)
        for _, m in ipairs(redis.call('LRANGE', KEYS[2], near(n, i), near(n, j))) do
          bytes = bytes + #m
        end
        i = j + 1
      end
    end
  end
end
return { cur or '0', pos, oldest, newest, count, bytes }
"#
    )
});

/// One page of a recovery: the oldest held messages with ARGV[1] < `seq`
/// <= ARGV[2], stopping before ARGV[3] bytes are passed (at least one
/// message), and how many of that range the list still holds (fewer than
/// the recovery expects: some were trimmed away). Reads one list, so one
/// slot on Redis Cluster; each `LRANGE` takes as many messages as the
/// budget left holds at the page's average size so far (one at first, at
/// most 64), so a page reads at most a few messages past its budget.
/// KEYS: history list. ARGV: after, until, byte budget.
/// Returns {held, {message...}}.
pub static PAGE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{SEARCH}{}",
        r#"local after, upto, budget = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local key = KEYS[1]
local n = redis.call('LLEN', key)
local first = first_after(key, n, after)
local stop = first_after(key, n, upto)
local out, bytes, i = {}, 0, first
while i < stop do
  local want = 1
  if bytes > 0 then want = math.floor((budget - bytes) * #out / bytes) end
  local j = math.min(i + math.max(want, 1), stop, i + 64) - 1
  for _, m in ipairs(redis.call('LRANGE', key, near(n, i), near(n, j))) do
    if #out > 0 and bytes + #m > budget then return { stop - first, out } end
    out[#out + 1] = m
    bytes = bytes + #m
  end
  i = j + 1
end
return { stop - first, out }
"#
    ))
});

/// A channel's last `seq` ('0': none) and its newest ARGV[1] held messages
/// with a `seq` above ARGV[2], oldest first, read together without
/// changing anything; with ARGV[1] 0 the counter alone (GraphQL's
/// `Channel.seq`). KEYS: seq counter, history list.
pub static HISTORY: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{SEARCH}{}",
        r#"local cur = redis.call('GET', KEYS[1]) or '0'
local want = tonumber(ARGV[1])
if want < 1 then return { cur, {} } end
local n = redis.call('LLEN', KEYS[2])
local first = math.max(first_after(KEYS[2], n, tonumber(ARGV[2])), n - want)
if first >= n then return { cur, {} } end
return { cur, redis.call('LRANGE', KEYS[2], near(n, first), -1) }
"#
    ))
});
