//! Prometheus metrics (`GET /metrics`), all named `tidegate_*` (§6), the
//! process's own included (`tidegate_process_*`).
//!
//! Hot-path counters are plain atomics registered once; refusals go through
//! one labelled family so every layer and reason shows up under
//! `tidegate_rejections_total{layer,reason}` (§6). Durations are histograms
//! in seconds, named `*_duration_seconds`.

use std::future::Future;
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

pub mod history;
pub mod hooks;
pub mod idempotency;
mod layer;
pub mod presence;
pub mod pusher;
pub mod webhooks;

pub use history::History;
pub use hooks::HookMetrics;
pub use layer::Layer;
pub use webhooks::WebhookMetrics;

use crate::process_metrics::ProcessMetrics;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RejectLabels {
    layer: &'static str,
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ViaLabels {
    via: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TransportLabels {
    transport: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ScriptLabels {
    script: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabels {
    version: &'static str,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// 10 µs to ~2.6 s: an in-process fan-out is microseconds when healthy.
fn delivery_buckets() -> Histogram {
    Histogram::new(exponential_buckets(1e-5, 4.0, 10))
}

/// 100 µs to ~18 s: a handshake may wait on Redis.
fn handshake_buckets() -> Histogram {
    Histogram::new(exponential_buckets(1e-4, 3.0, 12))
}

/// 50 µs to ~8.9 s: one round trip to Redis, or a stall.
fn script_buckets() -> Histogram {
    Histogram::new(exponential_buckets(5e-5, 3.0, 12))
}

/// 1 to ~1.6 million units: a GraphQL operation's estimated price.
fn cost_buckets() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 4.0, 11))
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabels {
    operation: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AdminLabels {
    action: &'static str,
    outcome: &'static str,
}

pub struct Metrics {
    registry: Registry,
    pub connections_opened: Counter,
    /// Open connections by transport (`ws`, `sse`): [`Metrics::connection`].
    connections_open: Family<TransportLabels, Gauge>,
    pub messages_in: Counter,
    pub messages_out: Counter,
    pub messages_superseded: Counter,
    publishes: Family<ViaLabels, Counter>,
    rejections: Family<RejectLabels, Counter>,
    dry_run: Family<RejectLabels, Counter>,
    pub bridge_up: Gauge,
    /// Times this node began serving alone what Redis (or one Redis
    /// Cluster shard) holds: `tidegate_cluster_bridge_outages_total`.
    pub bridge_outages: Counter,
    pub bridge_pending: Gauge,
    pub live_nodes: Gauge,
    config_reloads: Family<OutcomeLabels, Counter>,
    pub outbound_queued: Gauge,
    /// Bytes of history held on this node, against `history.max_bytes`.
    pub history_bytes: Gauge,
    /// Bytes of history in Redis over the whole cluster, as this node's
    /// last index flush saw them, against `history.cluster_max_bytes`.
    pub redis_history_bytes: Gauge,
    /// History entries left out of the Redis index (its node buffer was
    /// full while Redis could not be reached).
    pub redis_history_unindexed: Counter,
    /// Channels the hub holds state for, sampled at scrape: flat under
    /// churn, or idle channels are not forgotten (the soak watches it).
    pub channels: Gauge,
    /// From a publish reaching the hub (from a client, HTTP or the cluster
    /// bridge) to its frame queued to every local subscriber.
    pub delivery_duration: Histogram,
    handshake_duration: Histograms<OutcomeLabels>,
    script_duration: Histograms<ScriptLabels>,
    process: ProcessMetrics,
    /// GraphQL (§12): estimated price per operation, by operation type.
    graphql_cost: Histograms<OperationLabels>,
    /// GraphQL: from the request to the response, by operation type.
    graphql_duration: Histograms<OperationLabels>,
    admin_actions: Family<AdminLabels, Counter>,
    /// Control messages from Redis that were not a node's (unsigned, badly
    /// signed, stale or replayed), ignored.
    control_rejected: Family<ReasonLabels, Counter>,
    /// Each rejection series seen so far, for the admin page's chart (the
    /// family cannot be listed); the counters are shared with it.
    rejection_series: dashmap::DashMap<(&'static str, &'static str), Counter>,
    pub webhooks: std::sync::Arc<WebhookMetrics>,
    /// §15: backend hook calls, durations, breakers, disagreements.
    pub hooks: std::sync::Arc<HookMetrics>,
    /// Tokio tasks and actix actors alive (`tidegate_runtime_alive_tasks`,
    /// `tidegate_actors`).
    pub alive: crate::alive::Alive,
    /// §13: members tracked, diffs sent.
    pub presence: presence::PresenceMetrics,
    /// §17: duplicates answered, keys held, evictions.
    pub idempotency: std::sync::Arc<idempotency::IdempotencyMetrics>,
    /// §16: each Pusher app's figures (`tidegate_pusher_app_*`).
    pub pusher: pusher::PusherMetrics,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics { .. }")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("tidegate");
        let process = ProcessMetrics::register(&mut registry);
        let m = Metrics {
            registry: Registry::default(),
            connections_opened: Counter::default(),
            connections_open: Family::default(),
            messages_in: Counter::default(),
            messages_out: Counter::default(),
            messages_superseded: Counter::default(),
            publishes: Family::default(),
            rejections: Family::default(),
            dry_run: Family::default(),
            bridge_up: Gauge::default(),
            bridge_outages: Counter::default(),
            bridge_pending: Gauge::default(),
            live_nodes: Gauge::default(),
            config_reloads: Family::default(),
            outbound_queued: Gauge::default(),
            history_bytes: Gauge::default(),
            redis_history_bytes: Gauge::default(),
            redis_history_unindexed: Counter::default(),
            channels: Gauge::default(),
            delivery_duration: delivery_buckets(),
            handshake_duration: Family::new_with_constructor(handshake_buckets),
            script_duration: Family::new_with_constructor(script_buckets),
            process,
            graphql_cost: Family::new_with_constructor(cost_buckets),
            graphql_duration: Family::new_with_constructor(delivery_buckets),
            admin_actions: Family::default(),
            control_rejected: Family::default(),
            rejection_series: dashmap::DashMap::new(),
            webhooks: Default::default(),
            hooks: Default::default(),
            alive: Default::default(),
            presence: Default::default(),
            idempotency: Default::default(),
            pusher: Default::default(),
        };
        m.webhooks.register(&mut registry);
        m.hooks.register(&mut registry);
        m.alive.register(&mut registry);
        m.presence.register(&mut registry);
        m.idempotency.register(&mut registry);
        m.pusher.register(&mut registry);
        registry.register(
            "connections_opened",
            "WebSocket connections accepted",
            m.connections_opened.clone(),
        );
        registry.register(
            "connections",
            "Connections open now, by transport (ws, sse, pusher)",
            m.connections_open.clone(),
        );
        registry.register(
            "messages_in",
            "Client frames admitted past every limit",
            m.messages_in.clone(),
        );
        registry.register(
            "messages_out",
            "Message frames queued to subscribers",
            m.messages_out.clone(),
        );
        registry.register(
            "messages_superseded",
            "Unsent messages of conflating channels replaced by a newer one with the same key (not dropped: §11)",
            m.messages_superseded.clone(),
        );
        registry.register(
            "publishes",
            "Messages published, by transport",
            m.publishes.clone(),
        );
        registry.register(
            "rejections",
            "Refusals, drops and closes for cause, by layer and reason",
            m.rejections.clone(),
        );
        registry.register(
            "dry_run_rejections",
            "What dry-run limits would have refused, by layer and reason",
            m.dry_run.clone(),
        );
        registry.register(
            "cluster_bridge_up",
            "1 when the cluster bridge is connected with its subscriptions restored",
            m.bridge_up.clone(),
        );
        registry.register(
            "cluster_bridge_outages",
            "Times this node found Redis (or one Redis Cluster shard) unreachable and began serving its channels and accounts alone",
            m.bridge_outages.clone(),
        );
        registry.register(
            "cluster_live_nodes",
            "Nodes holding a live lease at this node's last lease renewal",
            m.live_nodes.clone(),
        );
        registry.register(
            "cluster_bridge_pending_commands",
            "Messages queued toward the cluster bridge",
            m.bridge_pending.clone(),
        );
        registry.register(
            "outbound_queued_bytes",
            "Unsent outbound bytes over all sockets (sampled at scrape)",
            m.outbound_queued.clone(),
        );
        registry.register(
            "history_bytes",
            "Bytes of channel history held on this node (bounded by history.max_bytes)",
            m.history_bytes.clone(),
        );
        registry.register(
            "redis_history_bytes",
            "Bytes of channel history in Redis over the cluster, at this node's last index flush (bounded by history.cluster_max_bytes)",
            m.redis_history_bytes.clone(),
        );
        registry.register(
            "redis_history_unindexed",
            "History entries left out of the Redis history index while its buffer was full",
            m.redis_history_unindexed.clone(),
        );
        registry.register(
            "channels",
            "Channels the hub holds state for (sampled at scrape)",
            m.channels.clone(),
        );
        registry.register(
            "config_reloads",
            "Config reloads, by outcome",
            m.config_reloads.clone(),
        );
        registry.register_with_unit(
            "delivery_duration",
            "From a publish reaching the hub to its frame queued to every local subscriber",
            Unit::Seconds,
            m.delivery_duration.clone(),
        );
        registry.register_with_unit(
            "handshake_duration",
            "WebSocket handshakes, from the request to the upgrade or refusal, by outcome",
            Unit::Seconds,
            m.handshake_duration.clone(),
        );
        registry.register_with_unit(
            "redis_script_duration",
            "Round trips of the cluster bridge's Redis scripts, by script",
            Unit::Seconds,
            m.script_duration.clone(),
        );
        registry.register(
            "graphql_cost",
            "Estimated price of each GraphQL operation, in budget units, by operation type",
            m.graphql_cost.clone(),
        );
        registry.register_with_unit(
            "graphql_duration",
            "GraphQL operations over HTTP, from the request to the response, by operation type",
            Unit::Seconds,
            m.graphql_duration.clone(),
        );
        registry.register(
            "admin_actions",
            "Operator actions on the admin routes, by action and outcome",
            m.admin_actions.clone(),
        );
        registry.register(
            "cluster_control_rejected",
            "Control messages and presence events from Redis ignored because no node signed them, by reason",
            m.control_rejected.clone(),
        );
        let build_info: Family<VersionLabels, Gauge> = Family::default();
        build_info
            .get_or_create(&VersionLabels {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        registry.register("build_info", "Always 1; the broker's version", build_info);
        Metrics { registry, ..m }
    }

    /// A handshake ended (`accepted`, or `refused` with any status).
    pub fn handshake_done(&self, outcome: &'static str, started: Instant) {
        self.handshake_duration
            .get_or_create(&OutcomeLabels { outcome })
            .observe(started.elapsed().as_secs_f64());
    }

    /// A GraphQL operation was priced (`query`, `mutation`, `subscription`).
    pub fn graphql_cost(&self, operation: &'static str, cost: u64) {
        self.graphql_cost
            .get_or_create(&OperationLabels { operation })
            .observe(cost as f64);
    }

    /// A GraphQL request was answered.
    pub fn graphql_done(&self, operation: &'static str, started: Instant) {
        self.graphql_duration
            .get_or_create(&OperationLabels { operation })
            .observe(started.elapsed().as_secs_f64());
    }

    /// Runs one Redis script call and records how long it took.
    pub async fn time_script<T>(&self, script: &'static str, call: impl Future<Output = T>) -> T {
        let started = Instant::now();
        let out = call.await;
        self.script_duration
            .get_or_create(&ScriptLabels { script })
            .observe(started.elapsed().as_secs_f64());
        out
    }

    pub fn reject(&self, layer: Layer, reason: &'static str) {
        self.reject_n(layer, reason, 1);
    }

    pub fn reject_n(&self, layer: Layer, reason: &'static str, n: u64) {
        let key = (layer.as_str(), reason);
        if let Some(c) = self.rejection_series.get(&key) {
            c.inc_by(n);
            return;
        }
        let counter = self
            .rejections
            .get_or_create(&RejectLabels {
                layer: key.0,
                reason,
            })
            .clone();
        counter.inc_by(n);
        self.rejection_series.insert(key, counter);
    }

    /// Every rejection series with its total so far.
    pub fn rejection_totals(&self) -> Vec<(&'static str, &'static str, u64)> {
        self.rejection_series
            .iter()
            .map(|e| (e.key().0, e.key().1, e.value().get()))
            .collect()
    }

    /// Counts one operator action (`tidegate_admin_actions_total`).
    pub fn admin_action(&self, action: &'static str, outcome: &'static str) {
        self.admin_actions
            .get_or_create(&AdminLabels { action, outcome })
            .inc();
    }

    /// Counts one ignored control message (`unsigned`, `bad_signature`,
    /// `stale`, `replayed`).
    pub fn control_rejected(&self, reason: &'static str) {
        self.control_rejected
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }

    pub fn rejections(&self, layer: Layer, reason: &'static str) -> u64 {
        self.rejections
            .get_or_create(&RejectLabels {
                layer: layer.as_str(),
                reason,
            })
            .get()
    }

    pub fn dry_run(&self, layer: Layer, reason: &'static str) {
        self.dry_run
            .get_or_create(&RejectLabels {
                layer: layer.as_str(),
                reason,
            })
            .inc();
    }

    /// One more (`open`) or one fewer open connection of `transport`.
    pub fn connection(&self, transport: &'static str, open: bool) {
        let g = self
            .connections_open
            .get_or_create(&TransportLabels { transport });
        if open {
            g.inc();
        } else {
            g.dec();
        }
    }

    /// Open connections of `transport` now.
    pub fn connections(&self, transport: &'static str) -> i64 {
        self.connections_open
            .get_or_create(&TransportLabels { transport })
            .get()
    }

    pub fn published(&self, via: &'static str) {
        self.publishes.get_or_create(&ViaLabels { via }).inc();
    }

    pub fn reloaded(&self, outcome: &'static str) {
        self.config_reloads
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }

    /// The Prometheus text exposition.
    pub fn encode(&self) -> String {
        self.process.refresh();
        self.alive.refresh();
        self.pusher.refresh();
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
