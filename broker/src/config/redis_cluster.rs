//! What `cluster.mode = "redis-cluster"` cannot do yet, refused when the
//! configuration is read rather than half-working at run time
//! (docs/scaling.md, "Redis Cluster: what works today").

use super::{AdminKeys, ClusterMode, ClusterSection, WebhookEndpoint};

/// Appends a problem for each feature the Redis Cluster bridge does not
/// carry yet, and for a key prefix that would break the hash tags.
pub(super) fn problems(
    cluster: &ClusterSection,
    admin: &AdminKeys,
    webhooks: &[WebhookEndpoint],
    problems: &mut Vec<String>,
) {
    if cluster.mode != ClusterMode::RedisCluster {
        return;
    }
    if cluster.key_prefix.contains(['{', '}']) {
        problems.push(format!(
            "cluster.key_prefix: {:?} must not contain '{{' or '}}' with mode \"redis-cluster\" (keys are hash-tagged by channel and account)",
            cluster.key_prefix
        ));
    }
    if !webhooks.is_empty() {
        problems.push(
            "webhooks: not yet supported with cluster.mode = \"redis-cluster\" (the delivery queues are one Redis stream set); use mode \"redis\" or remove [[webhooks]]".into(),
        );
    }
    if admin.admin.is_some() || admin.viewer.is_some() {
        problems.push(
            "admin: the operator routes are not yet supported with cluster.mode = \"redis-cluster\" (bans and the cluster overview scan one Redis); use mode \"redis\" or remove the admin keys".into(),
        );
    }
}
