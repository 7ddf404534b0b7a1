//! The `tidegate` command: serve, mint a dev token, check a config.

use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::parser::ValueSource;
use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use tidegate::Config;
use tidegate::auth::{Authenticator, Claims, unix_now};
use tidegate::config::ConfigError;
use tidegate::config::LogFormat;

/// Fan-out allocated and freed per delivered message (the actor mailbox's
/// node and envelope, before the hub wrote into each socket's queue
/// directly; queue growth still does); glibc's malloc spent ~23% of the
/// broker's CPU on that churn, jemalloc a fraction of it.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
#[command(
    name = "tidegate",
    version,
    about = "A realtime pub/sub broker that cannot be knocked over by its own clients",
    after_help = "Every key of the node-wide config sections can also be set in the environment as TIDEGATE_<SECTION>_<KEY> (TIDEGATE_CLUSTER_REDIS_URL, TIDEGATE_API_KEYS_0_KEY); see `tidegate check-config`."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The flags that choose and adjust a node's config. Each has an
/// environment variable; the config's own variables
/// (`TIDEGATE_<SECTION>_<KEY>`) apply under the flags.
#[derive(Args)]
struct NodeArgs {
    /// Config file (default: the embedded config.toml). Reloaded on SIGHUP
    /// and when it changes.
    #[arg(long, env = "TIDEGATE_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Override node.listen (e.g. 127.0.0.1:0 for a free port).
    #[arg(long, env = "TIDEGATE_NODE_LISTEN", value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// Override node.id (unique per cluster).
    #[arg(long, env = "TIDEGATE_NODE_ID", value_name = "ID")]
    node_id: Option<String>,
    /// Override grpc.listen, the gRPC API's address (127.0.0.1:0 for a
    /// free port).
    #[arg(long, env = "TIDEGATE_GRPC_LISTEN", value_name = "ADDR")]
    grpc_listen: Option<SocketAddr>,
}

#[derive(Clone, Copy, ValueEnum)]
enum CliLogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, for log shippers.
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Run a node (the embedded config.toml unless --config is given).
    Serve {
        #[command(flatten)]
        node: NodeArgs,
        /// Log line format; overrides `[log] format` (default text).
        #[arg(long, env = "TIDEGATE_LOG_FORMAT", value_enum)]
        log_format: Option<CliLogFormat>,
        /// Log filter (tracing's EnvFilter syntax; RUST_LOG if unset).
        #[arg(long, env = "TIDEGATE_LOG_LEVEL", value_name = "FILTER")]
        log_level: Option<String>,
    },
    /// Mint a development token signed with the configured secret
    /// (TIDEGATE_JWT_SECRET if set).
    Token {
        #[arg(long)]
        account: String,
        /// Channel globs the token may subscribe to (repeatable).
        #[arg(long = "sub")]
        sub_channels: Vec<String>,
        /// Channel globs the token may publish to (repeatable).
        #[arg(long = "pub")]
        pub_channels: Vec<String>,
        #[arg(long)]
        plan: Option<String>,
        #[arg(long)]
        role: Option<String>,
        /// Lifetime in seconds (default: auth.dev_token_ttl_secs).
        #[arg(long)]
        ttl: Option<u64>,
        /// The `info` claim presence shows (§13): a JSON object.
        #[arg(long, value_name = "JSON")]
        info: Option<String>,
        #[arg(long, env = "TIDEGATE_CONFIG", value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Report every problem in a config (the file, or the embedded default,
    /// with the environment and flags over it) and where each value came
    /// from; exit 1 if there is a problem.
    CheckConfig {
        #[arg(env = "TIDEGATE_CONFIG", value_name = "FILE")]
        file: Option<PathBuf>,
        /// As for `serve`.
        #[arg(long, value_name = "ADDR")]
        listen: Option<SocketAddr>,
        /// As for `serve`.
        #[arg(long, value_name = "ID")]
        node_id: Option<String>,
        /// As for `serve`.
        #[arg(long, value_name = "ADDR")]
        grpc_listen: Option<SocketAddr>,
    },
    /// Exit 0 when the node at ADDR answers `GET /healthz` with 200 (for
    /// container health checks in images without curl).
    Healthcheck {
        #[arg(default_value = "127.0.0.1:8080")]
        addr: SocketAddr,
    },
}

/// The file (or the embedded default) with the environment over it.
fn load(path: Option<&PathBuf>) -> Result<Config, ConfigError> {
    match path {
        Some(p) => Config::load(p),
        None => Config::embedded_with_env(),
    }
}

/// `--listen`, `--node-id` and `--grpc-listen` given on the command line.
/// Their variables (`TIDEGATE_NODE_LISTEN`, `TIDEGATE_NODE_ID`,
/// `TIDEGATE_GRPC_LISTEN`) are the config's own, so a value clap took from
/// the environment is left to the config, which reports it as coming from
/// there.
fn command_line_flags(matches: &ArgMatches, node: &NodeArgs) -> Flags {
    let typed = |id: &str| matches.value_source(id) == Some(ValueSource::CommandLine);
    Flags {
        listen: node.listen.filter(|_| typed("listen")),
        node_id: node.node_id.clone().filter(|_| typed("node_id")),
        grpc_listen: node.grpc_listen.filter(|_| typed("grpc_listen")),
    }
}

/// The flags that override the config.
struct Flags {
    listen: Option<SocketAddr>,
    node_id: Option<String>,
    grpc_listen: Option<SocketAddr>,
}

impl Flags {
    fn apply(self, config: &mut Config) -> Result<(), ConfigError> {
        config.apply_flags(self.listen, self.node_id)?;
        if let Some(addr) = self.grpc_listen {
            config.set_grpc_flag(addr)?;
        }
        Ok(())
    }
}

fn main() -> Result<()> {
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches)?;
    let sub = matches
        .subcommand()
        .map(|(_, m)| m.clone())
        .unwrap_or_default();
    match cli.command {
        Command::Serve {
            node,
            log_format,
            log_level,
        } => {
            let flags = command_line_flags(&sub, &node);
            let log_format = log_format.map(|f| match f {
                CliLogFormat::Text => LogFormat::Text,
                CliLogFormat::Json => LogFormat::Json,
            });
            serve(node.config, flags, log_format, log_level)
        }
        Command::Token {
            account,
            sub_channels,
            pub_channels,
            plan,
            role,
            ttl,
            info,
            config,
        } => {
            let config = load(config.as_ref()).with_context(|| source_name(config.as_ref()))?;
            if let Some(p) = &plan
                && !config.plan_names().any(|n| n == p)
            {
                bail!("plan {p:?} is not defined in the config");
            }
            let auth = Authenticator::from_config(&config.auth, &config.jwt_keys)?;
            let claims = Claims {
                sub: account,
                exp: unix_now() + ttl.unwrap_or(config.auth.dev_token_ttl_secs),
                plan,
                role,
                sub_channels,
                pub_channels,
                info: match info {
                    Some(text) => {
                        let v: serde_json::Value =
                            serde_json::from_str(&text).context("--info is not JSON")?;
                        tidegate::protocol::presence::check_info(&v).map_err(anyhow::Error::msg)?;
                        Some(v)
                    }
                    None => None,
                },
            };
            println!("{}", auth.try_mint(&claims)?);
            Ok(())
        }
        Command::Healthcheck { addr } => healthcheck(addr),
        Command::CheckConfig {
            file,
            listen,
            node_id,
            grpc_listen,
        } => {
            let name = source_name(file.as_ref());
            let flags = Flags {
                listen,
                node_id,
                grpc_listen,
            };
            let result = load(file.as_ref())
                .and_then(|mut c| flags.apply(&mut c).map(|()| c))
                .and_then(check_files);
            match result {
                Ok(config) => {
                    println!("{name}: ok");
                    for w in &config.warnings {
                        println!("  warning: {w}");
                    }
                    for line in config.report() {
                        println!("  {line}");
                    }
                    Ok(())
                }
                Err(e) => {
                    eprintln!("{name}: {} problem(s)", e.problems.len());
                    for p in &e.problems {
                        eprintln!("  - {p}");
                    }
                    std::process::exit(1);
                }
            }
        }
    }
}

/// The files a valid config names, read as `serve` would read them: key
/// files (PEM, JWKS), the listeners' certificates, the Redis TLS files.
fn check_files(config: Config) -> Result<Config, ConfigError> {
    let mut problems = Vec::new();
    if let Err(e) = Authenticator::from_config(&config.auth, &config.jwt_keys) {
        problems.push(e.to_string());
    }
    if let Err(e) = tidegate::tls::Listeners::load(&config) {
        problems.push(format!("TLS: {e}"));
    }
    if config.cluster.mode.uses_redis()
        && let Err(e) = tidegate::cluster::redis::RedisTarget::open(&config.cluster)
    {
        problems.push(format!("cluster: {e}"));
    }
    if problems.is_empty() {
        Ok(config)
    } else {
        Err(ConfigError { problems })
    }
}

fn healthcheck(addr: SocketAddr) -> Result<()> {
    use std::io::Read;
    let timeout = std::time::Duration::from_secs(2);
    let mut s = std::net::TcpStream::connect_timeout(&addr, timeout)
        .with_context(|| format!("connecting to {addr}"))?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    write!(
        s,
        "GET /healthz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut head = [0u8; 12];
    s.read_exact(&mut head)?;
    if head.starts_with(b"HTTP/1.1 200") {
        Ok(())
    } else {
        bail!(
            "{addr} answered {:?}",
            String::from_utf8_lossy(&head).trim()
        )
    }
}

fn source_name(path: Option<&PathBuf>) -> String {
    match path {
        Some(p) => p.display().to_string(),
        None => "embedded config.toml".into(),
    }
}

/// Starts logging to stderr. JSON lines carry the event's target
/// (`tidegate::admin`, `tidegate::exceeded`) and the span fields (conn,
/// account).
fn init_logs(format: LogFormat, level: Option<&str>) -> Result<()> {
    let filter = match level {
        Some(l) => tracing_subscriber::EnvFilter::try_new(l)
            .with_context(|| format!("--log-level {l:?}"))?,
        None => tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| "info,actix_server=warn".into()),
    };
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => logs.init(),
        LogFormat::Json => logs.json().with_current_span(true).init(),
    }
    Ok(())
}

fn serve(
    path: Option<PathBuf>,
    flags: Flags,
    log_format: Option<LogFormat>,
    log_level: Option<String>,
) -> Result<()> {
    let loaded = load(path.as_ref()).with_context(|| source_name(path.as_ref()));
    // Logging follows the file's `[log] format` unless the flag or its
    // variable says otherwise; a config that fails to load is reported in
    // the flag's format (or text).
    let format = match (&loaded, log_format) {
        (_, Some(f)) => f,
        (Ok(c), None) => c.log.format,
        (Err(_), None) => LogFormat::Text,
    };
    init_logs(format, log_level.as_deref())?;
    let mut config = loaded?;
    flags.apply(&mut config)?;
    for w in &config.warnings {
        tracing::warn!("{w}");
    }
    let listener = TcpListener::bind(config.node.listen)
        .with_context(|| format!("binding {}", config.node.listen))?;
    let grpc = TcpListener::bind(config.grpc.listen)
        .with_context(|| format!("binding grpc.listen {}", config.grpc.listen))?;
    let addr = listener.local_addr()?;
    let grpc_addr = grpc.local_addr()?;

    actix_rt::System::new().block_on(async move {
        let node = tidegate::Node::new(config)?;
        let hangup = tidegate::reload::hangups();
        actix_rt::spawn(tidegate::reload::watch(node.clone(), path, hangup));
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .context("installing the SIGTERM handler")?;
        // Tests and scripts read these lines to learn the ports (this one
        // first); they come after the signal handlers are in place. A
        // reader that stops after the first line must not end the node, so
        // a closed stdout is ignored.
        let mut out = std::io::stdout().lock();
        let http = if node.tls.http.is_some() {
            "https"
        } else {
            "http"
        };
        let grpc_scheme = if node.tls.grpc.is_some() {
            "https"
        } else {
            "http"
        };
        let _ = writeln!(out, "tidegate listening on {http}://{addr}");
        let _ = writeln!(out, "tidegate grpc on {grpc_scheme}://{grpc_addr}");
        let _ = out.flush();
        drop(out);
        let shutdown = async move {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        };
        tidegate::serve_with_grpc(listener, Some(grpc), node, shutdown).await?;
        anyhow::Ok(())
    })?;
    Ok(())
}
