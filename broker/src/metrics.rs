//! Prometheus metrics (`GET /metrics`), all named `tidegate_*`.
//!
//! Hot-path counters are plain atomics registered once; refusals go through
//! one labelled family so every layer and reason shows up under
//! `tidegate_rejections_total{layer,reason}` (§6).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Where a refusal happened (§6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layer {
    Handshake,
    Connection,
    Account,
    Rule,
    Outbound,
    Http,
}

impl Layer {
    pub const fn as_str(self) -> &'static str {
        match self {
            Layer::Handshake => "handshake",
            Layer::Connection => "connection",
            Layer::Account => "account",
            Layer::Rule => "rule",
            Layer::Outbound => "outbound",
            Layer::Http => "http",
        }
    }
}

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
struct OutcomeLabels {
    outcome: &'static str,
}

pub struct Metrics {
    registry: Registry,
    pub connections_opened: Counter,
    pub connections_open: Gauge,
    pub messages_in: Counter,
    pub messages_out: Counter,
    pub messages_superseded: Counter,
    publishes: Family<ViaLabels, Counter>,
    rejections: Family<RejectLabels, Counter>,
    dry_run: Family<RejectLabels, Counter>,
    pub bridge_up: Gauge,
    pub bridge_pending: Gauge,
    pub live_nodes: Gauge,
    config_reloads: Family<OutcomeLabels, Counter>,
    pub outbound_queued: Gauge,
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
        let m = Metrics {
            registry: Registry::default(),
            connections_opened: Counter::default(),
            connections_open: Gauge::default(),
            messages_in: Counter::default(),
            messages_out: Counter::default(),
            messages_superseded: Counter::default(),
            publishes: Family::default(),
            rejections: Family::default(),
            dry_run: Family::default(),
            bridge_up: Gauge::default(),
            bridge_pending: Gauge::default(),
            live_nodes: Gauge::default(),
            config_reloads: Family::default(),
            outbound_queued: Gauge::default(),
        };
        registry.register(
            "connections_opened",
            "WebSocket connections accepted",
            m.connections_opened.clone(),
        );
        registry.register(
            "connections",
            "WebSocket connections open now",
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
            "dry_run",
            "What dry-run limits would have refused, by layer and reason",
            m.dry_run.clone(),
        );
        registry.register(
            "cluster_bridge_up",
            "1 when the cluster bridge is connected with its subscriptions restored",
            m.bridge_up.clone(),
        );
        registry.register(
            "cluster_live_nodes",
            "Nodes holding a live lease at this node's last lease renewal",
            m.live_nodes.clone(),
        );
        registry.register(
            "cluster_bridge_pending",
            "Messages queued toward the cluster bridge",
            m.bridge_pending.clone(),
        );
        registry.register(
            "outbound_queued_bytes",
            "Unsent outbound bytes over all sockets (sampled at scrape)",
            m.outbound_queued.clone(),
        );
        registry.register(
            "config_reloads",
            "Config reloads, by outcome",
            m.config_reloads.clone(),
        );
        Metrics { registry, ..m }
    }

    pub fn reject(&self, layer: Layer, reason: &'static str) {
        self.rejections
            .get_or_create(&RejectLabels {
                layer: layer.as_str(),
                reason,
            })
            .inc();
    }

    pub fn reject_n(&self, layer: Layer, reason: &'static str, n: u64) {
        self.rejections
            .get_or_create(&RejectLabels {
                layer: layer.as_str(),
                reason,
            })
            .inc_by(n);
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
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
