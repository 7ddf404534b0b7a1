//! Checks across a section's values that serde cannot express.

use super::{
    AuthSection, ClusterSection, HandshakeSection, HistorySection, HttpSection, NodeSection,
    ResolvedApiKey, SAMPLE_API_KEY, SAMPLE_JWT_SECRET, SocketSection,
};

/// The shipped secret and key are public; they may only guard loopback.
pub(super) fn sample_secret_problems(
    node: &NodeSection,
    auth: &AuthSection,
    keys: &[ResolvedApiKey],
) -> Vec<String> {
    let mut problems = Vec::new();
    if node.listen.ip().is_loopback() {
        return problems;
    }
    if auth.jwt_secret == SAMPLE_JWT_SECRET {
        problems.push(format!(
            "auth.jwt_secret: the sample secret may only be used on loopback, but node.listen is {}; set TIDEGATE_JWT_SECRET",
            node.listen
        ));
    }
    if keys.iter().any(|k| k.key == SAMPLE_API_KEY) {
        problems.push(
            "api_keys: the sample API key may only be used on loopback; set your own with TIDEGATE_API_KEYS_0_KEY (or key_env in a file)".into(),
        );
    }
    problems
}

pub(super) const NODE_ID_RULE: &str = "node.id: 1-32 characters of [A-Za-z0-9_-]";

/// A node id goes into connection ids and Redis keys.
pub(super) fn node_id_ok(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 32
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

#[allow(clippy::too_many_arguments)]
pub(super) fn validate_node(
    node: &NodeSection,
    auth: &AuthSection,
    socket: &SocketSection,
    handshake: &HandshakeSection,
    history: &HistorySection,
    cluster: &ClusterSection,
    http: &HttpSection,
    problems: &mut Vec<String>,
) {
    let mut need = |ok: bool, what: String| {
        if !ok {
            problems.push(what);
        }
    };
    need(node_id_ok(&node.id), NODE_ID_RULE.into());
    need(
        auth.jwt_secret.len() >= 16,
        "auth.jwt_secret: must be at least 16 bytes".into(),
    );
    need(
        socket.heartbeat_interval_ms >= 10,
        "socket.heartbeat_interval_ms: must be at least 10".into(),
    );
    need(
        socket.client_timeout_ms > socket.heartbeat_interval_ms,
        "socket.client_timeout_ms: must be longer than socket.heartbeat_interval_ms".into(),
    );
    need(
        socket.close_timeout_ms >= 1,
        "socket.close_timeout_ms: must be at least 1".into(),
    );
    need(
        socket.max_pending_drop_ids >= 1,
        "socket.max_pending_drop_ids: must be at least 1".into(),
    );
    let rate_ok = |r: f64| r.is_finite() && r > 0.0;
    need(
        rate_ok(handshake.node_accepts_per_sec),
        "handshake.node_accepts_per_sec: must be a positive number".into(),
    );
    need(
        rate_ok(handshake.ip_handshakes_per_sec),
        "handshake.ip_handshakes_per_sec: must be a positive number".into(),
    );
    need(
        handshake.ip_handshake_burst >= 1,
        "handshake.ip_handshake_burst: must be at least 1".into(),
    );
    need(
        handshake.ip_max_open >= 1,
        "handshake.ip_max_open: must be at least 1".into(),
    );
    need(
        handshake.request_timeout_ms >= 1,
        "handshake.request_timeout_ms: must be at least 1".into(),
    );
    need(
        handshake.ip_max_unfinished >= 1,
        "handshake.ip_max_unfinished: must be at least 1".into(),
    );
    need(
        handshake.node_max_sockets >= 1,
        "handshake.node_max_sockets: must be at least 1".into(),
    );
    need(
        history.size <= 100_000,
        "history.size: must be at most 100000".into(),
    );
    need(
        history.ttl_ms >= 1,
        "history.ttl_ms: must be at least 1".into(),
    );
    need(
        http.max_batch >= 1,
        "http.max_batch: must be at least 1".into(),
    );
    need(
        cluster.lease_ms >= 100,
        "cluster.lease_ms: must be at least 100".into(),
    );
    need(
        cluster.max_pending >= 1,
        "cluster.max_pending: must be at least 1".into(),
    );
    if cluster.mode.uses_redis() {
        need(
            cluster.redis_url.starts_with("redis://") || cluster.redis_url.starts_with("unix://"),
            format!(
                "cluster.redis_url: {:?} is not a redis:// URL",
                cluster.redis_url
            ),
        );
    }
}
