//! Online status (Pusher's watchlists, §16): who watches which users come
//! online and go offline, on the presence machinery.
//!
//! A status channel is a presence channel under a rule that tells news by
//! user (`by_user`): every signed-in connection is one of its members, so
//! a user is online while one of its connections is in, cluster-wide,
//! and a killed node's users go offline within the lease as any dead
//! node's members do. Its news is coalesced per `diff_ms` window as a
//! Pusher presence channel's is: at most one change per user per window,
//! and a user who went and came back inside one window (a reload) is no
//! news at all.
//!
//! Members of a status channel do not watch it ([`PresenceSink::watches`]
//! is `false` for them): one [`StatusIndex`] per channel and node does,
//! the channel's one watcher here, and hands each window's news only to
//! the watchers of the users it names (a map by watched user), so a
//! window costs its news times their watchers, not the node's signed-in
//! connections. A status channel's members are nobody's subscription:
//! no member webhooks, no `tidegate_presence_members`.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;

use super::{ChannelState, Pending, Presence, PresenceSink, Update, UserChanges};
use crate::config::PresenceRule;

/// The prefix of every status channel's name: `|` keeps it out of §2's
/// alphabet, so no client can subscribe one.
pub const STATUS_PREFIX: &str = "status|";

/// The key the index watches its channel under (never a connection id,
/// which has no `|`).
const INDEX_KEY: &str = "status|index";

/// Whether `channel` is a status channel.
pub fn is_status(channel: &str) -> bool {
    channel.starts_with(STATUS_PREFIX)
}

/// Where one watcher's news goes (a Pusher connection's outbound queue).
/// Called under the channel's lock: it must only queue.
pub trait StatusSink: Send + Sync {
    /// Users of its watchlist who came online and went offline (each
    /// sorted; either may be empty, never both).
    fn changed(&self, online: &[Arc<str>], offline: &[Arc<str>]);
}

/// One user's watchers: watcher key → its sink.
type Watchers = HashMap<Arc<str>, Arc<dyn StatusSink>>;

/// What one watcher is told of a window: its sink, who came online and
/// who went offline.
type Told<'a> = (&'a Arc<dyn StatusSink>, Vec<Arc<str>>, Vec<Arc<str>>);

/// The watchers of one status channel on this node, by the users they
/// watch. Bounded by this node's watching connections times their
/// watchlists (each capped by its front).
#[derive(Default)]
pub(crate) struct StatusIndex {
    /// Watched user → its watchers.
    by_user: Mutex<HashMap<Arc<str>, Watchers>>,
}

impl PresenceSink for StatusIndex {
    fn send(&self, _frame: &Bytes, _update: &Update<'_>) {}

    /// A window closed: each watcher of a user it names is told once,
    /// with all of the window's news about its watchlist.
    fn users(&self, changes: &UserChanges<'_>) {
        let by_user = self.by_user.lock();
        // watcher key → (its sink, online, offline); bounded by the
        // watchers of the window's users.
        let mut told: HashMap<&Arc<str>, Told<'_>> = HashMap::new();
        for (members, online) in [(&changes.added, true), (&changes.removed, false)] {
            for m in members {
                for (key, sink) in by_user.get(&m.user).into_iter().flatten() {
                    let e = told.entry(key).or_insert_with(|| (sink, vec![], vec![]));
                    if online { &mut e.1 } else { &mut e.2 }.push(m.user.clone());
                }
            }
        }
        for (sink, online, offline) in told.into_values() {
            sink.changed(&online, &offline);
        }
    }
}

impl ChannelState {
    /// Whether `user` is online as this channel's watchers were last told:
    /// in, less the joins, plus the leaves, the open window will send.
    fn told_online(&self, user: &str) -> bool {
        let listed = self
            .roster
            .members
            .get(user)
            .is_some_and(|conns| conns.keys().any(|c| !self.window.joining(c)));
        listed || self.window.leaving().any(|m| &*m.user == user)
    }
}

impl Presence {
    /// Starts `sink` watching `users` on the status channel `channel`
    /// under `key` (unique on the node): it is told first which of them
    /// are online and which are not, then every window's news about them.
    /// Both happen under the channel's lock, so nothing is told twice or
    /// lost between the two. In a cluster a view new to this node is read
    /// from Redis first.
    pub fn watch_status(
        self: &Arc<Self>,
        channel: &str,
        rule: PresenceRule,
        key: Arc<str>,
        users: Vec<Arc<str>>,
        sink: Arc<dyn StatusSink>,
    ) -> Pending<()> {
        self.when_synced(channel, rule, move |this, channel| {
            this.add_status_watcher(channel, rule, key, &users, sink)
        })
    }

    fn add_status_watcher(
        &self,
        channel: &str,
        rule: PresenceRule,
        key: Arc<str>,
        users: &[Arc<str>],
        sink: Arc<dyn StatusSink>,
    ) {
        if users.is_empty() {
            return;
        }
        self.with_entry(channel, rule, |_, st| {
            let (online, offline): (Vec<Arc<str>>, Vec<Arc<str>>) =
                users.iter().cloned().partition(|u| st.told_online(u));
            sink.changed(&online, &offline);
            let index = st.status.get_or_insert_with(Default::default).clone();
            let mut by_user = index.by_user.lock();
            for u in users {
                by_user
                    .entry(u.clone())
                    .or_default()
                    .insert(key.clone(), sink.clone());
            }
            drop(by_user);
            st.watchers.insert(INDEX_KEY.into(), index);
        });
    }

    /// The watcher `key` of `users` on `channel` stopped (its connection
    /// closed): the index forgets it, and the channel's entry goes once
    /// nothing here needs it.
    pub fn unwatch_status(&self, channel: &str, key: &str, users: &[Arc<str>]) {
        let Some(state) = self.state(channel) else {
            return;
        };
        let mut st = state.lock();
        if let Some(index) = st.status.clone() {
            let mut by_user = index.by_user.lock();
            for u in users {
                if let Some(watchers) = by_user.get_mut(u) {
                    watchers.remove(key);
                    if watchers.is_empty() {
                        by_user.remove(u);
                    }
                }
            }
            if by_user.is_empty() {
                drop(by_user);
                st.status = None;
                st.watchers.remove(INDEX_KEY);
            }
        }
        self.forget_if_idle(channel, &state, &mut st);
    }
}
