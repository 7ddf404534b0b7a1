//! `tidegate-load`: run one scenario against Tidegate (and NATS where the
//! scenario compares), print one JSON result, optionally draw a chart.
//!
//! Loopback only; every scenario is bounded in connections and seconds;
//! the brokers are started here on free ports and killed by PID at the end.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, bail};
use clap::{Parser, Subcommand, ValueEnum};
use serde_json::json;
use tidegate_bench::procs::{self, Pinning};
use tidegate_bench::report::{Machine, Report};
use tidegate_bench::scenario::{
    Env, behaviours, fanout, grpc_publish, handshakes, idle, keyed_publish, slow, soak, storm,
    webhooks,
};
use tidegate_bench::target::{self, Kind};

use args::{
    BehaviourArgs, FanoutArgs, GrpcPublishArgs, HandshakeArgs, IdleArgs, SlowArgs, SoakArgs,
    StormArgs, StormMode, WebhookArgs,
};

mod args;

#[derive(Parser)]
#[command(
    name = "tidegate-load",
    about = "Loopback load generator: Tidegate and NATS measured side by side"
)]
struct Cli {
    /// The Tidegate binary (default: $TIDEGATE_BIN, else target/release/tidegate).
    #[arg(long, global = true, env = "TIDEGATE_BIN")]
    tidegate_bin: Option<PathBuf>,
    /// Sockudo's binary, for `--peer sockudo` (bench/README.md, "Beside
    /// Sockudo", says how to build it).
    #[arg(long, global = true, env = "SOCKUDO_BIN")]
    sockudo_bin: Option<PathBuf>,
    /// The nats-server binary (default: found on PATH).
    #[arg(long, global = true, default_value = "nats-server")]
    nats_bin: String,
    /// The peers measured beside Tidegate in fanout, idle and handshakes
    /// (comma-separated: `nats`, `relay`, `graphql`, `sse`, `pusher`,
    /// `sockudo`, or `none`).
    #[arg(
        long,
        global = true,
        value_enum,
        value_delimiter = ',',
        default_value = "nats"
    )]
    peer: Vec<Peer>,
    /// Do not pin the broker and the load generator to separate cores.
    #[arg(long, global = true)]
    no_pin: bool,
    /// Also write the JSON result to this file.
    #[arg(long, global = true)]
    out: Option<PathBuf>,
    /// Draw the scenario's chart to this SVG file.
    #[arg(long, global = true)]
    chart: Option<PathBuf>,
    #[command(subcommand)]
    scenario: Scenario,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Peer {
    Nats,
    /// `tidegate-relay`: Tidegate's wire protocol with no limits at all.
    Relay,
    /// Tidegate again, subscribers over GraphQL (`graphql-transport-ws`)
    /// instead of `/v1/ws` (fan-out: the two side by side in one run).
    Graphql,
    /// Tidegate again, subscribers on `GET /v1/sse` streams instead of
    /// `/v1/ws` (fan-out and idle: the two side by side in one run).
    Sse,
    /// Tidegate again, every client on the Pusher wire (`/app/{key}`,
    /// §16): fan-out and idle, side by side with `/v1/ws` in one run.
    Pusher,
    /// Sockudo (needs `--sockudo-bin`) with the Pusher clients of
    /// `pusher`: fan-out and idle, beside Tidegate's Pusher wire when
    /// `pusher` is named too (issue 40).
    Sockudo,
    None,
}

#[derive(Subcommand)]
enum Scenario {
    /// S subscribers on one channel, publishers paced or closed-loop.
    Fanout(FanoutArgs),
    /// N idle subscribed connections: RSS per connection, connect rate.
    Idle(IdleArgs),
    /// Open + authenticate + close with concurrency C.
    Handshakes(HandshakeArgs),
    /// Seed 000's typist, buggy client and many-socket abuser together.
    Behaviours(BehaviourArgs),
    /// N clients dropped at once, reconnecting with and without jitter.
    Storm(StormArgs),
    /// One non-reading subscriber under a flood.
    Slow(SlowArgs),
    /// Webhook deliveries to a fast endpoint, alone and beside a failing one.
    Webhooks(WebhookArgs),
    /// Minutes of churn on one node, sampling RSS, fds, sockets, channels.
    Soak(SoakArgs),
    /// Publish throughput over HTTP, gRPC unary and gRPC `PublishStream`
    /// to S WebSocket subscribers, one phase each, same run.
    GrpcPublish(GrpcPublishArgs),
    /// HTTP and socket publish with and without idempotency keys (§17),
    /// alternated in one run, on one node and through Redis.
    KeyedPublish(keyed_publish::Params),
}

fn default_tidegate_bin() -> PathBuf {
    procs::find_tidegate_bin().unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/release/tidegate")
    })
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let nofile = procs::raise_nofile();
    let pinning = Pinning::auto(cli.no_pin);
    if let Some(core) = pinning.loadgen_core {
        procs::pin_current_thread(core)?;
    }
    let nats_bin = procs::which(&cli.nats_bin);
    let env = Env {
        tidegate_bin: cli
            .tidegate_bin
            .clone()
            .unwrap_or_else(default_tidegate_bin),
        nats_bin: nats_bin.clone(),
        relay_bin: procs::find_relay_bin(),
        sockudo_bin: cli.sockudo_bin.clone(),
        pinning,
        chart: cli.chart.clone(),
    };
    let machine = Machine::read(
        pinning,
        nats_bin.as_deref().and_then(procs::version_of),
        nofile,
    );
    let started_at_unix = tidegate::auth::unix_now();
    let mut kinds = vec![Kind::Tidegate];
    for peer in &cli.peer {
        let kind = match peer {
            Peer::Nats => Kind::Nats,
            Peer::Relay => Kind::Relay,
            Peer::Graphql => Kind::Graphql,
            Peer::Sse => Kind::Sse,
            Peer::Pusher => Kind::Pusher,
            Peer::Sockudo => Kind::Sockudo,
            Peer::None => continue,
        };
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    if kinds.contains(&Kind::Sockudo) {
        // Fail before the first cell, not after Tidegate's.
        match &env.sockudo_bin {
            Some(bin) if bin.is_file() => {}
            Some(bin) => bail!(
                "--sockudo-bin {}: no such file (bench/README.md, \"Beside Sockudo\", says how to build it)",
                bin.display()
            ),
            None => bail!("--peer sockudo needs --sockudo-bin (or SOCKUDO_BIN)"),
        }
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    let (name, params, results) =
        local.block_on(&rt, async { run(&cli.scenario, &env, &kinds).await })?;
    let mut params = params;
    params["brokers"] = json!(kinds);
    params["tidegate_bin"] = json!(env.tidegate_bin);
    params["tidegate_config_changes"] = json!([target::TIDEGATE_BASE.trim()]);
    if let (true, Some(bin)) = (kinds.contains(&Kind::Sockudo), &env.sockudo_bin) {
        // What Sockudo ran with (the ports are each run's free ones).
        let ports = target::sockudo::Ports {
            http: 0,
            metrics: 0,
        };
        params["sockudo"] = json!({
            "bin": bin,
            "version": procs::version_of(bin),
            "config": target::sockudo::config(ports),
            "env": target::sockudo::ENV,
        });
    }
    let report = Report {
        scenario: name,
        started_at_unix,
        machine,
        params,
        results,
        chart: cli.chart.as_ref().map(|p| p.display().to_string()),
    };
    report.emit(cli.out.as_deref())?;
    // Children are killed by PID as each scenario's brokers are dropped.
    rt.shutdown_timeout(Duration::from_millis(100));
    Ok(())
}

async fn run(
    scenario: &Scenario,
    env: &Env,
    kinds: &[Kind],
) -> Result<(&'static str, serde_json::Value, serde_json::Value)> {
    Ok(match scenario {
        Scenario::Fanout(a) => {
            let p = fanout::Params {
                subscribers: a.subscribers.clone(),
                payloads: a.payload.clone(),
                publishers: a.publishers.max(1),
                rate: a.rate,
                window: a.window.max(1),
                warmup_secs: a.warmup,
                duration_secs: a.duration,
                connect_concurrency: a.connect_concurrency,
                subscribers_per_account: a.per_account,
                idle_secs: a.idle,
                rounds: a.rounds.max(1),
            };
            let r = fanout::run(env, kinds, &p).await?;
            ("fanout", json!(p), r)
        }
        Scenario::Idle(a) => {
            let p = idle::Params {
                connections: a.connections,
                hold_secs: a.hold,
                connect_concurrency: a.connect_concurrency,
                connections_per_account: a.per_account,
            };
            let r = idle::run(env, kinds, &p).await?;
            ("idle", json!(p), r)
        }
        Scenario::Handshakes(a) => {
            let p = handshakes::Params {
                concurrency: a.concurrency,
                duration_secs: a.duration,
                tokens: a.tokens,
                polite: a.polite,
            };
            // SSE streams are measured in fanout and idle only.
            let kinds: Vec<Kind> = kinds
                .iter()
                .copied()
                .filter(|k| !matches!(k, Kind::Sse | Kind::Pusher | Kind::Sockudo))
                .collect();
            let r = handshakes::run(env, &kinds, &p).await?;
            ("handshakes", json!(p), r)
        }
        Scenario::Behaviours(a) => {
            let p = behaviours::Params {
                duration_secs: a.duration,
                abuser_sockets: a.abuser_sockets,
                abuser_messages: a.abuser_messages,
                buggy_rate: a.buggy_rate,
            };
            let r = behaviours::run(env, &p).await?;
            ("behaviours", json!(p), r)
        }
        Scenario::Storm(a) => {
            let modes = match a.mode {
                StormMode::Fixed => vec![storm::Mode::Fixed],
                StormMode::Jitter => vec![storm::Mode::Jitter],
                StormMode::Both => vec![storm::Mode::Fixed, storm::Mode::Jitter],
            };
            let p = storm::Params {
                clients: a.clients,
                clients_per_account: a.per_account,
                modes,
                jitter_ms: a.jitter_ms,
                fixed_retry_ms: a.fixed_retry_ms,
                patience_secs: a.patience,
                node_accepts_per_sec: a.node_accepts,
                bystanders: a.bystanders,
                heartbeat_ms: a.heartbeat_ms,
                metrics_ms: a.metrics_ms,
            };
            let r = storm::run(env, &p).await?;
            ("storm", json!(p), r)
        }
        Scenario::Slow(a) => {
            let p = slow::Params {
                subscribers: a.subscribers,
                rate: a.rate,
                payload_bytes: a.payload.max(target::MIN_PAYLOAD),
                duration_secs: a.duration,
                slow_recv_buffer: a.slow_recv_buffer,
            };
            let r = slow::run(env, &p).await?;
            ("slow", json!(p), r)
        }
        Scenario::Webhooks(a) => {
            let p = webhooks::Params {
                events: a.events,
                batch: a.batch.max(1),
                failing: a.failing,
                fast_rate_per_sec: a.rate,
                max_in_flight: a.max_in_flight.max(1),
                patience_secs: a.patience,
            };
            let r = webhooks::run(env, &p).await?;
            ("webhooks", json!(p), r)
        }
        Scenario::Soak(a) => {
            let p = soak::Params {
                duration_secs: a.minutes * 60.0,
                sample_secs: a.sample_secs.max(1.0),
                churners: a.churners,
                http_per_sec: a.http_per_sec,
                slow_readers: a.slow_readers,
                round_secs: a.round_secs.max(1.0),
                csv: a.csv.clone(),
            };
            let r = soak::run(env, &p).await?;
            ("soak", json!(p), r)
        }
        Scenario::GrpcPublish(a) => {
            let p = grpc_publish::Params {
                subscribers: a.subscribers,
                duration_secs: a.duration,
                payload_bytes: a.payload.max(2),
                in_flight: a.in_flight.max(1),
                subscribers_per_account: a.per_account.max(1),
            };
            let r = grpc_publish::run(env, &p).await?;
            ("grpc-publish", json!(p), r)
        }
        Scenario::KeyedPublish(p) => {
            let r = keyed_publish::run(env, p).await?;
            ("keyed-publish", json!(p), r)
        }
    })
}
