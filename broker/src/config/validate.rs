//! Checks across a section's values that serde cannot express.

use super::auth::{VerifyKey, uses_sample_secret};
use super::{
    ClusterSection, HandshakeSection, HistorySection, HttpSection, NodeSection, ResolvedApiKey,
    SAMPLE_API_KEY, SocketSection,
};

/// Why the node's HTTP listener is reachable from more than this machine's
/// own processes, if it is: bound off loopback, or behind a proxy (a
/// trusted proxy on loopback still forwards the world).
pub(super) fn exposed(node: &NodeSection) -> Option<String> {
    if !node.listen.ip().is_loopback() {
        Some(format!("node.listen is {}", node.listen))
    } else if !node.trusted_proxies.is_empty() {
        Some("node.trusted_proxies is set (a proxy forwards other machines' requests)".into())
    } else {
        None
    }
}

/// The shipped secret and key are public; they may only guard a plain
/// loopback listener.
pub(super) fn sample_secret_problems(
    node: &NodeSection,
    jwt_keys: &[VerifyKey],
    keys: &[ResolvedApiKey],
) -> Vec<String> {
    let mut problems = Vec::new();
    let Some(why) = exposed(node) else {
        return problems;
    };
    if uses_sample_secret(jwt_keys) {
        problems.push(format!(
            "auth.jwt_secret: the sample secret may only be used on a plain loopback listener, but {why}; set TIDEGATE_JWT_SECRET (or jwt_secret = \"\" when [[auth.keys]] holds your keys)"
        ));
    }
    if keys.iter().any(|k| k.key == SAMPLE_API_KEY) {
        problems.push(format!(
            "api_keys: the sample API key may only be used on a plain loopback listener, but {why}; set your own with TIDEGATE_API_KEYS_0_KEY (or key_env in a file)"
        ));
    }
    problems
}

/// A listener's TLS files: both or neither.
pub(super) fn tls_pair_problems(section: &str, cert: &str, key: &str, problems: &mut Vec<String>) {
    if cert.is_empty() != key.is_empty() {
        problems.push(format!(
            "{section}.tls_cert_file: give both tls_cert_file and tls_key_file (a PEM certificate chain and its private key), or neither"
        ));
    }
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

pub(super) fn validate_node(
    node: &NodeSection,
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
        handshake.ipv6_prefix_len <= 128,
        "handshake.ipv6_prefix_len: must be at most 128".into(),
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
        history.max_bytes >= 65_536,
        "history.max_bytes: must be at least 65536".into(),
    );
    need(
        history.cluster_max_bytes >= 65_536,
        "history.cluster_max_bytes: must be at least 65536".into(),
    );
    need(
        http.max_batch >= 1,
        "http.max_batch: must be at least 1".into(),
    );
    need(
        http.body_timeout_ms >= 1,
        "http.body_timeout_ms: must be at least 1".into(),
    );
    need(
        cluster.lease_ms >= 100,
        "cluster.lease_ms: must be at least 100".into(),
    );
    need(
        cluster.max_pending >= 1,
        "cluster.max_pending: must be at least 1".into(),
    );
    tls_pair_problems("node", &node.tls_cert_file, &node.tls_key_file, problems);
}
