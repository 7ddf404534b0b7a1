//! The `seq` fence on Redis Cluster. Replication to a replica is
//! asynchronous, so a promoted replica may lack the last increments of a
//! channel's counter while nodes have already delivered those `seq`s; a
//! publish there would reissue one, and every node that delivered it
//! would drop the new message as old. Nodes that follow the channel pass
//! the last `seq` they saw as a floor, but a node publishing on a channel
//! it has no subscribers of knows none.
//!
//! So the counter carries the id of the master that last wrote it (a
//! second key, `{prefix}own:{channel}`, in the same slot), and the publish
//! and join scripts run on the cluster first check it against the master
//! running them (`CLUSTER MYID`). A counter last written elsewhere (its
//! master failed over, or the slot was resharded here) is first raised to
//! the clock floor, the value a channel with no state starts from: it is
//! above every `seq` the old master issued as long as the channel averaged
//! under a million messages a second (the assumption `seq_floor` already
//! makes) and the nodes' clocks agree to within the failover time. Clients
//! see a jump in `seq`, which the contract allows (it promises a rising
//! `seq`, not a dense one); recovery with `since` still finds the held
//! messages before the jump.
//!
//! Costs one `GET`, one `SET` and `CLUSTER MYID` per publish, and one key
//! per channel.

use std::sync::LazyLock;

use redis::{Script, ScriptInvocation};

use super::{RedisBridge, reads, scripts};

/// The fence, run right after a script has read the counter (`cur`, false
/// when missing) from KEYS[1]; KEYS[3] is the owner key. `{clock}` and
/// `{ttl}` are the script's own arguments for the clock floor and the
/// counter's time to live.
const FENCE: &str = r#"
local me = redis.call('CLUSTER', 'MYID')
if cur and redis.call('GET', KEYS[3]) ~= me then
  local clock = tonumber({clock})
  if tonumber(cur) < clock then
    cur = string.format('%d', clock)
    redis.call('SET', KEYS[1], cur, 'PX', {ttl})
  end
end
redis.call('SET', KEYS[3], me, 'PX', {ttl})
"#;

/// The first line of both fenced scripts: the counter read.
const READ: &str = "local cur = redis.call('GET', KEYS[1])\n";

/// `source` with the fence after its counter read.
fn fenced(source: &str, clock: &str, ttl: &str) -> String {
    let fence = FENCE.replace("{clock}", clock).replace("{ttl}", ttl);
    let (head, rest) = source
        .split_once(READ)
        .expect("the script starts by reading the counter");
    format!("{head}{READ}{}{rest}", fence.trim_start())
}

/// [`scripts::PUBLISH`] on Redis Cluster: fenced, and sending with
/// `SPUBLISH` (the topic shares the channel's slot).
static PUBLISH: LazyLock<Script> = LazyLock::new(|| {
    let source = scripts::PUBLISH_SOURCE.replace("redis.call('PUBLISH'", "redis.call('SPUBLISH'");
    Script::new(&fenced(&source, "ARGV[7]", "ARGV[8]"))
});

/// [`reads::JOIN`] on Redis Cluster, fenced, so the position a joining
/// subscriber gets is already past the old master's `seq`s.
static JOIN: LazyLock<Script> = LazyLock::new(|| {
    // The owner key of a counter this join creates lives as short as
    // the counter (ARGV[5]).
    Script::new(&fenced(
        &reads::JOIN_SOURCE,
        "ARGV[2]",
        "(cur and ARGV[3] or ARGV[5])",
    ))
});

impl RedisBridge {
    /// The publish script for this mode, its keys given (`seq_key` is the
    /// channel's counter, which the caller already holds; on Redis Cluster
    /// the owner key too).
    pub(super) fn publish_invocation(
        &self,
        channel: &str,
        seq_key: &str,
    ) -> ScriptInvocation<'static> {
        self.counter_invocation(&scripts::PUBLISH, &PUBLISH, channel, seq_key)
    }

    /// The join script for this mode, its keys given.
    pub(super) fn join_invocation(
        &self,
        channel: &str,
        seq_key: &str,
    ) -> ScriptInvocation<'static> {
        self.counter_invocation(&reads::JOIN, &JOIN, channel, seq_key)
    }

    fn counter_invocation(
        &self,
        one: &'static Script,
        cluster: &'static Script,
        channel: &str,
        seq_key: &str,
    ) -> ScriptInvocation<'static> {
        let mut inv = if self.sharded { cluster } else { one }.key(seq_key);
        inv.key(self.key("hist", channel));
        if self.sharded {
            inv.key(self.key("own", channel));
        }
        inv
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fence_follows_the_counter_read_with_the_scripts_own_arguments() {
        let s = fenced(&reads::JOIN_SOURCE, "ARGV[2]", "ARGV[3]");
        let read = s.find(READ).unwrap();
        let fence = s.find("CLUSTER', 'MYID'").unwrap();
        let pos = s.find("local pos = cur").unwrap();
        assert!(read < fence && fence < pos, "{s}");
        assert!(s.contains("tonumber(ARGV[2])") && s.contains("'PX', ARGV[3])"));
        assert!(
            !s.contains("{clock}") && !s.contains("{ttl}"),
            "every placeholder replaced: {s}"
        );
    }
}
