//! `GET /v1/admin/overview`: the page's data. Each node sums up its own
//! state (aggregates and top-N lists, never one row per socket, so it stays
//! small with 100,000 sockets open); in a cluster every node also puts its
//! summary in Redis, and the overview merges the summaries of all live
//! nodes.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::apps::AppStats;
pub use super::figures::{AccountUse, WebhookEndpoint};
use crate::bans::BanEntry;
use crate::clock::unix_ms;
use crate::metrics::history::{BUCKET_MS, BUCKETS, Sample};
use crate::node::Node;

/// Accounts listed as nearest their limits.
const TOP_ACCOUNTS: usize = 20;

/// Rejections of one layer and reason in one bucket.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RejectionPoint {
    /// The bucket's start, Unix ms.
    pub at: u64,
    pub layer: String,
    pub reason: String,
    pub count: u64,
}

/// One node's summary.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStats {
    pub id: String,
    pub connections: u64,
    pub messages_in_per_sec: f64,
    pub messages_out_per_sec: f64,
    pub bridge_up: bool,
    pub draining: bool,
    /// When this summary was made, Unix ms.
    pub at: u64,
    #[serde(default)]
    pub accounts: Vec<AccountUse>,
    #[serde(default)]
    pub rejections: Vec<RejectionPoint>,
    /// The Pusher apps configured on this node (§16), in config order.
    #[serde(default)]
    pub apps: Vec<AppStats>,
}

/// This node's summary now.
pub fn node_stats(node: &Node) -> NodeStats {
    let now = Sample::of(&node.metrics);
    let samples = node.admin.history.samples();
    let rate = |f: fn(&Sample) -> u64| {
        samples.back().map_or(0.0, |last| {
            let secs = now.at.saturating_sub(last.at) as f64 / 1000.0;
            // Right after a sample, use the whole last bucket.
            match samples.iter().rev().nth(1) {
                Some(prev) if secs < 1.0 => {
                    let secs = last.at.saturating_sub(prev.at) as f64 / 1000.0;
                    (f(last) - f(prev)) as f64 / secs.max(0.001)
                }
                _ => (f(&now) - f(last)) as f64 / secs.max(0.001),
            }
        })
    };
    let config = node.config.load();
    let mut accounts = account_uses(node);
    let apps = super::apps::node_apps(node, &accounts);
    keep_top(&mut accounts);
    NodeStats {
        id: config.node.id.clone(),
        connections: node.sockets.len() as u64,
        messages_in_per_sec: rate(|s| s.messages_in),
        messages_out_per_sec: rate(|s| s.messages_out),
        bridge_up: node.bridge.is_up(),
        draining: node.is_draining(),
        at: now.at,
        accounts,
        rejections: rejection_points(&samples, &now),
        apps,
    }
}

/// Per-bucket rejection counts from consecutive samples, the bucket in
/// progress included.
fn rejection_points(samples: &VecDeque<Sample>, now: &Sample) -> Vec<RejectionPoint> {
    let mut out = Vec::new();
    let all: Vec<&Sample> = samples.iter().chain(std::iter::once(now)).collect();
    for pair in all.windows(2) {
        let (prev, cur) = (pair[0], pair[1]);
        let at = cur.at / BUCKET_MS * BUCKET_MS;
        for (&(layer, reason), &total) in &cur.rejections {
            let before = prev.rejections.get(&(layer, reason)).copied().unwrap_or(0);
            if total > before {
                out.push(RejectionPoint {
                    at,
                    layer: layer.into(),
                    reason: reason.into(),
                    count: total - before,
                });
            }
        }
    }
    out
}

/// Every account's use on this node (the top-N cut is the caller's).
fn account_uses(node: &Node) -> Vec<AccountUse> {
    let config = node.config.load();
    let mut by_account: HashMap<Arc<str>, (u32, Option<String>)> = HashMap::new();
    for s in node.sockets.iter() {
        let e = by_account
            .entry(s.account.clone())
            .or_insert((0, s.plan.clone()));
        e.0 += 1;
    }
    for v in node.accounts.views.iter() {
        by_account.entry(v.key().clone()).or_insert((0, None));
    }
    by_account
        .into_iter()
        .map(|(account, (connections, plan))| {
            let limits = config
                .limits_for(&account, plan.as_deref())
                .unwrap_or_else(|_| config.account_limits(&account));
            let view = node.accounts.views.get(&account).map(|v| *v);
            let mut u = AccountUse {
                account: account.to_string(),
                connections,
                max_connections: limits.max_connections,
                budget_remaining: view.map(|v| v.remaining),
                budget_capacity: view.map(|v| v.capacity),
                pressure: 0.0,
            };
            u.score();
            u
        })
        .collect()
}

fn keep_top(list: &mut Vec<AccountUse>) {
    list.sort_by(|a, b| {
        b.pressure
            .total_cmp(&a.pressure)
            .then(b.connections.cmp(&a.connections))
            .then(a.account.cmp(&b.account))
    });
    list.truncate(TOP_ACCOUNTS);
}

/// This node's webhook endpoints, in config order, as its gauges report
/// them (`tidegate_webhook_endpoint_healthy`, `tidegate_webhook_queue`).
pub fn webhooks(node: &Node) -> Vec<WebhookEndpoint> {
    node.webhooks
        .endpoints()
        .iter()
        .map(|ep| {
            let id = ep.config.load().id.clone();
            let (healthy, queued) = node.metrics.webhooks.snapshot(&id);
            WebhookEndpoint {
                id,
                healthy,
                queued,
            }
        })
        .collect()
}

/// The overview answer.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Overview {
    /// The node that answered.
    pub node: String,
    pub generated_at: u64,
    pub bucket_ms: u64,
    /// Whether every live node's summary is included (false on a cluster
    /// node that cannot reach Redis: this node only).
    pub cluster_wide: bool,
    pub totals: Totals,
    pub nodes: Vec<NodeStats>,
    pub accounts: Vec<AccountUse>,
    pub rejections: Vec<RejectionPoint>,
    pub bans: Vec<BanEntry>,
    /// Empty until the node has webhook endpoints (§9).
    pub webhooks: Vec<WebhookEndpoint>,
    /// Each Pusher app (§16), in the answering node's config order.
    pub pusher_apps: Vec<AppStats>,
    /// What this caller may do: `admin` or `viewer`.
    pub role: &'static str,
}

#[derive(Debug, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Totals {
    pub connections: u64,
    pub messages_in_per_sec: f64,
    pub messages_out_per_sec: f64,
}

/// Merges node summaries: connections summed per account, the budget view
/// the lowest seen, rejections summed per bucket.
pub fn merge(
    me: NodeStats,
    others: Vec<NodeStats>,
    cluster_wide: bool,
    bans: Vec<BanEntry>,
    role: &'static str,
) -> Overview {
    let node = me.id.clone();
    let mut nodes = vec![me];
    nodes.extend(others);
    // The answering node's apps first, in its config's order.
    let pusher_apps = super::apps::merge(nodes.iter_mut().map(|n| std::mem::take(&mut n.apps)));
    nodes.sort_by(|a, b| a.id.cmp(&b.id));
    let mut accounts: HashMap<String, AccountUse> = HashMap::new();
    let mut rejections: HashMap<(u64, String, String), u64> = HashMap::new();
    let mut totals = Totals::default();
    for n in &mut nodes {
        totals.connections += n.connections;
        totals.messages_in_per_sec += n.messages_in_per_sec;
        totals.messages_out_per_sec += n.messages_out_per_sec;
        for a in n.accounts.drain(..) {
            accounts
                .entry(a.account.clone())
                .and_modify(|m| m.add(&a))
                .or_insert(a);
        }
        for r in n.rejections.drain(..) {
            *rejections.entry((r.at, r.layer, r.reason)).or_default() += r.count;
        }
    }
    let mut accounts: Vec<AccountUse> = accounts
        .into_values()
        .map(|mut a| {
            a.score();
            a
        })
        .collect();
    keep_top(&mut accounts);
    let horizon = unix_ms().saturating_sub(BUCKET_MS * BUCKETS as u64);
    let mut rejections: Vec<RejectionPoint> = rejections
        .into_iter()
        .filter(|((at, _, _), _)| *at >= horizon)
        .map(|((at, layer, reason), count)| RejectionPoint {
            at,
            layer,
            reason,
            count,
        })
        .collect();
    rejections.sort_by(|a, b| (a.at, &a.layer, &a.reason).cmp(&(b.at, &b.layer, &b.reason)));
    Overview {
        node,
        generated_at: unix_ms(),
        bucket_ms: BUCKET_MS,
        cluster_wide,
        totals,
        nodes,
        accounts,
        rejections,
        bans,
        webhooks: Vec::new(),
        pusher_apps,
        role,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(id: &str, account: &str, conns: u32, remaining: u64) -> NodeStats {
        NodeStats {
            id: id.into(),
            connections: u64::from(conns),
            messages_in_per_sec: 1.0,
            messages_out_per_sec: 2.0,
            bridge_up: true,
            draining: false,
            at: 0,
            accounts: vec![AccountUse {
                account: account.into(),
                connections: conns,
                max_connections: 8,
                budget_remaining: Some(remaining),
                budget_capacity: Some(200),
                pressure: 0.0,
            }],
            rejections: vec![RejectionPoint {
                at: unix_ms() / BUCKET_MS * BUCKET_MS,
                layer: "handshake".into(),
                reason: "banned".into(),
                count: 2,
            }],
            apps: Vec::new(),
        }
    }

    #[test]
    fn merging_sums_connections_and_rejections_across_nodes() {
        let o = merge(
            stats("n1", "acme", 3, 150),
            vec![stats("n2", "acme", 3, 20)],
            true,
            vec![],
            "admin",
        );
        assert_eq!(o.totals.connections, 6);
        assert_eq!(o.nodes.len(), 2);
        assert_eq!(o.accounts.len(), 1);
        let acme = &o.accounts[0];
        assert_eq!((acme.connections, acme.budget_remaining), (6, Some(20)));
        assert!((acme.pressure - 0.9).abs() < 1e-9, "{}", acme.pressure);
        assert_eq!(o.rejections.len(), 1);
        assert_eq!(o.rejections[0].count, 4);
    }

    #[test]
    fn the_answering_nodes_apps_come_first_and_leave_the_summaries() {
        use crate::admin::apps::tests::app;
        let mut n1 = stats("n1", "acme", 1, 100);
        n1.apps = vec![app("b", 2, 90), app("a", 1, 50)];
        let mut n2 = stats("n2", "acme", 1, 100);
        n2.apps = vec![app("a", 3, 40), app("c", 1, 100)];
        let o = merge(n2, vec![n1], true, vec![], "admin");
        let ids: Vec<&str> = o.pusher_apps.iter().map(|a| a.id.as_str()).collect();
        assert_eq!(ids, ["a", "c", "b"]);
        assert_eq!(o.pusher_apps[0].connections, 4);
        assert!(o.nodes.iter().all(|n| n.apps.is_empty()));
    }
}
