//! What `cluster.mode = "redis-cluster"` asks of the configuration beyond
//! one Redis: a key prefix that leaves the hash tags alone
//! (docs/scaling.md, "Redis Cluster").

use super::{ClusterMode, ClusterSection};

/// Appends a problem for a key prefix that would break the hash tags.
pub(super) fn problems(cluster: &ClusterSection, problems: &mut Vec<String>) {
    if cluster.mode != ClusterMode::RedisCluster {
        return;
    }
    if cluster.key_prefix.contains(['{', '}']) {
        problems.push(format!(
            "cluster.key_prefix: {:?} must not contain '{{' or '}}' with mode \"redis-cluster\" (keys are hash-tagged by channel and account)",
            cluster.key_prefix
        ));
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{ClusterMode, Config};

    const BASE: &str =
        "[plans.free]\n[cluster]\nmode = \"redis-cluster\"\nsecret = \"a-cluster-secret-0123\"\n";

    fn problems(extra: &str) -> Vec<String> {
        let text = format!("{BASE}{extra}");
        match Config::from_toml(&text, &|_| None) {
            Ok(_) => Vec::new(),
            Err(e) => e.problems,
        }
    }

    #[test]
    fn redis_cluster_mode_is_read_and_refuses_a_prefix_with_braces() {
        let ok = Config::from_toml(BASE, &|_| None).unwrap();
        assert_eq!(ok.cluster.mode, ClusterMode::RedisCluster);
        assert!(ok.cluster.mode.uses_redis());
        let braces = problems("key_prefix = \"t{x}:\"\n");
        assert_eq!(braces.len(), 1, "{braces:?}");
        assert!(braces[0].starts_with("cluster.key_prefix:"), "{braces:?}");
    }

    #[test]
    fn webhooks_and_the_operator_routes_are_accepted_on_redis_cluster() {
        let text = format!(
            "{BASE}[admin]\nkey = \"0123456789abcdef0123456789abcdef\"\n[[webhooks]]\nid = \"w\"\nurl = \"http://127.0.0.1:9/h\"\nsecret = \"0123456789abcdef0123456789abcdef\"\n"
        );
        let config = Config::from_toml(&text, &|_| None).unwrap();
        assert_eq!(config.cluster.mode, ClusterMode::RedisCluster);
        assert_eq!(config.webhooks.len(), 1);
        assert!(config.admin.admin.is_some());
    }
}
