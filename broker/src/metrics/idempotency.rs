//! The idempotency metrics of §17, registered in the node's registry.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ApiLabels {
    api: &'static str,
}

#[derive(Debug, Default)]
pub struct IdempotencyMetrics {
    /// Keys this node holds now (in flight or published in the window).
    pub keys: Gauge,
    /// Keys dropped before their window passed because the table was full
    /// (`idempotency_max_keys`): a retry of one of them may publish again.
    pub evictions: Counter,
    /// Keyed publishes decided by this node alone because Redis could not
    /// be reached: a retry landing on another node may publish twice.
    pub unshared: Counter,
    duplicates: Family<ApiLabels, Counter>,
}

impl IdempotencyMetrics {
    /// A publish answered as a duplicate, by the API it came through
    /// (`ws`, `http`, `client`, `grpc`, `graphql`).
    pub fn duplicate(&self, api: &'static str) {
        self.duplicates.get_or_create(&ApiLabels { api }).inc();
    }

    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "publish_duplicates",
            "Publishes answered with the first seq of their idempotency key instead of publishing again, by API",
            self.duplicates.clone(),
        );
        registry.register(
            "idempotency_keys",
            "Idempotency keys this node holds (in flight or published within idempotency_window_ms)",
            self.keys.clone(),
        );
        registry.register(
            "idempotency_evictions",
            "Idempotency keys evicted before their window passed (idempotency_max_keys reached)",
            self.evictions.clone(),
        );
        registry.register(
            "idempotency_unshared",
            "Keyed publishes checked on this node only because Redis was unreachable",
            self.unshared.clone(),
        );
    }
}
