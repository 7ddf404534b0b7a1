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
//! - **Outage**: while Redis is unreachable the node serves alone: local
//!   fan-out and history, and its share (1 / live nodes last seen) of every
//!   cluster-wide limit. Nothing is queued toward Redis beyond
//!   `cluster.max_pending` commands in flight. On reconnection the node
//!   raises every channel counter above the `seq`s it issued, re-asserts its
//!   connection counts and resubscribes, and only then reports itself up.

mod scripts;
mod subscriber;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::{Notify, mpsc, oneshot};

use super::{Bridge, CapReached, Charged, KeyCharge, LocalLimits, Pending};
use crate::config::{Config, Limits};
use crate::hub::{Hub, Joined, Subscriber, seq_floor};
use crate::metrics::Metrics;
use crate::node::Node;
use crate::protocol::wire::{self, BudgetView};

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
    client: redis::Client,
    conn: OnceLock<ConnectionManager>,
    /// This process's identity in leases and connection counts: the node
    /// id plus a per-start suffix, so a restarted node's old counts expire.
    member: String,
    prefix: String,
    hub: Arc<Hub>,
    metrics: Arc<Metrics>,
    node: Weak<Node>,
    local: LocalLimits,
    history: (usize, u64),
    lease_ms: u64,
    max_pending: usize,
    pending: AtomicUsize,
    /// The subscription connection is up and resubscribed.
    pubsub_ok: AtomicBool,
    /// Commands work and the node's state was re-synced since the last
    /// failure.
    cmd_ok: AtomicBool,
    live_nodes: AtomicU32,
    interest: Mutex<HashMap<Arc<str>, Interest>>,
    cmds: mpsc::UnboundedSender<SubCmd>,
    cmds_rx: Mutex<Option<mpsc::UnboundedReceiver<SubCmd>>>,
    first_up: Notify,
}

impl std::fmt::Debug for RedisBridge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RedisBridge({}, up={})", self.member, self.is_up())
    }
}

/// Parses the `seq` out of a message JSON built by the publish script.
fn parse_seq(channel: &str, msg: &[u8]) -> Option<u64> {
    let skip = r#"{"type":"message","channel":""#.len() + channel.len() + r#"","seq":"#.len();
    let digits = msg.get(skip..)?;
    let end = digits.iter().position(|b| !b.is_ascii_digit())?;
    std::str::from_utf8(&digits[..end]).ok()?.parse().ok()
}

impl RedisBridge {
    pub fn new(
        client: redis::Client,
        config: &Config,
        hub: Arc<Hub>,
        metrics: Arc<Metrics>,
        node: Weak<Node>,
    ) -> Arc<RedisBridge> {
        let (tx, rx) = mpsc::unbounded_channel();
        metrics.bridge_up.set(0);
        Arc::new_cyclic(|me| RedisBridge {
            me: me.clone(),
            client,
            conn: OnceLock::new(),
            member: format!("{}:{:08x}", config.node.id, rand::random::<u32>()),
            prefix: config.cluster.key_prefix.clone(),
            hub,
            metrics,
            node,
            local: LocalLimits::default(),
            history: (config.history.size, config.history.ttl_ms),
            lease_ms: config.cluster.lease_ms,
            max_pending: config.cluster.max_pending,
            pending: AtomicUsize::new(0),
            pubsub_ok: AtomicBool::new(false),
            cmd_ok: AtomicBool::new(false),
            live_nodes: AtomicU32::new(1),
            interest: Mutex::new(HashMap::new()),
            cmds: tx,
            cmds_rx: Mutex::new(Some(rx)),
            first_up: Notify::new(),
        })
    }

    fn key(&self, kind: &str, name: &str) -> String {
        format!("{}{kind}:{name}", self.prefix)
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

    /// A connection for one command, unless Redis is away or too many
    /// commands are already in flight (then the caller works locally).
    fn command(&self) -> Option<(ConnectionManager, InFlight)> {
        if !self.is_up() {
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

    /// A command failed: Redis counts as away until the lease task has
    /// re-synced with it.
    fn failed(&self, e: &redis::RedisError) {
        if self.cmd_ok.swap(false, Ordering::AcqRel) {
            tracing::warn!(error = %e, "Redis unreachable; serving alone with a share of every cluster-wide limit");
        }
        self.refresh_up();
    }

    /// A message from the cluster, as delivered by Redis.
    fn on_message(&self, topic: &str, payload: &[u8]) {
        if topic == self.control_topic() {
            if let Some(account) = std::str::from_utf8(payload)
                .ok()
                .and_then(|p| p.strip_prefix("breach:"))
                && let Some(node) = self.node.upgrade()
            {
                node.accounts.breach(account);
            }
            return;
        }
        let Some(channel) = topic.strip_prefix(&format!("{}ch:", self.prefix)) else {
            return;
        };
        match parse_seq(channel, payload) {
            Some(seq) => {
                self.hub.deliver(channel, seq, wire::text(payload));
            }
            None => tracing::warn!(%channel, "unparseable message from Redis ignored"),
        }
    }

    fn add_interest(&self, channel: &str) -> Option<oneshot::Receiver<()>> {
        let mut interest = self.interest.lock();
        let entry = interest.entry(channel.into()).or_default();
        entry.refs += 1;
        if entry.refs == 1 {
            let _ = self.cmds.send(SubCmd::Touch(channel.into()));
        }
        if entry.live || !self.pubsub_ok.load(Ordering::Acquire) {
            return None;
        }
        let (tx, rx) = oneshot::channel();
        entry.waiters.push(tx);
        Some(rx)
    }

    fn remove_interest(&self, channel: &str) {
        let mut interest = self.interest.lock();
        if let Some(entry) = interest.get_mut(channel) {
            entry.refs = entry.refs.saturating_sub(1);
            if entry.refs == 0 {
                interest.remove(channel);
                let _ = self.cmds.send(SubCmd::Touch(channel.into()));
            }
        }
    }

    /// Recovery after `since` from the cluster's history.
    async fn recover(&self, channel: &str, since: u64) -> Option<(bool, Vec<(u64, Bytes)>)> {
        let (mut conn, _in_flight) = self.command()?;
        let result: redis::RedisResult<(String, Vec<Vec<u8>>)> = scripts::HISTORY
            .key(self.key("seq", channel))
            .key(self.key("hist", channel))
            .invoke_async(&mut conn)
            .await;
        let (cur, held) = match result {
            Ok(r) => r,
            Err(e) => {
                self.failed(&e);
                return None;
            }
        };
        let cur: u64 = cur.parse().unwrap_or(0);
        if cur == 0 || since > cur {
            return Some((false, Vec::new()));
        }
        if since == cur {
            return Some((true, Vec::new()));
        }
        let held: Vec<(u64, &Vec<u8>)> = held
            .iter()
            .filter_map(|m| Some((parse_seq(channel, m)?, m)))
            .collect();
        let complete = held.first().is_some_and(|(seq, _)| *seq <= since + 1);
        let backlog = if complete {
            held.iter()
                .filter(|(seq, _)| *seq > since)
                .map(|(seq, m)| (*seq, wire::text(m)))
                .collect()
        } else {
            Vec::new()
        };
        Some((complete, backlog))
    }

    /// The bucket script; `None` when Redis is away.
    async fn bucket(
        &self,
        key: String,
        capacity: f64,
        rate: f64,
        cost: f64,
    ) -> Option<(bool, u64, u64, u64)> {
        let (mut conn, _in_flight) = self.command()?;
        let result: redis::RedisResult<(i64, i64, i64, i64)> = scripts::BUCKET
            .key(key)
            .arg(capacity)
            .arg(rate)
            .arg(cost)
            .invoke_async(&mut conn)
            .await;
        match result {
            Ok((allowed, remaining, retry, full)) => Some((
                allowed == 1,
                remaining.max(0) as u64,
                retry.max(0) as u64,
                full.max(0) as u64,
            )),
            Err(e) => {
                self.failed(&e);
                None
            }
        }
    }

    /// After a (re)connection: raise every channel counter above the `seq`s
    /// this node knows, re-assert this node's connection counts, renew the
    /// lease. Only then is the node up.
    async fn resync(&self) -> redis::RedisResult<()> {
        let Some(mut conn) = self.conn.get().cloned() else {
            return Err((redis::ErrorKind::Client, "not started").into());
        };
        for chunk in self.hub.seqs().chunks(256) {
            let mut pipe = redis::pipe();
            for (channel, seq) in chunk {
                pipe.cmd("EVAL")
                    .arg(scripts::RAISE)
                    .arg(1)
                    .arg(self.key("seq", channel))
                    .arg(seq.to_string())
                    .arg(SEQ_TTL_MS.max(self.history.1))
                    .ignore();
            }
            pipe.query_async::<()>(&mut conn).await?;
        }
        let counts = self.local.all_connections();
        for chunk in counts.chunks(256) {
            let mut pipe = redis::pipe();
            for (account, n) in chunk {
                pipe.hset(self.key("conns", account), &self.member, *n)
                    .ignore();
            }
            pipe.query_async::<()>(&mut conn).await?;
        }
        self.renew_lease(&mut conn).await
    }

    async fn renew_lease(&self, conn: &mut ConnectionManager) -> redis::RedisResult<()> {
        let live: u32 = scripts::LEASE
            .key(format!("{}nodes", self.prefix))
            .arg(&self.member)
            .arg(self.lease_ms)
            .invoke_async(conn)
            .await?;
        self.live_nodes.store(live.max(1), Ordering::Release);
        self.metrics.live_nodes.set(i64::from(live.max(1)));
        Ok(())
    }

    /// Renews the lease every third of its length; after a failure, re-syncs
    /// before reporting the node up again.
    async fn lease_loop(self: Arc<Self>) {
        let mut tick = tokio::time::interval(Duration::from_millis((self.lease_ms / 3).max(50)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(mut conn) = self.conn.get().cloned() else {
                continue;
            };
            if !self.pubsub_ok.load(Ordering::Acquire) {
                continue;
            }
            let result = if self.cmd_ok.load(Ordering::Acquire) {
                tokio::time::timeout(COMMAND_TIMEOUT, self.renew_lease(&mut conn)).await
            } else {
                tokio::time::timeout(COMMAND_TIMEOUT * 5, self.resync()).await
            };
            match result {
                Ok(Ok(())) => {
                    if !self.cmd_ok.swap(true, Ordering::AcqRel) {
                        tracing::info!(
                            live_nodes = self.live_nodes.load(Ordering::Acquire),
                            "Redis reachable; cluster-wide limits shared again"
                        );
                    }
                    self.refresh_up();
                }
                Ok(Err(e)) => self.failed(&e),
                Err(_) => self.failed(&(redis::ErrorKind::Io, "timed out").into()),
            }
        }
    }
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

impl Bridge for RedisBridge {
    fn publish(&self, channel: &str, data: &str) -> Pending<u64> {
        if !self.is_up() {
            return Pending::Ready(self.hub.publish(channel, data));
        }
        let this = self.arc();
        let (channel, data) = (channel.to_owned(), data.to_owned());
        Pending::later(async move {
            let Some((mut conn, _in_flight)) = this.command() else {
                return this.hub.publish(&channel, &data);
            };
            let result: redis::RedisResult<String> = scripts::PUBLISH
                .key(this.key("seq", &channel))
                .key(this.key("hist", &channel))
                .arg(this.topic(&channel))
                .arg(&channel)
                .arg(&data)
                .arg(this.history.0)
                .arg(this.history.1)
                .arg(this.hub.seq(&channel))
                .arg(seq_floor())
                .arg(SEQ_TTL_MS.max(this.history.1))
                .invoke_async(&mut conn)
                .await;
            match result.map(|s| s.parse::<u64>()) {
                Ok(Ok(seq)) => seq,
                Ok(Err(_)) => this.hub.publish(&channel, &data),
                Err(e) => {
                    // Availability first: the message may or may not have
                    // reached Redis; serve it locally either way.
                    this.failed(&e);
                    this.hub.publish(&channel, &data)
                }
            }
        })
    }

    fn subscribe(&self, channel: &str, sub: Subscriber, since: Option<u64>) -> Pending<Joined> {
        let wait = self.add_interest(channel);
        if !self.is_up() {
            // Alone: local delivery is live now; recovery from local history.
            return Pending::Ready(self.hub.subscribe(channel, sub, since));
        }
        let joined = self.hub.subscribe(channel, sub, None);
        let this = self.arc();
        let channel = channel.to_owned();
        Pending::later(async move {
            if let Some(rx) = wait {
                let _ = tokio::time::timeout(SUBSCRIBE_WAIT, rx).await;
            }
            let Some(since) = since else {
                return joined;
            };
            match this.recover(&channel, since).await {
                Some((recovered, backlog)) => Joined {
                    recovered: Some(recovered),
                    backlog,
                    ..joined
                },
                None => {
                    let (recovered, backlog) = this.hub.recover(&channel, since);
                    Joined {
                        recovered: Some(recovered),
                        backlog,
                        ..joined
                    }
                }
            }
        })
    }

    fn unsubscribe(&self, channel: &str, conn: u64) {
        self.hub.unsubscribe(channel, conn);
        self.remove_interest(channel);
    }

    fn charge_account(&self, account: &str, units: u32, limits: &Limits) -> Pending<Charged> {
        let share = self.share();
        if share < 1.0 {
            return Pending::Ready(self.local.charge_account(
                account,
                units,
                limits,
                share,
                Instant::now(),
            ));
        }
        let this = self.arc();
        let (account, limits) = (account.to_owned(), limits.clone());
        Pending::later(async move {
            let (cap, rate) = (
                f64::from(limits.account_burst),
                limits.account_messages_per_sec,
            );
            match this
                .bucket(this.key("acct", &account), cap, rate, f64::from(units))
                .await
            {
                Some((allowed, remaining, retry, _)) => Charged {
                    allowed,
                    retry_after: ms(retry),
                    view: BudgetView {
                        remaining,
                        capacity: cap as u64,
                        refill_per_sec: rate,
                    },
                },
                None => this.local.charge_account(
                    &account,
                    units,
                    &limits,
                    this.share(),
                    Instant::now(),
                ),
            }
        })
    }

    fn announce_breach(&self, account: &str) {
        let Some((mut conn, in_flight)) = self.command() else {
            return;
        };
        let (topic, message) = (self.control_topic(), format!("breach:{account}"));
        actix_rt::spawn(async move {
            let r: redis::RedisResult<i64> = redis::cmd("PUBLISH")
                .arg(topic)
                .arg(message)
                .query_async(&mut conn)
                .await;
            if let Err(e) = r {
                in_flight.0.failed(&e);
            }
        });
    }

    fn reserve_connection(&self, account: &str, max: u32) -> Pending<Result<u32, CapReached>> {
        if !self.is_up() {
            return Pending::Ready(self.local.reserve_connection(account, max));
        }
        let this = self.arc();
        let account = account.to_owned();
        Pending::later(async move {
            let Some((mut conn, _in_flight)) = this.command() else {
                return this.local.reserve_connection(&account, max);
            };
            let result: redis::RedisResult<(i64, i64)> = scripts::RESERVE
                .key(this.key("conns", &account))
                .key(format!("{}nodes", this.prefix))
                .arg(&this.member)
                .arg(max)
                .invoke_async(&mut conn)
                .await;
            match result {
                Ok((1, open)) => {
                    this.local.count_connection(&account);
                    Ok(open as u32)
                }
                Ok((_, open)) => Err(CapReached {
                    open: open as u32,
                    max,
                }),
                Err(e) => {
                    this.failed(&e);
                    this.local.reserve_connection(&account, max)
                }
            }
        })
    }

    fn release_connection(&self, account: &str) {
        self.local.release_connection(account);
        let Some((mut conn, in_flight)) = self.command() else {
            return;
        };
        let (key, member) = (self.key("conns", account), self.member.clone());
        actix_rt::spawn(async move {
            let r: redis::RedisResult<i64> = scripts::RELEASE
                .key(key)
                .arg(member)
                .invoke_async(&mut conn)
                .await;
            if let Err(e) = r {
                in_flight.0.failed(&e);
            }
        });
    }

    fn handshake(&self, account: &str, limits: &Limits) -> Pending<Result<(), Duration>> {
        let share = self.share();
        if share < 1.0 {
            return Pending::Ready(self.local.handshake(account, limits, share, Instant::now()));
        }
        let this = self.arc();
        let (account, limits) = (account.to_owned(), limits.clone());
        Pending::later(async move {
            let (cap, rate) = (
                f64::from(limits.handshake_burst),
                limits.handshake_refill_per_sec,
            );
            match this.bucket(this.key("hs", &account), cap, rate, 1.0).await {
                Some((true, ..)) => Ok(()),
                Some((false, _, retry, _)) => Err(ms(retry)),
                None => this
                    .local
                    .handshake(&account, &limits, this.share(), Instant::now()),
            }
        })
    }

    fn charge_key(&self, key: &str, cost: f64, capacity: f64, rate: f64) -> Pending<KeyCharge> {
        let share = self.share();
        if share < 1.0 {
            return Pending::Ready(self.local.charge_key(
                key,
                cost,
                capacity,
                rate,
                share,
                Instant::now(),
            ));
        }
        let this = self.arc();
        let key = key.to_owned();
        Pending::later(async move {
            match this
                .bucket(this.key("key", &key), capacity, rate, cost)
                .await
            {
                Some((allowed, remaining, retry, full)) => KeyCharge {
                    allowed,
                    limit: capacity as u64,
                    remaining,
                    reset: ms(full),
                    retry_after: ms(retry),
                },
                None => {
                    this.local
                        .charge_key(&key, cost, capacity, rate, this.share(), Instant::now())
                }
            }
        })
    }

    fn share(&self) -> f64 {
        if self.is_up() {
            1.0
        } else {
            1.0 / f64::from(self.live_nodes.load(Ordering::Acquire).max(1))
        }
    }

    fn is_up(&self) -> bool {
        self.pubsub_ok.load(Ordering::Acquire) && self.cmd_ok.load(Ordering::Acquire)
    }

    fn start(self: Arc<Self>) -> Pin<Box<dyn Future<Output = ()>>> {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(COMMAND_TIMEOUT))
            .set_response_timeout(Some(COMMAND_TIMEOUT))
            .set_number_of_retries(1)
            .set_max_delay(COMMAND_TIMEOUT);
        match ConnectionManager::new_lazy_with_config(self.client.clone(), config) {
            Ok(conn) => {
                let _ = self.conn.set(conn);
            }
            Err(e) => tracing::error!(error = %e, "cannot set up the Redis connection"),
        }
        if let Some(rx) = self.cmds_rx.lock().take() {
            actix_rt::spawn(subscriber::run(self.clone(), rx));
        }
        actix_rt::spawn(self.clone().lease_loop());
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

#[cfg(test)]
mod tests {
    use super::parse_seq;

    #[test]
    fn seq_is_read_from_the_scripted_message() {
        let msg = br#"{"type":"message","channel":"doc:1","seq":1796038664859005,"data":{"a":1}}"#;
        assert_eq!(parse_seq("doc:1", msg), Some(1_796_038_664_859_005));
        assert_eq!(parse_seq("doc:1", b"{}"), None);
    }
}
