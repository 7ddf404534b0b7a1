//! What presence keeps in Redis and tells the other nodes: the scripts
//! (each touches the keys of one channel only, all under the channel's
//! `{<channel>}` hash tag, so they run unchanged on Redis Cluster), the
//! member as stored, and the join/leave event.

use serde::{Deserialize, Serialize};

use crate::protocol::presence::Member;

/// Adds a member unless the channel is full: KEYS[1] the node set,
/// KEYS[2] this node's hash; ARGV: node, connection id, `[user, info]`,
/// max_members, lease ms, events topic, event, hash key prefix. The
/// other nodes' hashes it counts (`ARGV[8] .. node`) carry the same hash
/// tag as KEYS[1], so on Redis Cluster they live in the script's slot.
pub(super) const JOIN: &str = r"
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
pub(super) const LEAVE: &str = r"
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('PUBLISH', ARGV[2], ARGV[3])
return 1
";

/// Every live member: KEYS[1] the node set; ARGV[1] the hash key prefix
/// (same hash tag). Answers `[conn, value, ...]` and forgets nodes whose
/// hash expired.
pub(super) const READ: &str = r"
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
pub(super) struct Event {
    /// The sending node (its own events are already applied).
    pub n: String,
    pub c: String,
    #[serde(default)]
    pub j: Vec<Wire>,
    #[serde(default)]
    pub l: Vec<Wire>,
}

/// A member as Redis and the events hold it: `[user, conn, info]`.
#[derive(Serialize, Deserialize)]
pub(super) struct Wire(String, String, Option<String>);

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
