//! Everything a node shares between its fronts (sockets, HTTP, gRPC, the
//! operator routes): config, hub, bridge, metrics, accounts, the charge
//! state (API keys, rules), bans, webhooks and the registries of live
//! connections. The node composes the layers below it and is handed to
//! every front; it knows none of them. Live connections are held as
//! [`Control`]s of the messages [`crate::account`] defines, and the bridge
//! reports upward through [`cluster::Events`], which the node implements.

pub mod operator;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use arc_swap::ArcSwap;
use dashmap::DashMap;

pub use operator::Admin;

use crate::account::{Accounts, Control, Reconfigure};
use crate::auth::{Authenticator, KeyError};
use crate::charge::{ApiKeys, Ledger};
use crate::cluster::redis::RedisTarget;
use crate::cluster::{
    self, Envelope, MemoryBridge, RedisBridge, SharedBridge, SharedBroker, SharedLimiterStore,
};
use crate::config::{ClusterMode, Config, DeliveryClasses};
use crate::gate::HandshakeGate;
use crate::hub::{HistoryLimits, Hub, OutboundGauge};
use crate::idempotency::{Claim, First, Idempotency, Keyed, Published, Seen, Waiter};
use crate::metrics::Metrics;
use crate::rules::RuleBuckets;
use crate::webhook::Webhooks;

pub struct Node {
    pub config: ArcSwap<Config>,
    pub auth: ArcSwap<Authenticator>,
    pub keys: ArcSwap<ApiKeys>,
    pub hub: Arc<Hub>,
    /// The link to the other nodes (memory on one node): its start, its
    /// health, a reload, the admin store. Its two halves are below.
    pub bridge: SharedBridge,
    /// The bridge's broker half: publish, subscribe, history.
    pub broker: SharedBroker,
    /// The bridge's distributed limiter store: account budgets, API-key
    /// and handshake buckets, connection caps, and this node's share.
    pub limiter_store: SharedLimiterStore,
    pub metrics: Arc<Metrics>,
    pub accounts: Arc<Accounts>,
    pub gate: Arc<HandshakeGate>,
    pub rules: RuleBuckets,
    /// Operators' bans and the admin page's history (§10).
    pub admin: Admin,
    /// Outbound webhooks (§9).
    pub webhooks: Arc<Webhooks>,
    /// Backend hooks (§15).
    pub hooks: Arc<crate::hooks::Hooks>,
    /// Idempotency keys published or in flight (§17).
    pub idempotency: Arc<Idempotency>,
    /// Who is in each presence channel (§13).
    pub presence: Arc<crate::presence::Presence>,
    /// The listeners' certificates (swapped on SIGHUP).
    pub tls: crate::tls::Listeners,
    /// Live sockets, for config reloads, draining and metrics.
    pub sockets: DashMap<u64, SocketHandle>,
    /// Open gRPC `Subscribe` and `PublishStream` streams, so an operator's
    /// ban or disconnect (§10) ends them as it closes sockets.
    pub grpc_streams: DashMap<u64, StreamHandle>,
    /// Sockets this process can hold before running out of descriptors
    /// (its soft `RLIMIT_NOFILE` minus a reserve, read at start): past it
    /// handshakes get 503 instead of the accept loop failing with EMFILE.
    pub fd_socket_cap: usize,
    ready: AtomicBool,
    draining: AtomicBool,
    next_conn: AtomicU64,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Node({})", self.config.load().node.id)
    }
}

/// Why a node could not be built from a config.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// A verification key's file (`[auth]`).
    #[error("{0}")]
    Keys(#[from] KeyError),
    /// A listener's certificate or key.
    #[error("TLS: {0}")]
    Tls(#[from] crate::tls::TlsError),
    /// The Redis URL or its TLS files (never quoting the URL).
    #[error("cluster: {0}")]
    Redis(#[from] redis::RedisError),
}

/// How a publish began ([`Node::begin_publish`]).
pub enum Begun {
    /// Answered already: a duplicate of a key published in the window.
    Now(Published),
    /// Handed to the bridge: its answer goes to [`Node::finish_publish`]
    /// with the key's claim, if keyed.
    Publishing(Option<First>, cluster::Pending<Published>),
    /// A duplicate of a publish in flight: its `seq`, then
    /// [`Node::waited`]; `None`: it was given up, begin again.
    Waiting(Waiter),
}

/// What the node keeps of each live socket.
#[derive(Debug, Clone)]
pub struct SocketHandle {
    /// How the node, the drain and operators close it, and a reload hands
    /// it new limits (shared with its account's supervisor).
    pub control: Control,
    /// The connection id shown to clients (`n1-8f3a`).
    pub label: Arc<str>,
    pub account: Arc<str>,
    /// The client address, for IP bans.
    pub ip: std::net::IpAddr,
    /// The token's `plan` claim, to resolve limits again on reload.
    pub plan: Option<String>,
    pub gauge: Arc<OutboundGauge>,
    /// The user its dialect signed it in as (a Pusher app's
    /// `pusher:signin`, keyed with the app), set once signed in, so an
    /// operator's `Who::User` close finds the user's sockets.
    pub user: Option<Arc<str>>,
}

/// What the node keeps of each open gRPC stream: whose it is,
/// and how to tell its guard to end it.
#[derive(Debug, Clone)]
pub struct StreamHandle {
    pub account: Arc<str>,
    /// The peer's address, for IP bans (unknown on odd transports).
    pub ip: Option<std::net::IpAddr>,
    /// Takes the operator's reason (`banned` / `disconnected`).
    pub end: tokio::sync::mpsc::UnboundedSender<&'static str>,
}

/// The Pusher apps' ids and accounts, for their figures (§16).
fn pusher_apps(config: &Config) -> impl Iterator<Item = (&str, &str)> {
    config
        .pusher_apps
        .iter()
        .map(|a| (a.id.as_str(), a.account.as_str()))
}

pub fn history_limits(config: &Config) -> HistoryLimits {
    HistoryLimits {
        size: config.history.size,
        ttl: std::time::Duration::from_millis(config.history.ttl_ms),
        max_bytes: usize::try_from(config.history.max_bytes).unwrap_or(usize::MAX),
    }
}

impl Node {
    pub fn new(config: Config) -> Result<Arc<Node>, NodeError> {
        // One TLS provider for the process, before any client is built.
        crate::tls::provider();
        let metrics = Arc::new(Metrics::new());
        let hub = Arc::new(Hub::new(history_limits(&config), metrics.clone()));
        hub.set_delivery(DeliveryClasses::new(&config.namespaces));
        let auth = Authenticator::from_config(&config.auth, &config.jwt_keys)?;
        let tls = crate::tls::Listeners::load(&config)?;
        let keys = ApiKeys::new(&config);
        let gate = HandshakeGate::new(&config.handshake);
        let admin = Admin::default();
        admin.bans.set_v6_prefix(config.handshake.ipv6_prefix_len);
        // One Redis target and one command connection for the bridge,
        // presence and the webhooks (the bridge makes it at start).
        let redis = match config.cluster.mode {
            ClusterMode::Memory => None,
            ClusterMode::Redis | ClusterMode::RedisCluster => Some((
                RedisTarget::open(&config.cluster)?,
                cluster::redis::Shared::default(),
            )),
        };
        let webhooks = Webhooks::new(
            &config,
            metrics.webhooks.clone(),
            redis.as_ref().map(|(_, link)| link.clone()),
        );
        let hooks = Arc::new(crate::hooks::Hooks::new(
            &config.hooks,
            metrics.hooks.clone(),
        ));
        let hook = Arc::downgrade(&webhooks);
        let apps = metrics.clone();
        metrics.pusher.configure(pusher_apps(&config));
        hub.on_occupancy(Box::new(move |channel, occupied| {
            if let Some(w) = hook.upgrade() {
                w.occupancy_changed(channel, occupied);
            }
            apps.pusher.occupancy(channel, occupied);
        }));
        // Presence is shared through the same Redis or Redis Cluster.
        let presence_redis = redis.as_ref().map(|(target, link)| {
            crate::presence::RedisPresence::new(crate::presence::RedisSettings {
                target: target.clone(),
                link: link.clone(),
                sharded: config.cluster.mode == ClusterMode::RedisCluster,
                prefix: &config.cluster.key_prefix,
                node: &config.node.id,
                lease_ms: config.cluster.lease_ms,
                secrets: config.cluster_secrets.clone(),
                metrics: metrics.clone(),
            })
        });
        let presence = crate::presence::Presence::new(
            metrics.clone(),
            Arc::downgrade(&webhooks),
            presence_redis,
        );
        let idempotency = Idempotency::new(
            config.publish.idempotency_window_ms,
            config.publish.idempotency_max_keys,
            metrics.idempotency.clone(),
        );
        Ok(Arc::new_cyclic(|node: &std::sync::Weak<Node>| {
            let (bridge, broker, limiter_store) = match redis {
                None => {
                    // A single node's bridge is always up, and alone.
                    metrics.bridge_up.set(1);
                    metrics.live_nodes.set(1);
                    cluster::parts(Arc::new(MemoryBridge::new(hub.clone())))
                }
                Some((target, link)) => {
                    let events: std::sync::Weak<dyn cluster::Events> = node.clone();
                    cluster::parts(RedisBridge::new(
                        target,
                        link,
                        &config,
                        hub.clone(),
                        metrics.clone(),
                        events,
                    ))
                }
            };
            Node {
                accounts: Accounts::new(metrics.clone()),
                gate,
                rules: RuleBuckets::default(),
                admin,
                webhooks,
                hooks,
                idempotency,
                presence,
                tls,
                config: ArcSwap::from_pointee(config),
                auth: ArcSwap::from_pointee(auth),
                keys: ArcSwap::from_pointee(keys),
                hub,
                bridge,
                broker,
                limiter_store,
                metrics,
                sockets: DashMap::new(),
                grpc_streams: DashMap::new(),
                fd_socket_cap: crate::process_metrics::soft_fd_limit().map_or(usize::MAX, |l| {
                    usize::try_from(crate::process_metrics::socket_capacity(l))
                        .unwrap_or(usize::MAX)
                }),
                ready: AtomicBool::new(false),
                draining: AtomicBool::new(false),
                // Random start so connection ids differ across restarts.
                next_conn: AtomicU64::new(u64::from(rand::random::<u16>()) << 16),
            }
        }))
    }

    /// Open sockets past which a new one is shed with 1013: the configured
    /// cap or what the descriptor limit allows, whichever is lower.
    pub fn socket_cap(&self) -> usize {
        let configured = self.config.load().handshake.node_max_sockets as usize;
        configured.min(self.fd_socket_cap)
    }

    /// A fresh connection number (unique on this node).
    pub fn next_conn(&self) -> u64 {
        self.next_conn.fetch_add(1, Ordering::Relaxed)
    }

    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Release);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire) && !self.is_draining()
    }

    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::Release);
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// Applies a new, already validated config to the running node: open
    /// sockets get their new limits (balances kept), API keys keep their
    /// buckets, node-level limits change on their next use, the key and
    /// certificate files are read again. Nothing changes when a file is
    /// unusable; the problems say which.
    pub fn reload(&self, config: Config) -> Result<(), Vec<String>> {
        let auth = Authenticator::from_config(&config.auth, &config.jwt_keys)
            .map_err(|e| vec![e.to_string()])?;
        self.tls.reload(&config)?;
        let keys = ApiKeys::new(&config);
        self.hub.set_history_limits(history_limits(&config));
        self.bridge.reconfigure(&config);
        self.idempotency.reconfigure(
            config.publish.idempotency_window_ms,
            config.publish.idempotency_max_keys,
        );
        self.admin
            .bans
            .set_v6_prefix(config.handshake.ipv6_prefix_len);
        self.webhooks.apply(&crate::webhook::configured(&config));
        self.hooks.apply(&config.hooks);
        self.metrics.pusher.configure(pusher_apps(&config));
        self.hub
            .set_delivery(DeliveryClasses::new(&config.namespaces));
        let config = Arc::new(config);
        self.auth.store(Arc::new(auth));
        self.keys.store(Arc::new(keys));
        self.config.store(config.clone());
        let mut kept = 0usize;
        for s in self.sockets.iter() {
            match config.limits_for(&s.account, s.plan.as_deref()) {
                Ok(limits) => s.control.reconfigure(Reconfigure { limits }),
                // The socket's plan is gone from the new file: it keeps the
                // limits it has until it reconnects (and is refused).
                Err(_) => kept += 1,
            }
        }
        tracing::info!(
            sockets = self.sockets.len(),
            kept_old_limits = kept,
            "config reloaded"
        );
        Ok(())
    }

    /// Reads the key and certificate files of the running config again
    /// (SIGHUP on a node without a config file): a rotated JWKS, a new
    /// public key, a renewed certificate.
    pub fn reload_files(&self) -> Result<(), Vec<String>> {
        let config = self.config.load_full();
        let auth = Authenticator::from_config(&config.auth, &config.jwt_keys)
            .map_err(|e| vec![e.to_string()])?;
        self.tls.reload(&config)?;
        self.auth.store(Arc::new(auth));
        tracing::info!("key and certificate files reloaded");
        Ok(())
    }

    /// A message got its `seq`: tell the webhooks (once per message, by the
    /// node that published it), with its idempotency key if it had one.
    pub fn published(&self, channel: &str, seq: u64, data: &str, key: Option<&str>) {
        self.webhooks.published(channel, seq, data, key);
    }

    /// Whether `key` on `channel` is held (published in the window, or in
    /// flight), so the publish is priced as a duplicate: the base price
    /// only (§17). A key that is not known here may still be a duplicate
    /// another node published (the bridge says so; the front then gives
    /// back the difference).
    pub fn is_duplicate(&self, channel: &str, key: Option<Keyed<'_>>) -> bool {
        key.is_some_and(|k| {
            let now = std::time::Instant::now();
            self.idempotency.seen(k.on(channel), now) == Seen::Held
        })
    }

    /// The first step of a publish (charged already), for a front that
    /// cannot wait in place (the socket actor): a keyed publish claims its
    /// key first. Continue with [`Node::finish_publish`] or
    /// [`Node::waited`]; [`Node::publish`] does both.
    pub fn begin_publish(
        &self,
        channel: &str,
        data: &str,
        via: &'static str,
        key: Option<Keyed<'_>>,
    ) -> Begun {
        let Some(k) = key else {
            return Begun::Publishing(None, self.broker.publish(channel, data, None));
        };
        let now = std::time::Instant::now();
        match self.idempotency.claim(k.on(channel), now) {
            Claim::First(first) => {
                Begun::Publishing(Some(first), self.broker.publish(channel, data, key))
            }
            Claim::Known(seq) => Begun::Now(self.waited(via, seq)),
            Claim::Wait(waiter) => Begun::Waiting(waiter),
        }
    }

    /// The bridge answered a publish [`Node::begin_publish`] started:
    /// records the key's `seq`, then counts the message under
    /// `tidegate_publishes_total{via}` and hands it to the webhooks
    /// (`message.published`, §9), or counts a duplicate another node
    /// published.
    pub fn finish_publish(
        &self,
        channel: &str,
        data: &str,
        via: &'static str,
        key: Option<&str>,
        first: Option<First>,
        published: Published,
    ) -> Published {
        if let Some(first) = first {
            first.done(published.seq, std::time::Instant::now());
        }
        if published.duplicate {
            self.metrics.idempotency.duplicate(via);
        } else {
            self.metrics.published(via);
            self.published(channel, published.seq, data, key);
        }
        published
    }

    /// A duplicate's answer: the first one's `seq` (counted).
    pub fn waited(&self, via: &'static str, seq: u64) -> Published {
        self.metrics.idempotency.duplicate(via);
        Published {
            seq,
            duplicate: true,
        }
    }

    /// Publishes a message (charged already: see [`crate::charge`])
    /// through the bridge (local or cluster), once per idempotency key in
    /// the window (§17): a duplicate resolves to the first one's `seq`,
    /// waiting for it while it is in flight.
    pub async fn publish(
        &self,
        channel: &str,
        data: &str,
        via: &'static str,
        key: Option<Keyed<'_>>,
    ) -> Published {
        loop {
            match self.begin_publish(channel, data, via, key) {
                Begun::Now(published) => return published,
                Begun::Publishing(first, pending) => {
                    let published = pending.wait().await;
                    let key = key.map(|k| k.key);
                    return self.finish_publish(channel, data, via, key, first, published);
                }
                Begun::Waiting(waiter) => {
                    if let Some(seq) = waiter.wait().await {
                        return self.waited(via, seq);
                    }
                    // The first was given up: claim the key again.
                }
            }
        }
    }

    /// The charge layer over this node's state: where every front charges
    /// (see [`Ledger::charge`]).
    pub fn ledger(&self) -> Ledger<'_> {
        Ledger::new(&self.metrics, &*self.limiter_store, &self.rules)
    }

    /// Unsent outbound bytes over all sockets right now.
    pub fn outbound_queued(&self) -> usize {
        self.sockets.iter().map(|s| s.gauge.pending()).sum()
    }
}

/// The bridge's reports from other nodes.
impl cluster::Events for Node {
    fn breach(&self, account: &str) {
        self.accounts.breach(account);
    }

    fn operator(&self, envelope: Envelope) {
        operator::on_broadcast(self, envelope);
    }
}
