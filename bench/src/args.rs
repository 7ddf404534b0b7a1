//! The arguments of `tidegate-load`'s scenarios (the command line's
//! subcommands; `main.rs` holds the command, the peers and the runs).

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use tidegate_bench::scenario::{fanout, webhooks};

#[derive(Args)]
pub(crate) struct GrpcPublishArgs {
    #[arg(long, default_value_t = 1000)]
    pub(crate) subscribers: usize,
    /// Seconds per transport.
    #[arg(long, default_value_t = 5.0)]
    pub(crate) duration: f64,
    /// Bytes of each publish's data (a JSON string).
    #[arg(long, default_value_t = 64)]
    pub(crate) payload: usize,
    /// Publishes in flight per transport.
    #[arg(long, default_value_t = 16)]
    pub(crate) in_flight: usize,
    #[arg(long, default_value_t = 8)]
    pub(crate) per_account: usize,
}

#[derive(Args)]
pub(crate) struct SoakArgs {
    /// How long the churn runs, in minutes.
    #[arg(long, default_value_t = 30.0)]
    pub(crate) minutes: f64,
    /// Seconds between samples.
    #[arg(long, default_value_t = 10.0)]
    pub(crate) sample_secs: f64,
    /// Sockets opening, subscribing, publishing and closing in a loop.
    #[arg(long, default_value_t = 40)]
    pub(crate) churners: usize,
    /// HTTP publishes per second (the sample key's budget is 100/s).
    #[arg(long, default_value_t = 20.0)]
    pub(crate) http_per_sec: f64,
    /// Non-reading subscribers of a busy channel, replaced every round.
    #[arg(long, default_value_t = 4)]
    pub(crate) slow_readers: usize,
    /// Seconds per round of the seed's typist, loop and abuser.
    #[arg(long, default_value_t = 10.0)]
    pub(crate) round_secs: f64,
    /// Write the samples to this CSV file as they are taken.
    #[arg(long)]
    pub(crate) csv: Option<PathBuf>,
}

#[derive(Args)]
pub(crate) struct WebhookArgs {
    #[arg(long, default_value_t = 10_000)]
    pub(crate) events: usize,
    /// Messages per HTTP batch publish.
    #[arg(long, default_value_t = 100)]
    pub(crate) batch: usize,
    /// How the failing endpoint fails.
    #[arg(long, value_enum, default_value_t = webhooks::Failing::Error)]
    pub(crate) failing: webhooks::Failing,
    /// Each endpoint's pacing bucket (rate; burst is the same number).
    #[arg(long, default_value_t = 100_000.0)]
    pub(crate) rate: f64,
    #[arg(long, default_value_t = 16)]
    pub(crate) max_in_flight: u32,
    /// Give up waiting for deliveries after this long.
    #[arg(long, default_value_t = 60.0)]
    pub(crate) patience: f64,
}

#[derive(Args)]
pub(crate) struct FanoutArgs {
    /// Subscriber counts (comma-separated: one cell each).
    #[arg(long, value_delimiter = ',', default_value = "1000")]
    pub(crate) subscribers: Vec<usize>,
    /// Payload sizes in bytes (comma-separated; at least 34).
    #[arg(long, value_delimiter = ',', default_value = "64")]
    pub(crate) payload: Vec<usize>,
    #[arg(long, default_value_t = 1)]
    pub(crate) publishers: usize,
    /// `max` (closed loop, see --window) or messages/s over all publishers.
    #[arg(long, default_value = "max")]
    pub(crate) rate: fanout::Rate,
    /// Messages in flight per publisher with --rate max.
    #[arg(long, default_value_t = 64)]
    pub(crate) window: usize,
    #[arg(long, default_value_t = 1.0)]
    pub(crate) warmup: f64,
    #[arg(long, default_value_t = 5.0)]
    pub(crate) duration: f64,
    #[arg(long, default_value_t = 200)]
    pub(crate) connect_concurrency: usize,
    /// Subscribers per account (Tidegate's default cap is 8).
    #[arg(long, default_value_t = 8)]
    pub(crate) per_account: usize,
    /// Seconds to measure the broker's idle CPU with the subscribers
    /// connected, before publishing (0: skip); subtracted in
    /// `broker_cpu_us_per_publish_net`.
    #[arg(long, default_value_t = 0.0)]
    pub(crate) idle: f64,
    /// Runs every cell this many times, interleaved; the comparisons with
    /// `/v1/ws` pair the cells of one round, and `*_vs_ws_rounds` gives
    /// their median.
    #[arg(long, default_value_t = 1)]
    pub(crate) rounds: usize,
}

#[derive(Args)]
pub(crate) struct IdleArgs {
    #[arg(long, default_value_t = 5000)]
    pub(crate) connections: usize,
    #[arg(long, default_value_t = 2.0)]
    pub(crate) hold: f64,
    #[arg(long, default_value_t = 100)]
    pub(crate) connect_concurrency: usize,
    #[arg(long, default_value_t = 8)]
    pub(crate) per_account: usize,
}

#[derive(Args)]
pub(crate) struct HandshakeArgs {
    #[arg(long, default_value_t = 50)]
    pub(crate) concurrency: usize,
    #[arg(long, default_value_t = 5.0)]
    pub(crate) duration: f64,
    /// Pre-minted Tidegate tokens (one account each), used in turn.
    #[arg(long, default_value_t = 20000)]
    pub(crate) tokens: usize,
    /// Send a close frame and wait for the server to end TCP (RFC 6455
    /// §7.1.1) instead of stopping at its close frame.
    #[arg(long)]
    pub(crate) polite: bool,
}

#[derive(Args)]
pub(crate) struct BehaviourArgs {
    #[arg(long, default_value_t = 3.0)]
    pub(crate) duration: f64,
    #[arg(long, default_value_t = 50)]
    pub(crate) abuser_sockets: usize,
    #[arg(long, default_value_t = 200)]
    pub(crate) abuser_messages: usize,
    #[arg(long, default_value_t = 4000.0)]
    pub(crate) buggy_rate: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum StormMode {
    Fixed,
    Jitter,
    Both,
}

#[derive(Args)]
pub(crate) struct StormArgs {
    #[arg(long, default_value_t = 4000)]
    pub(crate) clients: usize,
    #[arg(long, default_value_t = 4)]
    pub(crate) per_account: usize,
    #[arg(long, value_enum, default_value_t = StormMode::Both)]
    pub(crate) mode: StormMode,
    /// Full jitter: first reconnect uniform in [0, this).
    #[arg(long, default_value_t = 2000)]
    pub(crate) jitter_ms: u64,
    /// Fixed: retry interval after a refusal.
    #[arg(long, default_value_t = 1000)]
    pub(crate) fixed_retry_ms: u64,
    /// Give up on a client after this long.
    #[arg(long, default_value_t = 20.0)]
    pub(crate) patience: f64,
    /// Tidegate's node accept budget (default: the shipped 2,000/s).
    #[arg(long)]
    pub(crate) node_accepts: Option<f64>,
    /// Sockets connected before the storm and not part of it, reporting
    /// heartbeats, ping round trips and deliveries during it.
    #[arg(long, default_value_t = 100)]
    pub(crate) bystanders: usize,
    /// The node's heartbeat interval for the run (shipped: 15,000).
    #[arg(long, default_value_t = 1000)]
    pub(crate) heartbeat_ms: u64,
    /// How often the broker's accept counter is read from /metrics.
    #[arg(long, default_value_t = 100)]
    pub(crate) metrics_ms: u64,
}

#[derive(Args)]
pub(crate) struct SlowArgs {
    #[arg(long, default_value_t = 50)]
    pub(crate) subscribers: usize,
    #[arg(long, default_value_t = 2000.0)]
    pub(crate) rate: f64,
    #[arg(long, default_value_t = 1024)]
    pub(crate) payload: usize,
    #[arg(long, default_value_t = 10.0)]
    pub(crate) duration: f64,
    /// SO_RCVBUF of the non-reading client (0 = OS default).
    #[arg(long, default_value_t = 0)]
    pub(crate) slow_recv_buffer: u32,
}
