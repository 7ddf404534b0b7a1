//! The overview's Pusher apps (§16: "every figure by app in the admin
//! overview"). Each node reads its apps' aggregates (`metrics/pusher.rs`,
//! kept as connections open and channels fill, never a walk of sockets)
//! and its apps' accounts from the same per-account sums the "accounts
//! nearest their limits" list is made of; the overview sums the nodes'
//! figures as it sums their connections.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::figures::{AccountUse, WebhookEndpoint};
use crate::node::Node;

/// Refusals of one layer and reason, since the node started.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct AppRefusal {
    pub layer: String,
    pub reason: String,
    pub count: u64,
}

/// One app, on one node or summed over the cluster.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AppStats {
    /// `app_id`, and the key clients connect with (never the secret).
    pub id: String,
    pub key: String,
    /// The Tidegate account the app is charged as.
    pub account: String,
    /// Open `/app/{key}` connections.
    pub connections: u64,
    /// Channels with a subscriber (on each node; summed, a channel with
    /// subscribers on two nodes counts on both).
    pub channels: u64,
    /// Users in presence channels, one per user and channel (a user with
    /// connections on two nodes counts on both).
    pub presence_users: u64,
    /// `client-*` events published, since each node started.
    pub client_events: u64,
    /// Events triggered through the HTTP API (`events`, each event of a
    /// `batch_events`), since each node started.
    pub api_events: u64,
    /// The app's account's refusals by layer and reason, since each node
    /// started.
    pub refusals: Vec<AppRefusal>,
    /// The app's account against its plan, as `accounts` shows it.
    pub limits: AccountUse,
    /// The app's webhook endpoints as the answering node sees them (§9's
    /// health); empty in a node's summary.
    #[serde(default)]
    pub webhooks: Vec<WebhookEndpoint>,
}

/// This node's apps, in config order. `accounts` is every account's use on
/// this node (before the top-N cut).
pub fn node_apps(node: &Node, accounts: &[AccountUse]) -> Vec<AppStats> {
    let config = node.config.load();
    config
        .pusher_apps
        .iter()
        .map(|app| {
            let f = node
                .metrics
                .pusher
                .app(&app.id)
                .map(|t| t.figures())
                .unwrap_or_default();
            let limits = accounts
                .iter()
                .find(|a| a.account == app.account)
                .cloned()
                .unwrap_or_else(|| {
                    let limits = config.account_limits(&app.account);
                    AccountUse {
                        account: app.account.clone(),
                        connections: 0,
                        max_connections: limits.max_connections,
                        budget_remaining: None,
                        budget_capacity: None,
                        pressure: 0.0,
                    }
                });
            AppStats {
                id: app.id.clone(),
                key: app.key.clone(),
                account: app.account.clone(),
                connections: f.connections,
                channels: f.channels,
                presence_users: f.presence_users,
                client_events: f.client_events,
                api_events: f.api_events,
                refusals: f
                    .refusals
                    .into_iter()
                    .map(|(layer, reason, count)| AppRefusal {
                        layer: layer.into(),
                        reason: reason.into(),
                        count,
                    })
                    .collect(),
                limits,
                webhooks: Vec::new(),
            }
        })
        .collect()
}

/// Sums the nodes' app lists, in the order given (the answering node's
/// first, in its config's order), then any app only later lists have, in
/// the order first seen. The account's use merges as `accounts` does.
pub fn merge(lists: impl IntoIterator<Item = Vec<AppStats>>) -> Vec<AppStats> {
    let mut order: Vec<String> = Vec::new();
    let mut by_id: HashMap<String, AppStats> = HashMap::new();
    for list in lists {
        for a in list {
            match by_id.get_mut(&a.id) {
                Some(m) => add(m, a),
                None => {
                    order.push(a.id.clone());
                    by_id.insert(a.id.clone(), a);
                }
            }
        }
    }
    order
        .into_iter()
        .filter_map(|id| by_id.remove(&id))
        .map(|mut a| {
            a.refusals
                .sort_by(|x, y| (&x.layer, &x.reason).cmp(&(&y.layer, &y.reason)));
            a.limits.score();
            a
        })
        .collect()
}

fn add(m: &mut AppStats, a: AppStats) {
    m.connections += a.connections;
    m.channels += a.channels;
    m.presence_users += a.presence_users;
    m.client_events += a.client_events;
    m.api_events += a.api_events;
    for r in a.refusals {
        match m
            .refusals
            .iter_mut()
            .find(|x| x.layer == r.layer && x.reason == r.reason)
        {
            Some(x) => x.count += r.count,
            None => m.refusals.push(r),
        }
    }
    m.limits.add(&a.limits);
}

/// Each app's webhook endpoints (its `webhooks` entries, `pusher.{id}.{n}`
/// in §9's list), from the answering node's list.
pub fn attach_webhooks(node: &Node, apps: &mut [AppStats], all: &[WebhookEndpoint]) {
    let config = node.config.load();
    for a in apps {
        let Some(app) = config.pusher_apps.iter().find(|p| p.id == a.id) else {
            continue;
        };
        a.webhooks = all
            .iter()
            .filter(|w| app.webhooks.iter().any(|e| e.id == w.id))
            .cloned()
            .collect();
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(in crate::admin) fn app(id: &str, conns: u64, remaining: u64) -> AppStats {
        AppStats {
            id: id.into(),
            key: format!("{id}-key"),
            account: format!("{id}-account"),
            connections: conns,
            channels: 1,
            presence_users: 1,
            client_events: 2,
            api_events: 3,
            refusals: vec![AppRefusal {
                layer: "connection".into(),
                reason: "rate_limited".into(),
                count: 4,
            }],
            limits: AccountUse {
                account: format!("{id}-account"),
                connections: conns as u32,
                max_connections: 10,
                budget_remaining: Some(remaining),
                budget_capacity: Some(100),
                pressure: 0.0,
            },
            webhooks: Vec::new(),
        }
    }

    #[test]
    fn apps_are_summed_over_nodes_in_the_first_lists_order() {
        let apps = merge([
            vec![app("a", 3, 40), app("c", 1, 100)],
            vec![app("b", 2, 90), app("a", 1, 50)],
        ]);
        let ids: Vec<&str> = apps.iter().map(|a| a.id.as_str()).collect();
        assert_eq!(ids, ["a", "c", "b"]);
        let a = &apps[0];
        assert_eq!(
            (a.connections, a.channels, a.client_events, a.api_events),
            (4, 2, 4, 6)
        );
        assert_eq!(a.refusals[0].count, 8);
        assert_eq!(
            (a.limits.connections, a.limits.budget_remaining),
            (4, Some(40))
        );
        assert!(
            (a.limits.pressure - 0.6).abs() < 1e-9,
            "{}",
            a.limits.pressure
        );
    }
}
