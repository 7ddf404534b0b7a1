//! The `[grpc]` section: where the gRPC API (PROTOCOL.md §8) listens and
//! the per-connection bounds that keep one client from hoarding the node.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::{ResolvedApiKey, SAMPLE_API_KEY};

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default)]
pub struct GrpcSection {
    /// Address of `tidegate.v1.Broker` (plaintext HTTP/2 unless `tls_*`
    /// are set); `--grpc-listen`
    /// overrides it.
    pub listen: SocketAddr,
    /// Threads of the gRPC server's own runtime (0 = one per core).
    pub workers: usize,
    /// Calls open at once on one HTTP/2 connection (streams past it wait
    /// for a slot, as HTTP/2 says): a client cannot pin the node's memory
    /// by opening streams.
    pub max_concurrent_streams: u32,
    /// Replies a `PublishStream` holds for a client that does not read
    /// them; past it the broker stops reading that stream's requests
    /// (HTTP/2 flow control then stops the sender), so memory stays bounded.
    pub reply_buffer: usize,
    /// Largest encoded request; the plan's `max_payload_bytes` still
    /// applies to `data_json` inside it.
    pub max_message_bytes: usize,
    /// TLS on the gRPC listener: a PEM certificate chain and its private
    /// key (both empty: plaintext HTTP/2). Read again on SIGHUP.
    pub tls_cert_file: String,
    pub tls_key_file: String,
    /// Connections open at once on the listener, handshaking or not; one
    /// past it is closed at accept (issue 26).
    pub max_connections: usize,
    /// Connections open at once from one client address (an IPv6
    /// client's `handshake.ipv6_prefix_len` network).
    pub ip_max_connections: u32,
    /// The TLS handshake (when on) and the HTTP/2 connection preface must
    /// arrive within this time of the accept, or the connection is closed.
    pub handshake_timeout_ms: u64,
    /// HTTP/2 PING sent after this long without a frame; a peer that does
    /// not answer within `keepalive_timeout_ms` is dropped.
    pub keepalive_interval_ms: u64,
    pub keepalive_timeout_ms: u64,
    /// A connection older than this is asked to go away (GOAWAY; open
    /// calls get `socket.close_timeout_ms` to end), so none is held for
    /// ever. 0: no limit.
    pub max_connection_age_ms: u64,
    /// A connection with no call open for this long is closed (answered
    /// keepalive PINGs do not count as use). 0: never.
    pub idle_timeout_ms: u64,
}

impl Default for GrpcSection {
    fn default() -> Self {
        GrpcSection {
            listen: SocketAddr::from(([127, 0, 0, 1], 8081)),
            workers: 0,
            max_concurrent_streams: 100,
            reply_buffer: 64,
            max_message_bytes: 1024 * 1024,
            tls_cert_file: String::new(),
            tls_key_file: String::new(),
            max_connections: 10_000,
            ip_max_connections: 100,
            handshake_timeout_ms: 5_000,
            keepalive_interval_ms: 30_000,
            keepalive_timeout_ms: 10_000,
            max_connection_age_ms: 3_600_000,
            idle_timeout_ms: 300_000,
        }
    }
}

impl GrpcSection {
    pub(super) fn problems(&self, keys: &[ResolvedApiKey], problems: &mut Vec<String>) {
        if self.max_concurrent_streams == 0 {
            problems.push("grpc.max_concurrent_streams: must be at least 1".into());
        }
        if self.reply_buffer == 0 {
            problems.push("grpc.reply_buffer: must be at least 1".into());
        }
        if self.max_connections == 0 || self.ip_max_connections == 0 {
            problems
                .push("grpc.max_connections, grpc.ip_max_connections: must be at least 1".into());
        }
        if self.handshake_timeout_ms == 0
            || self.keepalive_interval_ms == 0
            || self.keepalive_timeout_ms == 0
        {
            problems.push(
                "grpc.handshake_timeout_ms, keepalive_interval_ms, keepalive_timeout_ms: must be at least 1".into(),
            );
        }
        if self.max_message_bytes < 1024 {
            problems.push("grpc.max_message_bytes: must be at least 1024".into());
        }
        super::tls_pair_problems("grpc", &self.tls_cert_file, &self.tls_key_file, problems);
        self.sample_key_problems(keys, problems);
    }

    /// The shipped API key is public: like on HTTP, loopback only.
    pub(super) fn sample_key_problems(&self, keys: &[ResolvedApiKey], problems: &mut Vec<String>) {
        if !self.listen.ip().is_loopback() && keys.iter().any(|k| k.key == SAMPLE_API_KEY) {
            problems.push(format!(
                "api_keys: the sample API key may only be used on loopback, but grpc.listen is {}; use key_env",
                self.listen
            ));
        }
    }
}
