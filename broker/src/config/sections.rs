//! The node-wide sections of `config.toml` (everything but plans and
//! accounts). Defaults here are the contract's §0 and §7.

use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use super::auth::{KeyEntry, one_or_many};

/// The HS256 secret shipped in the sample `config.toml`. The broker refuses
/// to serve with it on anything but loopback.
pub const SAMPLE_JWT_SECRET: &str = "tidegate-sample-secret-do-not-use-in-production";
/// The API key shipped in the sample `config.toml`; same rule.
pub const SAMPLE_API_KEY: &str = "tidegate-sample-publish-key";

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default)]
pub struct NodeSection {
    /// Appears in connection ids and the welcome frame; unique per cluster.
    pub id: String,
    pub listen: SocketAddr,
    /// HTTP worker threads (0 = one per core).
    pub workers: usize,
    /// Peers whose `X-Forwarded-For` is trusted: addresses or CIDR ranges
    /// (load balancers and ingress pods come from a subnet).
    pub trusted_proxies: Vec<ProxyRange>,
    /// TLS on the HTTP/WebSocket listener: a PEM certificate chain and its
    /// private key (both empty: plaintext). Read again on SIGHUP.
    pub tls_cert_file: String,
    pub tls_key_file: String,
}

impl Default for NodeSection {
    fn default() -> Self {
        NodeSection {
            id: "n1".into(),
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            workers: 0,
            trusted_proxies: Vec::new(),
            tls_cert_file: String::new(),
            tls_key_file: String::new(),
        }
    }
}

/// One `trusted_proxies` entry: `10.0.0.0/8`, `fd00::/8`, or a single
/// address (`10.0.0.7`, taken as `/32` or `/128`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(try_from = "String", into = "String")]
pub struct ProxyRange(pub IpNet);

impl TryFrom<String> for ProxyRange {
    type Error = String;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<ProxyRange> for String {
    fn from(p: ProxyRange) -> String {
        p.to_string()
    }
}

impl ProxyRange {
    pub fn contains(&self, ip: IpAddr) -> bool {
        // A v4 client seen on a dual-stack socket arrives as ::ffff:a.b.c.d.
        self.0.contains(&ip.to_canonical())
    }
}

impl FromStr for ProxyRange {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        s.parse::<IpNet>()
            .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
            .map(|net| ProxyRange(net.trunc()))
            .map_err(|_| format!("{s:?} is neither an IP address nor a CIDR range"))
    }
}

impl std::fmt::Display for ProxyRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default)]
pub struct AuthSection {
    /// HS256 secret for tokens without a key id (empty: none);
    /// `TIDEGATE_JWT_SECRET` overrides it.
    pub jwt_secret: String,
    /// Plan for tokens without a `plan` claim and accounts without a plan.
    pub default_plan: String,
    /// Lifetime of tokens minted by `tidegate token`.
    pub dev_token_ttl_secs: u64,
    /// Clock skew tolerated when checking `exp` (an open socket is closed
    /// with 4001 this long after its token's `exp`).
    pub leeway_secs: u64,
    /// Clock skew tolerated when checking `nbf`: a token used the moment
    /// it is issued by a clock slightly ahead of this node's.
    pub nbf_leeway_secs: u64,
    /// `[[auth.keys]]`: verification keys with a `kid` (HS secrets, or
    /// public keys in PEM files), for rotation and identity providers.
    /// From the file only (a list of tables has no variable); `check-config`
    /// lists them with their secrets masked.
    #[serde(skip_serializing)]
    pub keys: Vec<KeyEntry>,
    /// A JWKS file (an identity provider's public keys), read at start
    /// and again on every reload (SIGHUP). Empty: none.
    pub jwks_file: String,
    /// When set, a token's `iss` must be this.
    pub issuer: String,
    /// When set, a token's `aud` must name one of these; when empty, a
    /// token that carries `aud` is refused (RFC 7519 §4.1.3).
    #[serde(deserialize_with = "one_or_many")]
    pub audience: Vec<String>,
    /// Keys the fingerprints that name API keys' buckets in Redis (empty:
    /// derived from the cluster secret; never the JWT secret).
    pub fingerprint_secret: String,
}

impl Default for AuthSection {
    fn default() -> Self {
        AuthSection {
            jwt_secret: SAMPLE_JWT_SECRET.into(),
            default_plan: "free".into(),
            dev_token_ttl_secs: 3600,
            leeway_secs: 0,
            nbf_leeway_secs: 5,
            keys: Vec::new(),
            jwks_file: String::new(),
            issuer: String::new(),
            audience: Vec::new(),
            fingerprint_secret: String::new(),
        }
    }
}

/// An API key for HTTP publish, bound to one account.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ApiKey {
    /// The key itself; or leave it out and name an environment variable.
    #[serde(default)]
    pub key: Option<String>,
    #[serde(default)]
    pub key_env: Option<String>,
    pub account: String,
    /// Channels this key may publish to (globs; default: all).
    #[serde(default = "all_channels")]
    pub pub_channels: Vec<String>,
    /// Channels this key may `Subscribe` to over gRPC (globs; default:
    /// none, so a publish-only key cannot read).
    #[serde(default)]
    pub sub_channels: Vec<String>,
}

fn all_channels() -> Vec<String> {
    vec!["*".into()]
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default)]
pub struct SocketSection {
    /// How often the server pings an idle client.
    pub heartbeat_interval_ms: u64,
    /// A client silent (no frame, no pong) this long is closed.
    pub client_timeout_ms: u64,
    /// How long a close frame may take to be delivered before the TCP
    /// connection is dropped.
    pub close_timeout_ms: u64,
    /// Most `id`s one `rate_limited` frame lists; past this the socket stops
    /// being read until the next frame goes out (lossless back-pressure).
    pub max_pending_drop_ids: usize,
    /// Kernel send buffer per socket (0 = OS default). Smaller values make
    /// slow consumers visible to the high-water mark sooner.
    pub send_buffer_bytes: usize,
}

impl Default for SocketSection {
    fn default() -> Self {
        SocketSection {
            heartbeat_interval_ms: 15_000,
            client_timeout_ms: 45_000,
            close_timeout_ms: 1_000,
            max_pending_drop_ids: 1_000,
            send_buffer_bytes: 0,
        }
    }
}

/// Node-level handshake defences (per node by design: they protect it).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default)]
pub struct HandshakeSection {
    /// Handshakes per second this node takes before answering 503.
    pub node_accepts_per_sec: f64,
    pub ip_handshakes_per_sec: f64,
    pub ip_handshake_burst: u32,
    /// Open sockets per client IP.
    pub ip_max_open: u32,
    /// Open sockets on this node; a socket past it is closed with 1013
    /// right after the upgrade (the count is exact only there).
    pub node_max_sockets: u32,
    /// `Retry-After` for a connection-cap refusal (a cap frees up when a
    /// socket closes, which no clock predicts).
    pub cap_retry_after_ms: u64,
    /// The whole request head (the upgrade) must arrive within this time
    /// of the TCP accept, however it trickles in (slowloris); slower
    /// connections get 408 and are dropped. Every later head on a
    /// keep-alive connection has as long from its first byte. Read at
    /// startup only.
    pub request_timeout_ms: u64,
    /// TCP connections per client IP that have not sent their whole
    /// request head yet (the first, or a later one on a keep-alive
    /// connection). Past it a new connection from that IP is shut at
    /// once: one address cannot hold the node's descriptors with
    /// handshakes it never finishes. (The peer address: a trusted proxy's
    /// own connections count together.)
    pub ip_max_unfinished: u32,
    /// IPv6 clients count (per-IP limits, bans, admin lockout) by their
    /// network of this many leading bits: one host is handed a whole /64
    /// and could otherwise rotate around every per-IP limit. 128: by
    /// address. IPv4 (and IPv4-mapped) addresses count one by one.
    pub ipv6_prefix_len: u8,
}

impl Default for HandshakeSection {
    fn default() -> Self {
        HandshakeSection {
            node_accepts_per_sec: 2_000.0,
            ip_handshakes_per_sec: 5.0,
            ip_handshake_burst: 20,
            ip_max_open: 50,
            node_max_sockets: 100_000,
            cap_retry_after_ms: 5_000,
            request_timeout_ms: 5_000,
            ip_max_unfinished: 100,
            ipv6_prefix_len: 64,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default)]
pub struct HttpSection {
    /// Most messages in one `/v1/publish/batch`.
    pub max_batch: usize,
    /// Largest request body for `/v1/publish/batch`.
    pub max_batch_bytes: usize,
    /// A request body must be whole within this time of its head (slow
    /// bodies: the connection counts toward `handshake.ip_max_unfinished`
    /// until then, and is dropped past it). Read for each request, so a
    /// reload applies to the next one.
    pub body_timeout_ms: u64,
    /// Origins of pages allowed to open `/v1/sse` and call
    /// `/v1/client/publish` cross-origin (§14; empty: same origin only).
    pub cors_origins: Vec<String>,
}

impl Default for HttpSection {
    fn default() -> Self {
        HttpSection {
            max_batch: 100,
            max_batch_bytes: 1024 * 1024,
            body_timeout_ms: 10_000,
            cors_origins: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default)]
pub struct HistorySection {
    /// Messages kept per channel for `since` recovery (0 = none).
    pub size: usize,
    /// How long a message is kept.
    pub ttl_ms: u64,
    /// Bytes of history this node holds over all channels; past it the
    /// oldest messages are evicted first, whichever channel holds them.
    pub max_bytes: u64,
    /// Bytes of history held in Redis (`cluster.mode` redis or
    /// redis_cluster) over all channels, for the whole cluster; past it
    /// the oldest messages are evicted first (`cluster/redis/history.rs`).
    pub cluster_max_bytes: u64,
}

impl Default for HistorySection {
    fn default() -> Self {
        HistorySection {
            size: 100,
            ttl_ms: 300_000,
            max_bytes: 256 << 20,
            cluster_max_bytes: 256 << 20,
        }
    }
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ClusterMode {
    Memory,
    Redis,
    /// Redis Cluster: hash-tagged keys, sharded pub/sub (docs/scaling.md).
    #[serde(rename = "redis-cluster")]
    RedisCluster,
}

impl ClusterMode {
    /// Whether the node shares state through Redis (one server or a Redis
    /// Cluster).
    pub fn uses_redis(self) -> bool {
        self != ClusterMode::Memory
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default)]
pub struct ClusterSection {
    pub mode: ClusterMode,
    pub redis_url: String,
    /// Prefix of every Redis key and pub/sub channel.
    pub key_prefix: String,
    /// A node's connection counts expire this long after it stops renewing.
    pub lease_ms: u64,
    /// SIGTERM drain window.
    pub drain_ms: u64,
    /// Most messages queued toward Redis; past it publishes are refused.
    pub max_pending: usize,
    /// Signs (HMAC-SHA256) the control messages nodes send each other
    /// through Redis (bans, disconnects, account breaches); the same on
    /// every node, required in cluster mode. `TIDEGATE_CLUSTER_SECRET`.
    pub secret: String,
    /// More secrets a control message may be signed with (a rotation:
    /// accepted, never used to sign).
    pub accept_secrets: Vec<String>,
    /// `rediss://`: PEM roots that verify the Redis server (empty: the
    /// system's), and a client certificate and key for a Redis that asks
    /// for one.
    pub redis_ca_file: String,
    pub redis_cert_file: String,
    pub redis_key_file: String,
}

impl Default for ClusterSection {
    fn default() -> Self {
        ClusterSection {
            mode: ClusterMode::Memory,
            redis_url: "redis://127.0.0.1:6379/".into(),
            key_prefix: "tidegate:".into(),
            lease_ms: 10_000,
            drain_ms: 10_000,
            max_pending: 10_000,
            secret: String::new(),
            accept_secrets: Vec::new(),
            redis_ca_file: String::new(),
            redis_cert_file: String::new(),
            redis_key_file: String::new(),
        }
    }
}

/// `[publish]`: idempotency keys (§17).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default)]
pub struct PublishSection {
    /// How long a published key answers its retries with the first `seq`,
    /// from the publish that went out.
    pub idempotency_window_ms: u64,
    /// Keys a node holds at most; past it the oldest is evicted first
    /// (counted). docs/operating.md's Bounds table gives the memory per
    /// key.
    pub idempotency_max_keys: u64,
}

/// The longest window: a day (a key is a retry's, not an archive's).
pub const MAX_IDEMPOTENCY_WINDOW_MS: u64 = 86_400_000;
/// The most keys a node may be told to hold (about 1.5 GiB at the measured
/// size per key).
pub const MAX_IDEMPOTENCY_KEYS: u64 = 10_000_000;

impl Default for PublishSection {
    fn default() -> Self {
        PublishSection {
            idempotency_window_ms: 300_000,
            idempotency_max_keys: 100_000,
        }
    }
}

impl PublishSection {
    pub fn problems(&self, problems: &mut Vec<String>) {
        if !(1..=MAX_IDEMPOTENCY_WINDOW_MS).contains(&self.idempotency_window_ms) {
            problems.push(format!(
                "publish.idempotency_window_ms: must be from 1 to {MAX_IDEMPOTENCY_WINDOW_MS} (a day), not {}",
                self.idempotency_window_ms
            ));
        }
        if !(1..=MAX_IDEMPOTENCY_KEYS).contains(&self.idempotency_max_keys) {
            problems.push(format!(
                "publish.idempotency_max_keys: must be from 1 to {MAX_IDEMPOTENCY_KEYS}, not {}",
                self.idempotency_max_keys
            ));
        }
    }
}
