//! Observers: who watches a channel's diffs without being one of its
//! members (a GraphQL `subscription { presence }`, §12). An observer is
//! one more watcher of the channel's window, so it gets the diffs the
//! members' sockets get, coalesced alike per `diff_ms`, or the counts
//! above `join_leave_max_members`. First it is told the members as they
//! stand (as the joins of one diff, or the counts), so its list is whole
//! from the start. In a cluster a channel watched here is followed like
//! one with members here: other nodes' events, and the re-read every
//! lease tick that turns a dead node's members into leaves.

use std::sync::Arc;

use super::{Pending, Presence, PresenceSink, Roster, Update};
use crate::config::PresenceRule;
use crate::protocol::presence::{self as frames, Member};

impl Presence {
    /// Starts `sink` watching `channel` under `key` (unique on the node,
    /// and never a connection id: [`Presence::unwatch`] takes the same).
    pub fn watch(
        self: &Arc<Self>,
        channel: &str,
        rule: PresenceRule,
        key: Arc<str>,
        sink: Arc<dyn PresenceSink>,
    ) -> Pending<()> {
        if let Some(redis) = self.redis.clone().filter(|r| r.is_up())
            && self.state(channel).is_none()
        {
            // A channel new to this node starts from Redis's members.
            let this = self.clone();
            let channel: Arc<str> = channel.into();
            return Pending::Later(Box::pin(async move {
                let seed = redis.read(&channel).await;
                this.add_watcher(&channel, rule, key, sink, seed);
            }));
        }
        self.add_watcher(channel, rule, key, sink, None);
        Pending::Ready(())
    }

    /// The observer `key` stopped watching `channel`.
    pub fn unwatch(&self, channel: &str, key: &str) {
        let Some(state) = self.state(channel) else {
            return;
        };
        let mut st = state.lock();
        st.watchers.remove(key);
        self.forget_if_idle(channel, &st);
    }

    fn add_watcher(
        &self,
        channel: &str,
        rule: PresenceRule,
        key: Arc<str>,
        sink: Arc<dyn PresenceSink>,
        seed: Option<Roster>,
    ) {
        let state = self.entry(channel, rule);
        let mut st = state.lock();
        if let Some(seed) = seed
            && st.local.is_empty()
            && st.watchers.is_empty()
        {
            for m in seed.iter() {
                st.roster.insert(&m);
            }
        }
        // The members as the other watchers were last told: without the
        // joins, with the leaves, the open window will send.
        if st.roster.connections > u64::from(rule.join_leave_max_members) {
            let counts = st.roster.counts();
            let frame = frames::stats(None, channel, counts, false);
            sink.send(&frame, &Update::Counts(counts));
        } else {
            let mut listed: Vec<Member> = st
                .roster
                .iter()
                .filter(|m| !st.window.joining(&m.conn_id))
                .chain(st.window.leaving().cloned())
                .collect();
            listed.sort();
            let frame = frames::diff(channel, &listed, &[]);
            sink.send(
                &frame,
                &Update::Diff {
                    joins: &listed,
                    leaves: &[],
                },
            );
        }
        st.watchers.insert(key, sink);
    }
}
