//! The Redis bridge: one broker across many nodes.
//!
//! - **Fan-out**: a publish is one script call that assigns the channel's
//!   cluster-wide `seq`, appends to its bounded history and publishes the
//!   message; every node subscribed to the channel (including the
//!   publisher's) delivers it from its Redis subscription, which keeps
//!   `seq` order. A node subscribes only to channels it has subscribers for
//!   (`subscriber.rs`), in batches.
//! - **Shared limits**: account budgets, the per-identity handshake bucket
//!   and API-key buckets are one script call each (`scripts.rs`); account
//!   charges are sampled by the sockets. Connection caps are per-node counts
//!   summed over nodes holding a live lease.
//! - **Fan-out counts**: nodes exchange their large channels' subscriber
//!   counts every second (`counts.rs`), so a publish is priced by its
//!   cluster-wide fan-out from memory.
//! - **Outage**: while Redis is unreachable the node serves alone: local
//!   fan-out and history, and its share (1 / live nodes last seen) of every
//!   cluster-wide limit. Nothing is queued toward Redis beyond
//!   `cluster.max_pending` commands in flight. On reconnection the node
//!   raises every channel counter above the `seq`s it issued, re-asserts its
//!   connection counts and resubscribes, and only then reports itself up.
//! - **Reads by `seq`**: a channel's `seq`, its newest messages and a
//!   join's recovery read about what they return, never the whole list
//!   (`reads.rs`).
//!
//! # Every key expires
//!
//! Each key's writes renew its TTL, which is chosen so that nothing a key
//! holds is lost while it still matters:
//!
//! - `seq:` (a channel's counter): a publish gives it 24 h (at least
//!   `history.ttl_ms`), a join that creates it `history.ttl_ms`. It always
//!   outlives the channel's `hist:` list, so a counter that expired had no
//!   history left to recover, and the channel starts again from the clock
//!   floor (ms × 1000), above every `seq` it issued: `seq` never goes back.
//!   `own:` (Redis Cluster, `fence.rs`) lives as its counter.
//! - `hist:`: `history.ttl_ms` from the last publish (each message also
//!   leaves after it, `history.rs`); `hidx:`/`hbytes:` the same from the last
//!   flush, so no entry in them is older than their key.
//! - `key:`, `hs:`, `acct:` (buckets): the time to refill after the last
//!   charge (plus the credit horizon for accounts); a bucket that expired
//!   was full, as a missing one reads.
//! - `conns:`: three leases after the last reserve or renewal of a node
//!   counting in it (`lease.rs`).
//! - `nodes` (leases): with its latest lease, past which no member is live;
//!   `subs:` (`counts.rs`): a lease, renewed every second.
//! - `admin:{ops}:bans`: a minute after its latest ban; the overview's
//!   `admin:{ops}:nodes` and `alive`: a snapshot's ttl (`admin.rs`).
//!
//! The webhooks' keys are listed in `webhook/cluster.rs`.

mod admin;
mod conn;
mod control;
mod counts;
mod fanout;
mod fence;
mod history;
mod lease;
mod limits;
mod open;
mod pages;
mod reads;
mod resharding;
mod scripts;
mod sharded;
mod sharded_subscriber;
mod slot_recovery;
mod slots;
mod subscriber;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

pub use conn::{Conn, Shared};
pub use control::{ControlSigner, Forged};
pub use open::RedisTarget;
use parking_lot::Mutex;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::{Notify, mpsc, oneshot};

pub use admin::{ADMIN_MESSAGE, AdminStore};

use super::{
    Bridge, Broker, CapReached, ChannelRead, Charged, Events, KeyCharge, LimiterStore, LocalLimits,
    Pending,
};
use crate::config::{ClusterMode, Config, Limits};
use crate::hub::{Hub, Joined, Subscriber};
use crate::idempotency::{Keyed, Published};
use crate::metrics::Metrics;

/// How long a subscribe waits for Redis to confirm before it is acked
/// with local delivery only (delivery from other nodes follows by itself).
const SUBSCRIBE_WAIT: Duration = Duration::from_secs(2);
/// Redis calls slower than this count as an outage.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(1);
/// A counter outlives its channel's history by at least this much.
const SEQ_TTL_MS: u64 = 24 * 3600 * 1000;

/// What the subscriber task is asked to do.
#[derive(Debug)]
enum SubCmd {
    /// The interest in this channel changed: subscribe or unsubscribe to
    /// match it.
    Touch(Arc<str>),
    /// Redis Cluster: this slot was re-synced after its shard failed;
    /// subscribe these channels of it again and catch up on what they
    /// missed, before any later push is dispatched (`slot_recovery.rs`).
    Resume(u16, Vec<Arc<str>>),
}

#[derive(Debug, Default)]
struct Interest {
    /// Local subscribers of the channel.
    refs: usize,
    /// Redis confirmed the subscription on the current connection.
    live: bool,
    waiters: Vec<oneshot::Sender<()>>,
}

pub struct RedisBridge {
    /// This bridge, for futures that outlive a call.
    me: Weak<RedisBridge>,
    target: RedisTarget,
    /// Signs this node's control messages and checks the others'
    /// (`control.rs`).
    control: Arc<ControlSigner>,
    /// Commands (scripts); on Redis Cluster never subscribed, so no
    /// unsolicited push can be taken for one of its replies. Made at
    /// start; presence and the webhooks send theirs over it too.
    conn: Shared,
    /// Redis Cluster: the subscription connection (`sharded_subscriber.rs`).
    pubsub: OnceLock<redis::cluster_async::ClusterConnection>,
    /// Redis Cluster (`sharded.rs`): keys hash-tagged, sharded pub/sub.
    sharded: bool,
    /// This process's identity in leases and connection counts: the node
    /// id plus a per-start suffix, so a restarted node's old counts expire.
    member: String,
    prefix: String,
    hub: Arc<Hub>,
    metrics: Arc<Metrics>,
    /// The node above, told of breaches and operator actions.
    events: Weak<dyn Events>,
    local: LocalLimits,
    /// `history.size`, `history.ttl_ms` and `history.cluster_max_bytes`
    /// (the `hist:` bytes over all channels), as last (re)loaded.
    history: parking_lot::RwLock<(usize, u64, u64)>,
    /// `publish.idempotency_window_ms`: a key's time to live in Redis.
    idempotency_window_ms: AtomicU64,
    /// Entries waiting for the history index (`history.rs`), bounded
    /// there.
    hist_pending: history::Buffer,
    /// Starts a flush of the history index before its interval.
    hist_flush_now: Notify,
    lease_ms: u64,
    max_pending: usize,
    pending: AtomicUsize,
    /// The subscription connection is up and resubscribed.
    pubsub_ok: AtomicBool,
    /// Commands work and the node's state was re-synced since the last
    /// failure.
    cmd_ok: AtomicBool,
    live_nodes: AtomicU32,
    /// Redis Cluster: the slots whose shard failed (`slots.rs`).
    down: slots::DownSlots,
    /// Wakes the slot recovery early (a slot just went down).
    recover_now: Notify,
    interest: Mutex<HashMap<Arc<str>, Interest>>,
    /// Other nodes' subscriber counts, for pricing (`counts.rs`).
    remote_subscribers: parking_lot::RwLock<HashMap<Arc<str>, u64>>,
    cmds: mpsc::UnboundedSender<SubCmd>,
    cmds_rx: Mutex<Option<mpsc::UnboundedReceiver<SubCmd>>>,
    first_up: Notify,
}

impl std::fmt::Debug for RedisBridge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RedisBridge({}, up={})", self.member, self.is_up())
    }
}

impl RedisBridge {
    pub fn new(
        target: RedisTarget,
        conn: Shared,
        config: &Config,
        hub: Arc<Hub>,
        metrics: Arc<Metrics>,
        events: Weak<dyn Events>,
    ) -> Arc<RedisBridge> {
        let (tx, rx) = mpsc::unbounded_channel();
        metrics.bridge_up.set(0);
        let control = Arc::new(ControlSigner::new(
            format!("{}ctl", config.cluster.key_prefix),
            config.cluster_secrets.clone(),
        ));
        Arc::new_cyclic(|me| RedisBridge {
            me: me.clone(),
            target,
            control,
            conn,
            pubsub: OnceLock::new(),
            sharded: config.cluster.mode == ClusterMode::RedisCluster,
            member: format!("{}:{:08x}", config.node.id, rand::random::<u32>()),
            prefix: config.cluster.key_prefix.clone(),
            hub,
            metrics,
            events,
            local: LocalLimits::default(),
            history: parking_lot::RwLock::new(history_of(config)),
            idempotency_window_ms: AtomicU64::new(config.publish.idempotency_window_ms),
            hist_pending: Mutex::default(),
            hist_flush_now: Notify::new(),
            lease_ms: config.cluster.lease_ms,
            max_pending: config.cluster.max_pending,
            pending: AtomicUsize::new(0),
            pubsub_ok: AtomicBool::new(false),
            cmd_ok: AtomicBool::new(false),
            live_nodes: AtomicU32::new(1),
            down: slots::DownSlots::default(),
            recover_now: Notify::new(),
            interest: Mutex::new(HashMap::new()),
            remote_subscribers: parking_lot::RwLock::new(HashMap::new()),
            cmds: tx,
            cmds_rx: Mutex::new(Some(rx)),
            first_up: Notify::new(),
        })
    }

    /// (`history.size`, `history.ttl_ms`, `history.cluster_max_bytes`).
    fn history(&self) -> (usize, u64, u64) {
        *self.history.read()
    }

    fn key(&self, kind: &str, name: &str) -> String {
        self.key_with(kind, name, 0)
    }

    /// `{prefix}{kind}:{name}`, with room for `more` bytes after it, in
    /// one string of the right size (`format!` grew one from empty: about
    /// 1,500 instructions a name, five or six a publish; bench/README,
    /// stop 52). On Redis Cluster the name is the hash tag: a channel's
    /// keys and topic share one slot (docs/scaling.md).
    fn key_with(&self, kind: &str, name: &str, more: usize) -> String {
        let mut key = String::with_capacity(self.prefix.len() + kind.len() + name.len() + 3 + more);
        key.push_str(&self.prefix);
        key.push_str(kind);
        key.push(':');
        let (open, close) = if self.sharded { ("{", "}") } else { ("", "") };
        key.push_str(open);
        key.push_str(name);
        key.push_str(close);
        key
    }

    fn topic(&self, channel: &str) -> String {
        self.key("ch", channel)
    }

    fn control_topic(&self) -> String {
        format!("{}ctl", self.prefix)
    }

    fn refresh_up(&self) {
        let up = self.is_up();
        self.metrics.bridge_up.set(i64::from(up));
        if up {
            self.first_up.notify_waiters();
            self.first_up.notify_one();
        }
    }

    /// Whether Redis is reachable for `key`: the connection is up and
    /// re-synced and, on Redis Cluster, the key's slot is not down.
    fn up_at(&self, key: &str) -> bool {
        self.pubsub_ok.load(Ordering::Acquire)
            && self.cmd_ok.load(Ordering::Acquire)
            && !self.down.is_down(key)
    }

    /// The share of a cluster-wide limit kept in `key` this node enforces
    /// by itself now (see [`LimiterStore::share`]).
    fn share_at(&self, key: &str) -> f64 {
        let alone = 1.0 / f64::from(self.live_nodes.load(Ordering::Acquire).max(1));
        if self.up_at(key) { 1.0 } else { alone }
    }

    /// A connection for one command on `key`, unless Redis (or, on Redis
    /// Cluster, the key's shard) is away or too many commands are already
    /// in flight (then the caller works locally).
    fn command(&self, key: &str) -> Option<(Conn, InFlight)> {
        if !self.up_at(key) {
            return None;
        }
        let conn = self.conn.get()?.clone();
        if self.pending.fetch_add(1, Ordering::AcqRel) >= self.max_pending {
            self.pending.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        self.metrics.bridge_pending.inc();
        Some((conn, InFlight(self.arc())))
    }

    /// A command on `key` failed. On Redis Cluster only the key's slot
    /// counts as away, until the slot recovery has re-synced it; on one
    /// Redis, all of it (see [`RedisBridge::failed`]).
    fn failed_at(&self, key: &str, e: &redis::RedisError) {
        if !self.sharded {
            return self.failed(e);
        }
        if self.down.mark(key) {
            self.metrics.bridge_outages.inc();
            tracing::warn!(error = %e, %key, "a Redis Cluster shard is unreachable; serving its channels and accounts alone");
            self.recover_now.notify_one();
        }
        self.refresh_up();
    }

    /// A command failed: Redis counts as away until the lease task has
    /// re-synced with it; a new outage unless the subscriber lost it first.
    fn failed(&self, e: &redis::RedisError) {
        if self.cmd_ok.swap(false, Ordering::AcqRel) {
            let listening = self.pubsub_ok.load(Ordering::Acquire);
            self.metrics.bridge_outages.inc_by(u64::from(listening));
            tracing::warn!(error = %e, "Redis unreachable; serving alone with a share of every cluster-wide limit");
        }
        self.refresh_up();
    }
}

fn history_of(config: &Config) -> (usize, u64, u64) {
    let h = &config.history;
    (h.size, h.ttl_ms, h.cluster_max_bytes)
}

/// Counts a command in flight toward Redis while it lives.
struct InFlight(Arc<RedisBridge>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.pending.fetch_sub(1, Ordering::AcqRel);
        self.0.metrics.bridge_pending.dec();
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

impl Broker for RedisBridge {
    fn publish(&self, channel: &str, data: &str, key: Option<Keyed<'_>>) -> Pending<Published> {
        self.publish_impl(channel, data, key)
    }

    fn subscribe(&self, channel: &str, sub: Subscriber, since: Option<u64>) -> Pending<Joined> {
        self.subscribe_impl(channel, sub, since)
    }

    fn unsubscribe(&self, channel: &str, conn: u64) {
        self.unsubscribe_impl(channel, conn);
    }

    fn subscribers(&self, channel: &str) -> u64 {
        self.subscribers_impl(channel)
    }

    fn read_channel(&self, channel: &str, last: usize, after: u64) -> Pending<ChannelRead> {
        self.read_channel_impl(channel, last, after)
    }

    fn occupied(&self, prefix: &str) -> Vec<(Arc<str>, u64)> {
        self.occupied_impl(prefix)
    }
}

impl LimiterStore for RedisBridge {
    fn charge_account(
        &self,
        account: &str,
        units: u32,
        since: Instant,
        limits: &Limits,
    ) -> Pending<Charged> {
        self.charge_account_impl(account, (units, false), since, limits)
    }

    fn announce_breach(&self, account: &str) {
        self.announce_breach_impl(account);
    }

    fn reserve_connection(&self, account: &str, max: u32) -> Pending<Result<u32, CapReached>> {
        self.reserve_connection_impl(account, max)
    }

    fn release_connection(&self, account: &str) {
        self.release_connection_impl(account);
    }

    fn handshake(&self, account: &str, limits: &Limits) -> Pending<Result<(), Duration>> {
        self.handshake_impl(account, limits)
    }

    fn charge_key(&self, key: &str, cost: f64, capacity: f64, rate: f64) -> Pending<KeyCharge> {
        self.charge_key_impl(key, (cost, false), capacity, rate)
    }

    fn owe_key(&self, key: &str, cost: f64, capacity: f64, rate: f64) -> Pending<KeyCharge> {
        self.charge_key_impl(key, (cost, true), capacity, rate)
    }

    fn owe_account(&self, account: &str, units: u32, limits: &Limits) -> Pending<Charged> {
        self.charge_account_impl(account, (units, true), Instant::now(), limits)
    }

    fn refund_key(&self, key: &str, units: f64, capacity: f64, _rate: f64) -> Pending<u64> {
        self.refund_key_impl(key, units, capacity)
    }

    fn refund_account(&self, account: &str, units: u32, limits: &Limits) -> Pending<u64> {
        self.refund_account_impl(account, units, limits)
    }

    fn share(&self) -> f64 {
        if self.is_up() {
            1.0
        } else {
            1.0 / f64::from(self.live_nodes.load(Ordering::Acquire).max(1))
        }
    }

    fn account_share(&self, account: &str) -> f64 {
        self.share_at(&self.key("conns", account))
    }
}

impl Bridge for RedisBridge {
    fn admin_store(&self) -> Option<AdminStore> {
        self.admin_store_impl()
    }

    fn reconfigure(&self, config: &Config) {
        *self.history.write() = history_of(config);
        self.idempotency_window_ms
            .store(config.publish.idempotency_window_ms, Ordering::Relaxed);
    }

    fn is_up(&self) -> bool {
        self.pubsub_ok.load(Ordering::Acquire)
            && self.cmd_ok.load(Ordering::Acquire)
            && !self.down.any()
    }

    fn start(self: Arc<Self>) -> Pin<Box<dyn Future<Output = ()>>> {
        self.conn.set_home(tokio::runtime::Handle::current());
        if self.sharded {
            return sharded_subscriber::start(self);
        }
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(COMMAND_TIMEOUT))
            .set_response_timeout(Some(COMMAND_TIMEOUT))
            .set_number_of_retries(1)
            .set_max_delay(COMMAND_TIMEOUT);
        match ConnectionManager::new_lazy_with_config(self.target.client.clone(), config) {
            Ok(conn) => self.conn.set(Conn::Single(conn)),
            Err(e) => tracing::error!(error = %e, "cannot set up the Redis connection"),
        }
        if let Some(rx) = self.cmds_rx.lock().take() {
            actix_rt::spawn(subscriber::run(self.clone(), rx));
        }
        actix_rt::spawn(self.clone().lease_loop());
        actix_rt::spawn(self.clone().counts_loop());
        actix_rt::spawn(self.clone().history_loop());
        let this = self.clone();
        actix_rt::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(10));
            loop {
                tick.tick().await;
                this.local.sweep(Instant::now());
            }
        });
        Box::pin(async move {
            while !self.is_up() {
                self.first_up.notified().await;
            }
        })
    }
}

impl RedisBridge {
    /// A strong handle on this bridge for futures that outlive the call
    /// (a `&self` method can only be running while an `Arc` exists).
    fn arc(&self) -> Arc<RedisBridge> {
        self.me.upgrade().expect("called through an Arc")
    }
}
