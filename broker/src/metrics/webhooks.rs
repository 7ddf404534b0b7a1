//! The webhook metrics of §9, registered in the node's registry.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndpointOutcome {
    endpoint: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndpointLabel {
    endpoint: String,
}

/// Outcomes counted in `tidegate_webhook_deliveries_total`.
pub mod outcome {
    /// 2xx.
    pub const DELIVERED: &str = "delivered";
    /// A failed attempt that will be retried after a backoff.
    pub const RETRY: &str = "retry";
    /// 429/503 with `Retry-After`: the endpoint paused, the event kept.
    pub const PAUSED: &str = "paused";
    /// Another 4xx: final for that event.
    pub const REJECTED: &str = "rejected";
    /// 410: final, and the endpoint disabled until its config changes.
    pub const GONE: &str = "gone";
    /// Dropped as the oldest of a full queue.
    pub const DROPPED: &str = "dropped";
    /// Pending when its endpoint was removed or re-targeted by a reload.
    pub const DISCARDED: &str = "discarded";
}

#[derive(Debug, Default)]
pub struct WebhookMetrics {
    deliveries: Family<EndpointOutcome, Counter>,
    queue: Family<EndpointLabel, Gauge>,
    healthy: Family<EndpointLabel, Gauge>,
}

impl WebhookMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "webhook_deliveries",
            "Webhook attempts and final fates of events, by endpoint and outcome",
            self.deliveries.clone(),
        );
        registry.register(
            "webhook_queue",
            "Events pending for a webhook endpoint",
            self.queue.clone(),
        );
        registry.register(
            "webhook_endpoint_healthy",
            "0 while a webhook endpoint is unhealthy (failing 10 minutes) or disabled (410)",
            self.healthy.clone(),
        );
    }

    pub fn count(&self, endpoint: &str, outcome: &'static str, n: u64) {
        self.deliveries
            .get_or_create(&EndpointOutcome {
                endpoint: endpoint.to_owned(),
                outcome,
            })
            .inc_by(n);
    }

    pub fn set_queue(&self, endpoint: &str, len: usize) {
        self.queue
            .get_or_create(&EndpointLabel {
                endpoint: endpoint.to_owned(),
            })
            .set(len as i64);
    }

    pub fn set_healthy(&self, endpoint: &str, healthy: bool) {
        self.healthy
            .get_or_create(&EndpointLabel {
                endpoint: endpoint.to_owned(),
            })
            .set(i64::from(healthy));
    }

    /// What the gauges say of an endpoint now: healthy, and events pending
    /// (in cluster mode the shared stream's length). For the admin page.
    pub fn snapshot(&self, endpoint: &str) -> (bool, u64) {
        let label = EndpointLabel {
            endpoint: endpoint.to_owned(),
        };
        let healthy = self.healthy.get(&label).is_none_or(|g| g.get() != 0);
        let queued = self.queue.get(&label).map_or(0, |g| g.get().max(0) as u64);
        (healthy, queued)
    }

    /// An endpoint removed by a reload no longer reports a queue or health.
    pub fn forget(&self, endpoint: &str) {
        let label = EndpointLabel {
            endpoint: endpoint.to_owned(),
        };
        self.queue.remove(&label);
        self.healthy.remove(&label);
    }
}
