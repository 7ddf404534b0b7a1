//! The figures the overview and its per-app view both show: an account's
//! use of its limits, a webhook endpoint's health.

use serde::{Deserialize, Serialize};

/// One account near its limits, on one node or summed over the cluster.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AccountUse {
    pub account: String,
    pub connections: u32,
    pub max_connections: u32,
    /// The account budget as of its last charge (cluster-wide).
    pub budget_remaining: Option<u64>,
    pub budget_capacity: Option<u64>,
    /// The larger of connections/cap and budget spent/capacity, 0–1.
    pub pressure: f64,
}

impl AccountUse {
    /// Adds another node's use of the same account: connections summed,
    /// the budget view the lowest seen.
    pub(super) fn add(&mut self, a: &AccountUse) {
        self.connections += a.connections;
        self.max_connections = self.max_connections.max(a.max_connections);
        if a.budget_remaining < self.budget_remaining || self.budget_remaining.is_none() {
            self.budget_remaining = a.budget_remaining.or(self.budget_remaining);
            self.budget_capacity = a.budget_capacity.or(self.budget_capacity);
        }
    }

    pub(super) fn score(&mut self) {
        let conns = f64::from(self.connections) / f64::from(self.max_connections.max(1));
        let budget = match (self.budget_remaining, self.budget_capacity) {
            (Some(r), Some(c)) if c > 0 => 1.0 - r as f64 / c as f64,
            _ => 0.0,
        };
        self.pressure = conns.max(budget).clamp(0.0, 1.0);
    }
}

/// Webhook endpoints and their health (§9), when the node has any.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct WebhookEndpoint {
    pub id: String,
    pub healthy: bool,
    pub queued: u64,
}
