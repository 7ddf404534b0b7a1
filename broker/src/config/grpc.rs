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
