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
//! leave.

mod cluster;
mod roster;
mod watch;
mod window;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use dashmap::DashMap;
use parking_lot::Mutex;

pub use cluster::RedisPresence;
pub(crate) use roster::Roster;
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
    /// every watcher of the window.
    fn send(&self, frame: &Bytes, update: &Update<'_>);
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
    /// Who gets this channel's diffs (when `join_leave`): its members'
    /// sockets, by connection id, and the observers ([`Presence::watch`])
    /// by their own key. Bounded by this node's members and the
    /// observers' connections' subscription caps.
    watchers: HashMap<Arc<str>, Arc<dyn PresenceSink>>,
    window: Window,
    /// A flush of the window is scheduled.
    scheduled: bool,
    last_stats: Option<Instant>,
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

    /// A subscribed connection joins `channel` (refused past
    /// `max_members`, counted cluster-wide in a cluster). `watcher` gets
    /// the channel's diffs when the namespace has `join_leave`.
    pub fn join(
        self: &Arc<Self>,
        channel: &str,
        rule: PresenceRule,
        member: Member,
        watcher: Arc<dyn PresenceSink>,
    ) -> Pending<Result<(), Full>> {
        if let Some(redis) = self.redis.clone().filter(|r| r.is_up()) {
            let this = self.clone();
            let channel: Arc<str> = channel.into();
            return Pending::Later(Box::pin(async move {
                // A channel new to this node starts from Redis's members,
                // silently (they are not news to anyone here).
                let seed = match this.state(&channel) {
                    None => redis.read(&channel).await,
                    Some(_) => None,
                };
                let known = redis.join(&channel, &member, rule.max_members).await;
                this.add(&channel, rule, member, watcher, known, seed)
            }));
        }
        Pending::Ready(self.add(channel, rule, member, watcher, None, None))
    }

    /// Adds a member here; `known` is what Redis answered (`None`: check
    /// against this node's view).
    fn add(
        self: &Arc<Self>,
        channel: &str,
        rule: PresenceRule,
        member: Member,
        watcher: Arc<dyn PresenceSink>,
        known: Option<Result<(), Full>>,
        seed: Option<Roster>,
    ) -> Result<(), Full> {
        let state = self.entry(channel, rule);
        let mut st = state.lock();
        if let Some(seed) = seed
            && st.local.is_empty()
            && st.watchers.is_empty()
        {
            for m in seed.iter().filter(|m| m.conn_id != member.conn_id) {
                st.roster.insert(&m);
            }
        }
        match known {
            Some(Err(full)) => return Err(full),
            Some(Ok(())) => {}
            None if st.roster.connections >= u64::from(rule.max_members) => {
                return Err(Full {
                    max: rule.max_members,
                });
            }
            None => {}
        }
        if st
            .local
            .insert(member.conn_id.clone(), member.clone())
            .is_none()
        {
            self.metrics.presence.members.inc();
            let n = st.local_users.entry(member.user.clone()).or_default();
            *n += 1;
            if *n == 1
                && let Some(w) = self.webhooks.upgrade()
            {
                w.member_changed(channel, &member.user, true);
            }
        }
        if rule.join_leave {
            st.watchers.insert(member.conn_id.clone(), watcher);
        }
        if st.roster.insert(&member) {
            self.changed(channel, &mut st, |w| w.join(member));
        }
        Ok(())
    }

    /// The channel's state, made if new, with the namespace's rule as it
    /// is now.
    fn entry(&self, channel: &str, rule: PresenceRule) -> Arc<Mutex<ChannelState>> {
        let state = self
            .channels
            .entry(channel.into())
            .or_insert_with(|| {
                Arc::new(Mutex::new(ChannelState {
                    rule,
                    roster: Roster::default(),
                    local: HashMap::new(),
                    local_users: HashMap::new(),
                    watchers: HashMap::new(),
                    window: Window::default(),
                    scheduled: false,
                    last_stats: None,
                }))
            })
            .clone();
        state.lock().rule = rule;
        state
    }

    /// A connection of this node left `channel` (unsubscribed or closed).
    pub fn leave(self: &Arc<Self>, channel: &str, user: &str, conn: &str) {
        let Some(state) = self.state(channel) else {
            return;
        };
        let mut st = state.lock();
        let Some(gone) = st.local.remove(conn) else {
            return;
        };
        self.metrics.presence.members.dec();
        if let Some(n) = st.local_users.get_mut(&gone.user) {
            *n -= 1;
            if *n == 0 {
                st.local_users.remove(&gone.user);
                if let Some(w) = self.webhooks.upgrade() {
                    w.member_changed(channel, &gone.user, false);
                }
            }
        }
        st.watchers.remove(conn);
        if let Some(m) = st.roster.remove(user, conn) {
            if let Some(r) = &self.redis {
                r.leave(channel, &m);
            }
            self.changed(channel, &mut st, |w| w.leave(m));
        }
        self.forget_if_idle(channel, &st);
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
            if st.roster.insert(&m) {
                self.changed(channel, &mut st, |w| w.join(m));
            }
        }
        for m in leaves {
            if st.local.contains_key(&m.conn_id) {
                continue;
            }
            if let Some(m) = st.roster.remove(&m.user, &m.conn_id) {
                self.changed(channel, &mut st, |w| w.leave(m));
            }
        }
    }

    /// Drops a channel's entry once nothing here needs it.
    fn forget_if_idle(&self, channel: &str, st: &ChannelState) {
        if st.local.is_empty() && st.watchers.is_empty() && !st.scheduled {
            self.channels.remove(channel);
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
        actix_rt::spawn(async move {
            actix_rt::time::sleep(delay).await;
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
        if !st.window.is_empty() {
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
        self.forget_if_idle(channel, &st);
    }

    /// Who is in `channel`: at most `limit` members, sorted, with the
    /// counts. From Redis in a cluster (this node's own members, marked
    /// partial, while it is away).
    pub fn read(self: &Arc<Self>, channel: &str, limit: usize) -> Pending<Read> {
        if let Some(redis) = self.redis.clone() {
            let this = self.clone();
            let channel: Arc<str> = channel.into();
            return Pending::Later(Box::pin(async move {
                match redis.read(&channel).await {
                    Some(roster) => Read {
                        members: roster.list(limit),
                        counts: roster.counts(),
                        partial: false,
                    },
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
