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

#[cfg(test)]
mod tests {
    use crate::config::{ClusterMode, Config};

    const BASE: &str = "[plans.free]\n[cluster]\nmode = \"redis-cluster\"\n";

    fn problems(extra: &str) -> Vec<String> {
        let text = format!("{BASE}{extra}");
        match Config::from_toml(&text, &|_| None) {
            Ok(_) => Vec::new(),
            Err(e) => e.problems,
        }
    }

    #[test]
    fn redis_cluster_mode_is_read_and_refuses_what_it_cannot_carry_yet() {
        let ok = Config::from_toml(BASE, &|_| None).unwrap();
        assert_eq!(ok.cluster.mode, ClusterMode::RedisCluster);
        assert!(ok.cluster.mode.uses_redis());
        let braces = problems("key_prefix = \"t{x}:\"\n");
        assert_eq!(braces.len(), 1, "{braces:?}");
        assert!(braces[0].starts_with("cluster.key_prefix:"), "{braces:?}");
        let hooks = problems(
            "[[webhooks]]\nid = \"w\"\nurl = \"http://127.0.0.1:9/h\"\nsecret = \"0123456789abcdef0123456789abcdef\"\n",
        );
        assert!(
            hooks
                .iter()
                .any(|p| p.starts_with("webhooks: not yet supported")),
            "{hooks:?}"
        );
        let admin = problems("[admin]\nkey = \"0123456789abcdef0123456789abcdef\"\n");
        assert!(
            admin
                .iter()
                .any(|p| p.starts_with("admin: the operator routes")),
            "{admin:?}"
        );
    }
}
