//! The channel registry: who is subscribed to what, each channel's `seq`
//! and bounded history, and local fan-out.
//!
//! Fan-out happens under the channel's own lock, which is what keeps
//! delivery in `seq` order per channel without a central actor hop. The
//! message is encoded once ([`wire::message`]); every subscriber gets a
//! clone of the same [`Bytes`], written straight into its outbound queue
//! ([`Sink`]; no actor mailbox per delivery). Before queueing, the hub
//! reads the subscriber's [`OutboundGauge`] and drops the message there if
//! the socket is over its high-water mark, so a slow consumer's backlog
//! stays bounded by the mark plus one message.

mod budget;
mod channel;
mod conflation;
mod gauge;
mod reads;
mod recovery;
mod sink;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use dashmap::DashMap;
use parking_lot::Mutex;

use crate::config::DeliveryClasses;
use crate::metrics::Metrics;
use crate::protocol::wire;

use channel::{Channel, ChannelState, Held, Subscribers, recover};
pub use conflation::conflation_key;
pub use gauge::{OutboundGauge, Reserve};
pub use recovery::{Page, PageRead, Pages, Recovery};
pub use sink::{DirectSink, RenderSink, Renders, Sink};

/// One subscription as the hub sees it (a socket or a gRPC stream).
#[derive(Clone)]
pub struct Subscriber {
    pub conn: u64,
    pub sink: Sink,
    pub gauge: Arc<OutboundGauge>,
}

impl std::fmt::Debug for Subscriber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Subscriber({})", self.conn)
    }
}

/// What a subscribe found: whether the history covers everything after
/// `since`, and the recovered history to send after the ack (whole in
/// memory mode, in pages from a cluster's history: [`Recovery`]).
#[derive(Debug, Default)]
pub struct Joined {
    pub recovered: Option<bool>,
    pub backlog: Recovery,
    /// The channel's last `seq` when the subscription went live (in a
    /// cluster, the cluster's): live messages are exactly those above it.
    pub last_seq: u64,
}

impl Joined {
    /// The subscription's position, what the subscribe ack's `seq` says
    /// (§11): the last `seq` the recovery covers, and at least the one the
    /// subscription went live at. Every transport's subscribe answers with
    /// this, so a client can resume with `since` from it.
    pub fn position(&self) -> u64 {
        self.backlog
            .last()
            .map_or(self.last_seq, |seq| self.last_seq.max(seq))
    }
}

#[derive(Debug, Clone, Copy)]
pub struct HistoryLimits {
    pub size: usize,
    pub ttl: Duration,
    /// The node-wide budget of held bytes (`hub/budget.rs`).
    pub max_bytes: usize,
}

/// See [`Hub::on_occupancy`].
pub type OccupancyHook = Box<dyn Fn(&Arc<str>, bool) + Send + Sync>;

/// The node's channel registry.
pub struct Hub {
    channels: DashMap<Arc<str>, Arc<Channel>>,
    /// Told, under the channel's lock, when a channel gets its first local
    /// subscriber (`true`) or loses its last (`false`): webhooks' occupancy.
    occupancy: std::sync::OnceLock<OccupancyHook>,
    history: parking_lot::RwLock<HistoryLimits>,
    /// Every channel's history against `history.max_bytes`.
    budget: budget::Budget,
    delivery: parking_lot::RwLock<Arc<DeliveryClasses>>,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Hub({} channels)", self.channels.len())
    }
}

/// The first `seq` of a channel the node has no state for: derived from
/// the wall clock (µs-scale) so a channel forgotten and re-created (idle
/// eviction, node restart, an emptied Redis) never reuses a `seq` a client
/// already saw, as long as it averaged under a million messages a second.
/// Stays below 2^53, so JavaScript clients read it exactly.
pub fn seq_floor() -> u64 {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    ms.saturating_mul(1000)
}

impl Hub {
    pub fn new(history: HistoryLimits, metrics: Arc<Metrics>) -> Hub {
        Hub {
            channels: DashMap::new(),
            occupancy: std::sync::OnceLock::new(),
            history: parking_lot::RwLock::new(history),
            budget: budget::Budget::default(),
            delivery: parking_lot::RwLock::default(),
            metrics,
        }
    }

    /// Installs the occupancy hook (once; later calls are ignored). It runs
    /// under the channel's lock, so it must only hand the transition on.
    pub fn on_occupancy(&self, hook: OccupancyHook) {
        let _ = self.occupancy.set(hook);
    }

    fn occupancy_changed(&self, channel: &Arc<str>, occupied: bool) {
        if let Some(hook) = self.occupancy.get() {
            hook(channel, occupied);
        }
    }

    /// Sets which namespaces conflate (at start and on reload); channels
    /// the node already knows switch at their next message.
    pub fn set_delivery(&self, classes: DeliveryClasses) {
        let classes = Arc::new(classes);
        *self.delivery.write() = classes.clone();
        for ch in self.channels.iter() {
            ch.state.lock().conflate = classes.conflation(&ch.name);
        }
    }

    pub fn set_history_limits(&self, limits: HistoryLimits) {
        *self.history.write() = limits;
    }

    fn channel(&self, name: &str) -> Arc<Channel> {
        if let Some(ch) = self.channels.get(name) {
            return ch.clone();
        }
        // One allocation of the name, shared by the map's key and the
        // channel (a channel of one subscriber paid for it twice).
        let key: Arc<str> = Arc::from(name);
        self.channels
            .entry(key.clone())
            .or_insert_with(|| {
                Arc::new(Channel {
                    name: key,
                    state: Mutex::new(ChannelState {
                        seq: 0,
                        subscribers: Subscribers::default(),
                        history: VecDeque::new(),
                        conflate: self.delivery.read().conflation(name),
                        dead: false,
                    }),
                })
            })
            .clone()
    }

    /// Runs `f` on a live channel's state, retrying if the sweeper removed
    /// the channel between lookup and lock.
    fn with_channel<R>(
        &self,
        name: &str,
        mut f: impl FnMut(&Channel, &mut ChannelState) -> R,
    ) -> R {
        loop {
            let ch = self.channel(name);
            let mut st = ch.state.lock();
            if !st.dead {
                return f(&ch, &mut st);
            }
        }
    }

    /// Assigns the next `seq`, records the message in history and fans it
    /// out to this node's subscribers (single-node mode, and a cluster node
    /// while Redis is away). A channel with no known `seq` starts from
    /// [`seq_floor`].
    pub fn publish(&self, channel: &str, data: &str) -> u64 {
        let now = Instant::now();
        let limits = *self.history.read();
        let seq = self.with_channel(channel, |ch, st| {
            st.seq = if st.seq == 0 { seq_floor() } else { st.seq } + 1;
            let seq = st.seq;
            let frame = wire::message(&ch.name, seq, data);
            self.record_and_fan_out(ch, st, seq, frame, now, limits);
            seq
        });
        self.enforce_history(limits);
        seq
    }

    /// Fans out a message whose `seq` the cluster assigned (the frame was
    /// built from what Redis delivered). Older or repeated `seq`s are
    /// ignored, so each message goes out once and in order. Returns whether
    /// it was delivered.
    pub fn deliver(&self, channel: &str, seq: u64, frame: Bytes) -> bool {
        let now = Instant::now();
        let limits = *self.history.read();
        let delivered = self.with_channel(channel, |ch, st| {
            if seq <= st.seq {
                return false;
            }
            st.seq = seq;
            self.record_and_fan_out(ch, st, seq, frame.clone(), now, limits);
            true
        });
        self.enforce_history(limits);
        delivered
    }

    /// This node's last known `seq` per channel (to raise the cluster's
    /// counters above them when Redis comes back).
    pub fn seqs(&self) -> Vec<(Arc<str>, u64)> {
        self.channels
            .iter()
            .map(|e| (e.key().clone(), e.value().state.lock().seq))
            .filter(|(_, seq)| *seq > 0)
            .collect()
    }

    fn record_and_fan_out(
        &self,
        ch: &Channel,
        st: &mut ChannelState,
        seq: u64,
        frame: Bytes,
        now: Instant,
        limits: HistoryLimits,
    ) {
        if limits.size > 0 {
            self.budget.recorded(&ch.name, seq, frame.len());
            st.history.push_back(Held {
                seq,
                frame: frame.clone(),
                at: now,
            });
            self.budget.trim(&mut st.history, limits, now);
        }
        if let Some(rule) = &st.conflate {
            let key = conflation_key(rule, &frame);
            self.conflating_fan_out(ch, st, seq, &frame, &key);
            return;
        }
        let mut delivered = 0u64;
        let mut dropped = 0u64;
        let mut renders = Renders::default();
        for sub in st.subscribers.iter() {
            let reserved = sub
                .sink
                .deliver(&sub.gauge, &ch.name, seq, &frame, None, &mut renders);
            match reserved {
                None => {}
                Some(Reserve::Queued) => delivered += 1,
                Some(Reserve::FirstDrop | Reserve::Dropped) => dropped += 1,
            }
        }
        self.metrics.messages_out.inc_by(delivered);
        if delivered + dropped > 0 {
            self.metrics
                .delivery_duration
                .observe(now.elapsed().as_secs_f64());
        }
        if dropped > 0 {
            self.metrics
                .reject_n(crate::metrics::Layer::Outbound, "slow_consumer", dropped);
        }
    }

    /// Adds a subscriber. With `since`, also returns the held messages
    /// after it, and whether they are complete. Taken under the channel
    /// lock, so nothing published concurrently is either missed or sent
    /// twice: it is in the backlog or it arrives live, never both.
    ///
    /// This node is the channel's authority here (single-node mode, or a
    /// cluster node serving alone), so a channel with no `seq` yet gets its
    /// starting point now ([`seq_floor`], as its first publish would): the
    /// ack can then tell a position even before the first message, and
    /// `since` from it recovers everything published after it.
    pub fn subscribe(&self, channel: &str, sub: Subscriber, since: Option<u64>) -> Joined {
        self.join(channel, sub, since, true)
    }

    /// Adds a subscriber for a cluster that owns `seq`: the node's view of
    /// the channel is left as it is (the cluster's counter is the
    /// position; see the Redis bridge).
    pub fn subscribe_follower(&self, channel: &str, sub: Subscriber) -> Joined {
        self.join(channel, sub, None, false)
    }

    fn join(&self, channel: &str, sub: Subscriber, since: Option<u64>, authority: bool) -> Joined {
        let now = Instant::now();
        let limits = *self.history.read();
        self.with_channel(channel, |ch, st| {
            self.budget.trim(&mut st.history, limits, now);
            let was_empty = st.subscribers.is_empty();
            st.subscribers.insert(sub.clone());
            if was_empty {
                self.occupancy_changed(&ch.name, true);
            }
            let mut joined = Joined::default();
            if let Some(since) = since {
                let mut backlog = Vec::new();
                joined.recovered = Some(recover(st, since, &mut backlog));
                joined.backlog = backlog.into();
            }
            if authority && st.seq == 0 {
                st.seq = seq_floor();
            }
            joined.last_seq = st.seq;
            joined
        })
    }

    /// Whether socket `conn` is subscribed to `channel` on this node.
    pub fn is_subscribed(&self, channel: &str, conn: u64) -> bool {
        self.channels
            .get(channel)
            .is_some_and(|c| c.state.lock().subscribers.contains(conn))
    }

    /// This node's last known `seq` for `channel` (0: none).
    pub fn seq(&self, channel: &str) -> u64 {
        self.channels.get(channel).map_or(0, |c| c.state.lock().seq)
    }

    /// Recovery after `since` from this node's own history (a cluster node
    /// while Redis is away).
    pub fn recover(&self, channel: &str, since: u64) -> (bool, Vec<(u64, Bytes)>) {
        let Some(ch) = self.channels.get(channel).map(|c| c.clone()) else {
            return (false, Vec::new());
        };
        let mut st = ch.state.lock();
        self.budget
            .trim(&mut st.history, *self.history.read(), Instant::now());
        let mut out = Vec::new();
        let complete = recover(&mut st, since, &mut out);
        (complete, out)
    }

    pub fn unsubscribe(&self, channel: &str, conn: u64) {
        if let Some(ch) = self.channels.get(channel).map(|c| c.clone()) {
            let mut st = ch.state.lock();
            let was_empty = st.subscribers.is_empty();
            st.subscribers.remove(conn);
            if !was_empty && st.subscribers.is_empty() {
                self.occupancy_changed(&ch.name, false);
            }
        }
    }

    /// Whether any local socket is subscribed to `channel`.
    pub fn has_subscribers(&self, channel: &str) -> bool {
        self.channels
            .get(channel)
            .is_some_and(|c| !c.state.lock().subscribers.is_empty())
    }

    /// Forgets channels with no subscribers and no unexpired history.
    pub fn sweep(&self) {
        let now = Instant::now();
        let limits = *self.history.read();
        self.channels.retain(|_, ch| {
            let mut st = ch.state.lock();
            self.budget.trim(&mut st.history, limits, now);
            if st.subscribers.is_empty() && st.history.is_empty() {
                st.dead = true;
                false
            } else {
                true
            }
        });
        self.enforce_history(limits);
    }

    /// Evicts the oldest history past `history.max_bytes` (outside any
    /// channel lock) and shows what is held.
    fn enforce_history(&self, limits: HistoryLimits) {
        self.budget.enforce(limits.max_bytes, &self.channels);
        self.metrics.history_bytes.set(self.budget.bytes() as i64);
    }

    pub fn channel_count(&self) -> usize {
        self.channels.len()
    }

    /// This node's subscribers of `channel` (sockets and gRPC streams), for
    /// pricing a publish by its fan-out.
    pub fn subscriber_count(&self, channel: &str) -> u64 {
        self.channels
            .get(channel)
            .map_or(0, |c| c.state.lock().subscribers.len() as u64)
    }

    /// Every channel with subscribers on this node, and how many.
    pub fn subscriber_counts(&self) -> Vec<(Arc<str>, u64)> {
        self.channels
            .iter()
            .map(|e| {
                (
                    e.key().clone(),
                    e.value().state.lock().subscribers.len() as u64,
                )
            })
            .filter(|(_, n)| *n > 0)
            .collect()
    }
}

#[cfg(test)]
mod tests;
