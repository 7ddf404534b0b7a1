//! Presence (§13): who is subscribed to a channel of a presence namespace,
//! readable and priced, and the joins and leaves sent to its subscribers
//! coalesced into one `presence_diff` per channel per `diff_ms`, or counts
//! at most once a second above `join_leave_max_members`.
//!
//! The node keeps, per channel with a member or an observer here, the
//! channel's member set (on one node all of it; in a cluster this node's
//! view of all of it, kept from the other nodes' events and re-read from
//! Redis every lease tick, `cluster/`), who watches its diffs (members'
//! sockets, and GraphQL `presence` subscriptions, `watch.rs`) and the open
//! window. A channel's entry goes when its last member and observer here
//! leave (and no join or watch of it waits for Redis); one found in the
//! map but forgotten before it was locked is looked up again, so a join
//! never lands in an entry nobody can see.
//!
//! In a cluster a join registers the connection as joining at once and
//! asks Redis in a task of its own (`members.rs`): a leave before Redis
//! answers is seen however the caller ends, and the join then undoes
//! itself in Redis, so no member outlives its subscription.

mod cluster;
mod members;
mod roster;
mod status;
mod users;
mod watch;
mod window;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use dashmap::DashMap;
use parking_lot::Mutex;

pub use cluster::{RedisPresence, RedisSettings};
pub(crate) use roster::Roster;
pub use status::{STATUS_PREFIX, StatusSink, is_status};
pub use users::UserChanges;
pub use window::Window;

use crate::config::PresenceRule;
use crate::metrics::Metrics;
use crate::protocol::presence::{self as frames, Counts, Member};
use crate::webhook::Webhooks;

/// Counts go out at most this often above the threshold (§13).
const STATS_INTERVAL: Duration = Duration::from_secs(1);

/// What a closed window tells a channel's watchers.
#[derive(Debug, Clone, Copy)]
pub enum Update<'a> {
    /// The joins and leaves of the window, each sorted.
    Diff {
        joins: &'a [Member],
        leaves: &'a [Member],
    },
    /// Above `join_leave_max_members`: the counts instead.
    Counts(Counts),
}

/// Where a watcher's presence news goes: a socket's outbound queue, or a
/// GraphQL `presence` subscription (which renders `update` itself).
pub trait PresenceSink: Send + Sync {
    /// `frame` is the `/v1/ws` frame saying `update`, encoded once for
    /// every watcher of the window (not called on a `by_user` channel:
    /// [`PresenceSink::users`] is).
    fn send(&self, frame: &Bytes, update: &Update<'_>);

    /// A member's own watcher on a `by_user` channel, as it joins: the
    /// members as they are now (sorted by user then connection), and the
    /// users the open window touched, whose news the others have not had
    /// yet. Called under the channel's lock, before any window reaches
    /// it: the next window's news about those users is to be weighed
    /// against this list, not against what the others knew.
    fn listed(&self, _members: &[Member], _unsent: &[Arc<str>]) {}

    /// A window of a `by_user` channel (Pusher's presence) closed: who
    /// came (their first connection in) and who went (their last out),
    /// and who is in now.
    fn users(&self, _changes: &UserChanges<'_>) {}

    /// Whether the member joining with this sink watches the channel's
    /// news: not a status channel's members, whose news goes through the
    /// channel's index (`status.rs`).
    fn watches(&self) -> bool {
        true
    }
}

/// A subscribe that would take the channel past `max_members`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the channel has {max} members, its namespace's max_members")]
pub struct Full {
    pub max: u32,
}

/// The answer to a read.
#[derive(Debug, Clone, Default)]
pub struct Read {
    /// Sorted by user then connection id, at most the read's limit.
    pub members: Vec<Member>,
    pub counts: Counts,
    /// Only this node's own members: Redis is away (§13).
    pub partial: bool,
}

/// A future or an answer now (memory mode never waits).
pub enum Pending<T> {
    Ready(T),
    Later(std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>),
}

impl<T> Pending<T> {
    pub async fn wait(self) -> T {
        match self {
            Pending::Ready(v) => v,
            Pending::Later(f) => f.await,
        }
    }
}

/// One channel with members on this node. Bounded: one per channel this
/// node has a member of; watchers and `local` by this node's members.
pub(crate) struct ChannelState {
    pub(crate) rule: PresenceRule,
    /// Everyone, as far as this node knows (all of it on one node).
    pub(crate) roster: Roster,
    /// This node's own members: what a partial answer shows and what is
    /// registered again when Redis returns. Keyed by connection id.
    pub(crate) local: HashMap<Arc<str>, Member>,
    /// This node's connections per user (for `member.added`/`removed`).
    local_users: HashMap<Arc<str>, u32>,
    /// This node's connections whose join waits for Redis, by connection
    /// id: a leave meanwhile takes it out, and the join, when Redis
    /// answers, undoes itself there. Bounded by this node's connections'
    /// subscriptions (each a subscribe under its connection's cap).
    pub(crate) joining: HashMap<Arc<str>, Member>,
    /// Observers whose first read of Redis is under way: the entry stays
    /// meanwhile.
    setting_up: u32,
    /// Who gets this channel's diffs (when `join_leave`): its members'
    /// sockets, by connection id, and the observers ([`Presence::watch`])
    /// by their own key. Bounded by this node's members and the
    /// observers' connections' subscription caps.
    watchers: HashMap<Arc<str>, Arc<dyn PresenceSink>>,
    window: Window,
    /// A flush of the window is scheduled.
    scheduled: bool,
    last_stats: Option<Instant>,
    /// Taken out of the node's map: whoever found it there and locked it
    /// after must look again.
    gone: bool,
    /// Cluster: the channel's version in Redis this view was last brought
    /// in line with (`None`: never).
    pub(crate) synced: Option<i64>,
    /// Cluster: members this view lists without their info, learned while
    /// the channel was above `join_leave_max_members` (user, connection
    /// id); bounded by the roster.
    pub(crate) unknown_info: HashSet<(Arc<str>, Arc<str>)>,
    /// A status channel's watchers here by watched user (`status.rs`),
    /// also in `watchers`; `None` when none.
    status: Option<Arc<status::StatusIndex>>,
}

pub struct Presence {
    metrics: Arc<Metrics>,
    /// `member.added` / `member.removed` (§13).
    webhooks: std::sync::Weak<Webhooks>,
    channels: DashMap<Arc<str>, Arc<Mutex<ChannelState>>>,
    /// Redis, in cluster mode (`cluster.rs`).
    redis: Option<Arc<RedisPresence>>,
}

impl std::fmt::Debug for Presence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Presence({} channels)", self.channels.len())
    }
}

impl Presence {
    pub fn new(
        metrics: Arc<Metrics>,
        webhooks: std::sync::Weak<Webhooks>,
        redis: Option<Arc<RedisPresence>>,
    ) -> Arc<Presence> {
        let p = Arc::new(Presence {
            metrics,
            webhooks,
            channels: DashMap::new(),
            redis,
        });
        if let Some(r) = &p.redis {
            r.attach(Arc::downgrade(&p));
        }
        p
    }

    /// Starts the cluster work (events from other nodes, the lease
    /// refresh); nothing on one node.
    pub fn start(self: &Arc<Self>) {
        if let Some(r) = &self.redis {
            r.clone().start();
        }
    }

    /// Whether members are shared right now (always on one node; in a
    /// cluster while Redis answers).
    pub fn is_up(&self) -> bool {
        self.redis.as_ref().is_none_or(|r| r.is_up())
    }

    pub(crate) fn state(&self, channel: &str) -> Option<Arc<Mutex<ChannelState>>> {
        self.channels.get(channel).map(|c| c.clone())
    }

    pub(crate) fn channel_names(&self) -> Vec<Arc<str>> {
        self.channels.iter().map(|e| e.key().clone()).collect()
    }

    /// Channels this node keeps an entry for (members, observers, or a
    /// window still to send): what `tidegate_presence_members` does not
    /// show, so a test can see that nothing outlives its connections.
    pub fn tracked_channels(&self) -> usize {
        self.channels.len()
    }

    /// Runs `f` on the entry of `channel` (made if new, with the
    /// namespace's rule as it is now), locked. An entry forgotten between
    /// the map and the lock is looked up again, so nothing is added to an
    /// entry the node no longer sees.
    fn with_entry<R>(
        &self,
        channel: &str,
        rule: PresenceRule,
        f: impl FnOnce(&Arc<Mutex<ChannelState>>, &mut ChannelState) -> R,
    ) -> R {
        loop {
            let state = self
                .channels
                .entry(channel.into())
                .or_insert_with(|| Arc::new(Mutex::new(ChannelState::new(rule))))
                .clone();
            let mut st = state.lock();
            if st.gone {
                continue;
            }
            st.rule = rule;
            return f(&state, &mut st);
        }
    }

    /// Members another node added or removed (its events, or what a
    /// re-read from Redis found changed): into this node's view and
    /// window.
    pub(crate) fn remote(self: &Arc<Self>, channel: &str, joins: Vec<Member>, leaves: Vec<Member>) {
        let Some(state) = self.state(channel) else {
            return;
        };
        let mut st = state.lock();
        for m in joins {
            if m.info.is_some() && st.unknown_info.remove(&(m.user.clone(), m.conn_id.clone())) {
                st.roster.set_info(&m);
            }
            if st.roster.insert(&m) {
                self.changed(channel, &mut st, |w| w.join(m));
            }
        }
        for m in leaves {
            if st.local.contains_key(&m.conn_id) {
                continue;
            }
            st.unknown_info.remove(&(m.user.clone(), m.conn_id.clone()));
            if let Some(m) = st.roster.remove(&m.user, &m.conn_id) {
                self.changed(channel, &mut st, |w| w.leave(m));
            }
        }
    }

    /// Drops a channel's entry once nothing here needs it: no member, no
    /// observer, no join or watch waiting for Redis, no window to send.
    /// Marked gone under its lock, so a join that found it in the map
    /// looks again ([`Presence::with_entry`]).
    fn forget_if_idle(
        &self,
        channel: &str,
        state: &Arc<Mutex<ChannelState>>,
        st: &mut ChannelState,
    ) {
        if st.local.is_empty()
            && st.watchers.is_empty()
            && st.joining.is_empty()
            && st.setting_up == 0
            && !st.scheduled
            && !st.gone
        {
            st.gone = true;
            self.channels
                .remove_if(channel, |_, s| Arc::ptr_eq(s, state));
        }
    }

    /// Records a change in the window and schedules its flush: `diff_ms`
    /// after it opened, or, above the threshold, no sooner than a second
    /// after the last counts.
    fn changed(
        self: &Arc<Self>,
        channel: &str,
        st: &mut ChannelState,
        f: impl FnOnce(&mut Window),
    ) {
        f(&mut st.window);
        if !st.rule.join_leave || st.scheduled || st.watchers.is_empty() {
            if st.watchers.is_empty() {
                // Nobody here to tell: nothing to hold.
                st.window = Window::default();
            }
            return;
        }
        st.scheduled = true;
        let mut delay = Duration::from_millis(st.rule.diff_ms);
        if st.roster.connections > u64::from(st.rule.join_leave_max_members)
            && let Some(last) = st.last_stats
        {
            delay = delay.max((last + STATS_INTERVAL).saturating_duration_since(Instant::now()));
        }
        let this = self.clone();
        let channel: Arc<str> = channel.into();
        // A task of the runtime at hand (an actix worker's, or gRPC's for
        // a read that pruned a dead node's members).
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            this.flush(&channel);
        });
    }

    /// Closes the channel's window: a diff to every watcher, or counts
    /// above `join_leave_max_members`.
    fn flush(&self, channel: &str) {
        let Some(state) = self.state(channel) else {
            return;
        };
        let mut st = state.lock();
        st.scheduled = false;
        if st.rule.by_user {
            // Even a window that netted to nothing closes: a member that
            // joined inside it weighs its list against it.
            let (joins, leaves) = st.window.take();
            let changes = UserChanges::of(&st.roster, &joins, &leaves);
            if !changes.is_empty() {
                self.metrics.presence.diffs.inc_by(st.watchers.len() as u64);
            }
            for w in st.watchers.values() {
                w.users(&changes);
            }
        } else if !st.window.is_empty() {
            let (joins, leaves) = st.window.take();
            let (frame, update) =
                if st.roster.connections > u64::from(st.rule.join_leave_max_members) {
                    st.last_stats = Some(Instant::now());
                    self.metrics.presence.stats.inc_by(st.watchers.len() as u64);
                    let counts = st.roster.counts();
                    (
                        frames::stats(None, channel, counts, false),
                        Update::Counts(counts),
                    )
                } else {
                    self.metrics.presence.diffs.inc_by(st.watchers.len() as u64);
                    (
                        frames::diff(channel, &joins, &leaves),
                        Update::Diff {
                            joins: &joins,
                            leaves: &leaves,
                        },
                    )
                };
            for w in st.watchers.values() {
                w.send(&frame, &update);
            }
        }
        self.forget_if_idle(channel, &state, &mut st);
    }

    /// Who is in `channel`: at most `limit` members, sorted, with the
    /// counts (`limit` 0: the counts only, `presence_stats`). From Redis
    /// in a cluster, reading about `limit` members whatever the channel
    /// holds (this node's own members, marked partial, while it is away).
    pub fn read(self: &Arc<Self>, channel: &str, limit: usize) -> Pending<Read> {
        if let Some(redis) = self.redis.clone() {
            let this = self.clone();
            let channel: Arc<str> = channel.into();
            return Pending::Later(Box::pin(async move {
                match redis.read(&channel, limit).await {
                    Some(read) => read,
                    None => this.local_read(&channel, limit),
                }
            }));
        }
        let read = self.state(channel).map_or_else(Read::default, |s| {
            let st = s.lock();
            Read {
                members: st.roster.list(limit),
                counts: st.roster.counts(),
                partial: false,
            }
        });
        Pending::Ready(read)
    }

    /// This node's own members only (Redis away).
    fn local_read(&self, channel: &str, limit: usize) -> Read {
        let mut roster = Roster::default();
        if let Some(s) = self.state(channel) {
            for m in s.lock().local.values() {
                roster.insert(m);
            }
        }
        Read {
            members: roster.list(limit),
            counts: roster.counts(),
            partial: true,
        }
    }
}

impl ChannelState {
    fn new(rule: PresenceRule) -> ChannelState {
        ChannelState {
            rule,
            roster: Roster::default(),
            local: HashMap::new(),
            local_users: HashMap::new(),
            joining: HashMap::new(),
            setting_up: 0,
            watchers: HashMap::new(),
            window: Window::default(),
            scheduled: false,
            last_stats: None,
            gone: false,
            synced: None,
            unknown_info: HashSet::new(),
            status: None,
        }
    }
}
