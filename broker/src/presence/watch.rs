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

use parking_lot::Mutex;

use super::{ChannelState, Pending, Presence, PresenceSink, Update};
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
        self.when_synced(channel, rule, move |this, channel| {
            this.add_watcher(channel, rule, key, sink)
        })
    }

    /// Runs `add` (a watcher's start) once this node's view of `channel`
    /// is whole: at once when it is (or the node is alone), after reading
    /// Redis's members when the view is new to this node.
    pub(super) fn when_synced(
        self: &Arc<Self>,
        channel: &str,
        rule: PresenceRule,
        add: impl FnOnce(&Arc<Presence>, &str) + Send + 'static,
    ) -> Pending<()> {
        if let Some(redis) = self.redis.clone().filter(|r| r.is_up()) {
            let unsynced = self.with_entry(channel, rule, |state, st| {
                st.synced.is_none().then(|| {
                    st.setting_up += 1;
                    SettingUp {
                        presence: self.clone(),
                        channel: channel.into(),
                        state: state.clone(),
                    }
                })
            });
            if let Some(setting_up) = unsynced {
                // A view new to this node starts from Redis's members.
                let this = self.clone();
                return Pending::Later(Box::pin(async move {
                    let s = &setting_up;
                    this.sync(&redis, &s.channel, &s.state, true).await;
                    add(&this, &s.channel);
                }));
            }
        }
        add(self, channel);
        Pending::Ready(())
    }

    /// The observer `key` stopped watching `channel`.
    pub fn unwatch(&self, channel: &str, key: &str) {
        let Some(state) = self.state(channel) else {
            return;
        };
        let mut st = state.lock();
        st.watchers.remove(key);
        self.forget_if_idle(channel, &state, &mut st);
    }

    fn add_watcher(
        &self,
        channel: &str,
        rule: PresenceRule,
        key: Arc<str>,
        sink: Arc<dyn PresenceSink>,
    ) {
        self.with_entry(channel, rule, |_, st| {
            // The members as the other watchers were last told: without
            // the joins, with the leaves, the open window will send.
            if st.roster.connections > u64::from(rule.join_leave_max_members) {
                let counts = st.roster.counts();
                let frame = frames::stats(None, channel, counts, false);
                sink.send(&frame, &Update::Counts(counts));
            } else {
                let listed = st.told();
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
        });
    }
}

impl ChannelState {
    /// The members as the channel's watchers were last told: without the
    /// joins, with the leaves, the open window will send; sorted.
    pub(crate) fn told(&self) -> Vec<Member> {
        let mut listed: Vec<Member> = self
            .roster
            .iter()
            .filter(|m| !self.window.joining(&m.conn_id))
            .chain(self.window.leaving().cloned())
            .collect();
        listed.sort();
        listed
    }
}

/// An observer's first read of Redis under way: the entry is kept until
/// it ends, however it ends (the caller may drop the future).
struct SettingUp {
    pub(super) presence: Arc<Presence>,
    pub(super) channel: Arc<str>,
    pub(super) state: Arc<Mutex<ChannelState>>,
}

impl Drop for SettingUp {
    fn drop(&mut self) {
        let mut st = self.state.lock();
        st.setting_up -= 1;
        self.presence
            .forget_if_idle(&self.channel, &self.state, &mut st);
    }
}
