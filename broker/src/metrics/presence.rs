//! The presence metrics of §13, registered in the node's registry.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Debug, Default)]
pub struct PresenceMetrics {
    /// This node's tracked members (its own subscribed connections of
    /// presence channels).
    pub members: Gauge,
    /// `presence_diff` frames sent (one per window per watching socket).
    pub diffs: Counter,
    /// Unsolicited `presence_stats` frames sent above the threshold.
    pub stats: Counter,
}

impl PresenceMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "presence_members",
            "Members of presence channels tracked by this node (its own connections)",
            self.members.clone(),
        );
        registry.register(
            "presence_diffs",
            "presence_diff frames sent to subscribers",
            self.diffs.clone(),
        );
        registry.register(
            "presence_stats_sent",
            "Unsolicited presence_stats frames sent above join_leave_max_members",
            self.stats.clone(),
        );
    }
}
