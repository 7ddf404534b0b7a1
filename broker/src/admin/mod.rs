//! Operators (§10): the admin key, the page, the overview, and the
//! actions (disconnect, ban, unban), each applied on every node through the
//! cluster bridge, logged under target `tidegate::admin` and counted in
//! `tidegate_admin_actions_total{action,outcome}`.
//!
//! Without an admin key in `[admin]` every admin route answers 404, as if
//! it did not exist. A wrong key is 401; failed attempts are rate limited
//! per client address (429 once spent). The viewer key reads the page and
//! the overview; its actions are 403.

mod apps;
mod enabled;
mod figures;
mod overview;
mod page;
mod routes;

use std::sync::Arc;
use std::time::Duration;

pub use crate::bans::{Ban, BanEntry, BanTarget, Bans};
pub use crate::clock::unix_ms;
pub use crate::cluster::{Action, BANNED, DISCONNECTED, Who};
pub use crate::node::Admin;
pub use crate::node::operator::{apply, close_local, on_broadcast, perform};
pub use apps::{AppRefusal, AppStats};
pub use overview::{NodeStats, Overview, WebhookEndpoint};
pub use routes::routes;

use crate::node::Node;

/// How often a node samples its counters and, in a cluster, publishes its
/// summary and re-reads the ban list.
const TICK: Duration = Duration::from_millis(crate::metrics::history::BUCKET_MS);
/// How often, in a cluster, the summary and the ban list are refreshed.
const SHARE_EVERY: Duration = Duration::from_secs(2);
/// A summary outlives its node by this much.
const STATS_TTL_MS: u64 = 6_000;

/// Samples the counters every bucket; in a cluster also publishes this
/// node's summary and re-reads the ban list from Redis (which catches a
/// node up with actions it missed while away or before it started).
pub fn spawn(node: Arc<Node>) {
    let sampler = node.clone();
    actix_rt::spawn(async move {
        let mut tick = actix_rt::time::interval(TICK);
        loop {
            tick.tick().await;
            sampler.admin.history.record(&sampler.metrics);
        }
    });
    actix_rt::spawn(async move {
        let mut tick = actix_rt::time::interval(SHARE_EVERY);
        loop {
            tick.tick().await;
            let Some(store) = node.bridge.admin_store() else {
                continue;
            };
            let stats =
                serde_json::to_string(&overview::node_stats(&node)).expect("summaries serialise");
            let member = format!(
                "{}:{:016x}",
                node.config.load().node.id,
                node.admin.instance
            );
            let shared = async {
                store.put_stats(&member, &stats, STATS_TTL_MS).await?;
                store.bans().await
            };
            match shared.await {
                Ok(bans) => {
                    let bans: Vec<(BanTarget, u64)> = bans
                        .iter()
                        .filter_map(|(k, until)| Some((BanTarget::from_key(k)?, *until)))
                        .collect();
                    node.admin.bans.replace_all(&bans, SHARE_EVERY * 3);
                }
                Err(e) => {
                    tracing::debug!(target: "tidegate::admin", error = %e, "could not share the summary")
                }
            }
        }
    });
}
