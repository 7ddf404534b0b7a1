//! The cluster bridge: how a node shares fan-out, `seq`, history and the
//! cluster-wide limits (account budget, connection caps, the per-identity
//! handshake bucket, API-key buckets) with other nodes.
//!
//! The bridge says what it is in parts: the [`Broker`] half (publish,
//! subscribe, history), the distributed [`LimiterStore`], and the
//! [`Bridge`] that bundles them with the admin store and its own start and
//! health. The rest of the broker talks to these and does not know which
//! implementation runs: [`MemoryBridge`] for a single node (everything
//! local), or [`RedisBridge`] for a cluster. Calls return [`Pending`]: a value now, or
//! a future — single-node mode never allocates a future.

mod local;
mod memory;
pub mod operator;
pub mod redis;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use local::{LocalLimits, scale_cap};
pub use memory::MemoryBridge;
pub use operator::{Action, BANNED, DISCONNECTED, Envelope, Who};
pub use redis::RedisBridge;

use crate::config::Limits;
use crate::hub::{Joined, Subscriber};
use crate::idempotency::{Keyed, Published};
use crate::protocol::wire::BudgetView;

/// A bridge answer: ready now, or later.
pub enum Pending<T> {
    Ready(T),
    Later(Pin<Box<dyn Future<Output = T> + Send>>),
}

impl<T> Pending<T> {
    pub fn later(fut: impl Future<Output = T> + Send + 'static) -> Pending<T> {
        Pending::Later(Box::pin(fut))
    }

    pub async fn wait(self) -> T {
        match self {
            Pending::Ready(v) => v,
            Pending::Later(f) => f.await,
        }
    }
}

/// The outcome of an account's sampled charge.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Charged {
    pub allowed: bool,
    /// When refused: how long until the units would fit.
    pub retry_after: Duration,
    pub view: BudgetView,
}

/// A take from an API key's bucket, with what `X-RateLimit-*` show.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KeyCharge {
    pub allowed: bool,
    pub limit: u64,
    pub remaining: u64,
    pub reset: Duration,
    pub retry_after: Duration,
}

/// A channel as [`Broker::read_channel`] sees it.
#[derive(Debug, Clone, Default)]
pub struct ChannelRead {
    pub seq: u64,
    /// Held messages as message frames (see `protocol::wire::message`),
    /// oldest first: those the read asked for.
    pub held: Vec<(u64, bytes::Bytes)>,
}

impl ChannelRead {
    /// The read of `last` messages after `after` out of a whole history
    /// (`held`, oldest first), as a bridge that holds it in memory answers
    /// [`Broker::read_channel`].
    pub fn newest(seq: u64, held: Vec<(u64, bytes::Bytes)>, last: usize, after: u64) -> Self {
        let from = held.partition_point(|(s, _)| *s <= after);
        let from = from.max(held.len().saturating_sub(last));
        let mut held = held;
        held.drain(..from);
        ChannelRead { seq, held }
    }
}

/// An account connection cap was reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapReached {
    pub open: u32,
    pub max: u32,
}

/// The broker half: fan-out, each channel's `seq` and history, and who
/// subscribes where. Every front that publishes, subscribes or reads a
/// channel goes through this (`Node::broker`).
pub trait Broker: Send + Sync + std::fmt::Debug {
    /// Publishes `data` (raw JSON) on `channel`; resolves to its `seq`.
    /// With an idempotency key (§17, claimed in the node's table already),
    /// a cluster bridge records the key in the same atomic step that
    /// assigns the `seq`, and a key another node published resolves to
    /// that `seq` as a duplicate, publishing nothing.
    fn publish(&self, channel: &str, data: &str, key: Option<Keyed<'_>>) -> Pending<Published>;
    /// Subscribes a socket; resolves once delivery from every node is live
    /// (and, with `since`, with the recovered history).
    fn subscribe(&self, channel: &str, sub: Subscriber, since: Option<u64>) -> Pending<Joined>;
    fn unsubscribe(&self, channel: &str, conn: u64);
    /// The channel's current subscribers, cluster-wide (this node's exact
    /// count plus the other nodes' last reported ones): the fan-out a
    /// publish prices. Never waits on Redis.
    fn subscribers(&self, channel: &str) -> u64;
    /// The channel's last `seq` (cluster-wide; 0: none) and its newest
    /// `last` held messages with a `seq` above `after`, oldest first (with
    /// `last` 0, the `seq` alone), for reads that do not subscribe
    /// (GraphQL's `Channel.seq` and `history`). Only what is returned is
    /// read (issue 38: a one-unit read must not copy a whole history).
    fn read_channel(&self, channel: &str, last: usize, after: u64) -> Pending<ChannelRead>;
    /// Channels starting with `prefix` that have subscribers (cluster-wide:
    /// this node's and the other nodes' last reported counts), with their
    /// subscriber counts, in no order. Never waits on Redis.
    fn occupied(&self, prefix: &str) -> Vec<(Arc<str>, u64)>;
}

/// The distributed limiter store: the buckets and counts every node of a
/// cluster shares (account budgets, API-key buckets, the per-identity
/// handshake bucket, account connection caps), and the share of each a
/// node enforces alone while the store is away. The charge layer and the
/// handshakes go through this (`Node::limiter_store`).
pub trait LimiterStore: Send + Sync + std::fmt::Debug {
    /// One sampled charge of `units` to the account budget, the first of
    /// them admitted at `since` (see [`crate::limiter::SampledBucket`]).
    fn charge_account(
        &self,
        account: &str,
        units: u32,
        since: Instant,
        limits: &Limits,
    ) -> Pending<Charged>;
    /// The same debt on the account budget as [`LimiterStore::owe_key`],
    /// taken at once (not sampled).
    fn owe_account(&self, account: &str, units: u32, limits: &Limits) -> Pending<Charged>;
    /// Gives back `units` of an earlier account charge (see
    /// [`LimiterStore::refund_key`]); resolves to the balance after it.
    fn refund_account(&self, account: &str, units: u32, limits: &Limits) -> Pending<u64>;
    /// Tells every other node that `account` breached its budget, so they
    /// close its sockets too.
    fn announce_breach(&self, account: &str);

    /// An API key's publish bucket.
    fn charge_key(&self, key: &str, cost: f64, capacity: f64, rate: f64) -> Pending<KeyCharge>;
    /// [`LimiterStore::charge_key`] taken even below zero, never refused:
    /// a debt for what is delivered already (a recovery's history,
    /// `charge::recovery`); the key's next charges wait for the refill.
    fn owe_key(&self, key: &str, cost: f64, capacity: f64, rate: f64) -> Pending<KeyCharge>;
    /// Gives back `units` of an earlier [`LimiterStore::charge_key`] that
    /// turned out cheaper (a GraphQL refund, §12), capped at the bucket's
    /// capacity; resolves to the balance after it.
    fn refund_key(&self, key: &str, units: f64, capacity: f64, rate: f64) -> Pending<u64>;

    /// The per-identity handshake bucket.
    fn handshake(&self, account: &str, limits: &Limits) -> Pending<Result<(), Duration>>;
    /// Counts one more connection for `account` if it is under `max`;
    /// resolves to the account's open connections, this one included.
    fn reserve_connection(&self, account: &str, max: u32) -> Pending<Result<u32, CapReached>>;
    fn release_connection(&self, account: &str);

    /// The share of every cluster-wide limit this node enforces by itself
    /// right now: 1 when limits are shared (or there is one node), 1/N
    /// during a Redis outage (N = live nodes last seen).
    fn share(&self) -> f64;
    /// [`LimiterStore::share`] for one account's limits: on Redis Cluster
    /// only the accounts whose keys live on a failed shard fall back to a
    /// share.
    fn account_share(&self, _account: &str) -> f64 {
        self.share()
    }
}

/// The bridge: one node's link to the others, local or clustered. It is
/// both halves above over one connection, plus what belongs to the link
/// itself: its start, whether it is up, a reload, and the admin store.
/// One implementation per mode, each in one place: [`MemoryBridge`]
/// (`memory.rs`) and [`RedisBridge`] (`redis/`).
pub trait Bridge: Broker + LimiterStore {
    /// A reloaded config: what the bridge keeps of it (the Redis bridge:
    /// the history's size, TTL and cluster-wide byte budget).
    fn reconfigure(&self, _config: &crate::config::Config) {}
    /// The admin store: where operator actions and the ban list are shared
    /// with the other nodes (§10); `None` on a single node, or while Redis
    /// is away (the action then applies on this node only).
    fn admin_store(&self) -> Option<redis::AdminStore> {
        None
    }
    /// Whether cluster-wide state is reachable.
    fn is_up(&self) -> bool;
    /// Spawns the bridge's background work on the current runtime and
    /// returns a future that resolves once it is first connected (at once
    /// in single-node mode).
    fn start(self: Arc<Self>) -> Pin<Box<dyn Future<Output = ()>>>;
}

pub type SharedBridge = Arc<dyn Bridge>;
pub type SharedBroker = Arc<dyn Broker>;
pub type SharedLimiterStore = Arc<dyn LimiterStore>;

/// A bridge as the node holds it: whole, and as each of its halves, so a
/// call site names the part it uses (`node.broker.publish`,
/// `node.limiter_store.charge_key`).
pub fn parts<B: Bridge + 'static>(
    bridge: Arc<B>,
) -> (SharedBridge, SharedBroker, SharedLimiterStore) {
    (bridge.clone(), bridge.clone(), bridge)
}

/// What the bridge reports upward, to the node that owns it (which
/// implements this and hands it in at construction): the bridge knows the
/// hub below it and nothing above, so whatever it hears from other nodes
/// that is not a message for the hub goes through here.
pub trait Events: Send + Sync {
    /// Another node saw `account` breach its budget: close its sockets here.
    fn breach(&self, account: &str);
    /// An operator action another node made (§10), to apply here.
    fn operator(&self, envelope: Envelope);
}

#[cfg(test)]
mod properties;

#[cfg(test)]
mod tests {
    use super::ChannelRead;

    fn held(seqs: &[u64]) -> Vec<(u64, bytes::Bytes)> {
        seqs.iter().map(|s| (*s, bytes::Bytes::new())).collect()
    }

    fn seqs(r: &ChannelRead) -> Vec<u64> {
        r.held.iter().map(|(s, _)| *s).collect()
    }

    #[test]
    fn a_read_keeps_the_newest_asked_for_after_since() {
        let all = [3, 4, 9, 10, 11];
        let read = |last, after| seqs(&ChannelRead::newest(11, held(&all), last, after));
        assert_eq!(read(0, 0), Vec::<u64>::new(), "last 0: the seq alone");
        assert_eq!(read(2, 0), vec![10, 11]);
        assert_eq!(read(50, 0), all.to_vec());
        assert_eq!(read(50, 4), vec![9, 10, 11]);
        assert_eq!(read(50, 5), vec![9, 10, 11], "since inside a jump");
        assert_eq!(read(1, 5), vec![11]);
        assert_eq!(read(50, 11), Vec::<u64>::new());
        assert_eq!(ChannelRead::newest(11, held(&all), 1, 0).seq, 11);
    }
}
