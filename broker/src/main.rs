//! The `tidegate` command: serve, mint a dev token, check a config.

use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use tidegate::Config;
use tidegate::auth::{Authenticator, Claims, unix_now};
use tidegate::config::LogFormat;

/// Fan-out allocates and frees per delivered message (the actor mailbox's
/// node and envelope); glibc's malloc spent ~23% of the broker's CPU on
/// that churn, jemalloc a fraction of it.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
#[command(
    name = "tidegate",
    version,
    about = "A realtime pub/sub broker that cannot be knocked over by its own clients"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a node (the embedded config.toml unless --config is given).
    Serve {
        #[arg(long)]
        config: Option<PathBuf>,
        /// Override node.listen (e.g. 127.0.0.1:0 for a free port).
        #[arg(long)]
        listen: Option<SocketAddr>,
    },
    /// Mint a development token signed with the configured secret.
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
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Report every problem in a config file; exit 1 if there is one.
    CheckConfig { file: PathBuf },
    /// Exit 0 when the node at ADDR answers `GET /healthz` with 200 (for
    /// container health checks in images without curl).
    Healthcheck {
        #[arg(default_value = "127.0.0.1:8080")]
        addr: SocketAddr,
    },
}

fn load(path: Option<&PathBuf>) -> Result<Config> {
    match path {
        Some(p) => Config::load(p).with_context(|| format!("loading {}", p.display())),
        None => Ok(Config::embedded()),
    }
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve { config, listen } => serve(config, listen),
        Command::Token {
            account,
            sub_channels,
            pub_channels,
            plan,
            role,
            ttl,
            config,
        } => {
            let config = load(config.as_ref())?;
            if let Some(p) = &plan
                && !config.plan_names().any(|n| n == p)
            {
                bail!("plan {p:?} is not defined in the config");
            }
            let auth = Authenticator::new(&config.auth.jwt_secret, 0)?;
            let claims = Claims {
                sub: account,
                exp: unix_now() + ttl.unwrap_or(config.auth.dev_token_ttl_secs),
                plan,
                role,
                sub_channels,
                pub_channels,
            };
            println!("{}", auth.mint(&claims));
            Ok(())
        }
        Command::Healthcheck { addr } => healthcheck(addr),
        Command::CheckConfig { file } => match Config::load(&file) {
            Ok(_) => {
                println!("{}: ok", file.display());
                Ok(())
            }
            Err(e) => {
                eprintln!("{}: {} problem(s)", file.display(), e.problems.len());
                for p in &e.problems {
                    eprintln!("  - {p}");
                }
                std::process::exit(1);
            }
        },
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

/// Starts logging to stderr: `[log] format` from the config, unless
/// `TIDEGATE_LOG_FORMAT` (`text` or `json`) overrides it. JSON lines carry
/// the event's target (`tidegate::admin`, `tidegate::exceeded`) and the
/// span fields (conn, account).
fn init_logging(config: &Config) -> Result<()> {
    let format = match std::env::var("TIDEGATE_LOG_FORMAT") {
        Ok(v) => v
            .parse::<LogFormat>()
            .map_err(|e| anyhow::anyhow!("TIDEGATE_LOG_FORMAT: {e}"))?,
        Err(_) => config.log.format,
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "info,actix_server=warn".into());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().with_current_span(true).init(),
        LogFormat::Text => builder.init(),
    }
    Ok(())
}

fn serve(path: Option<PathBuf>, listen: Option<SocketAddr>) -> Result<()> {
    let mut config = load(path.as_ref())?;
    init_logging(&config)?;
    if let Some(addr) = listen {
        config.set_listen(addr)?;
    }
    let listener = TcpListener::bind(config.node.listen)
        .with_context(|| format!("binding {}", config.node.listen))?;
    let addr = listener.local_addr()?;
    // Tests and scripts read this line to learn the port.
    println!("tidegate listening on http://{addr}");
    std::io::stdout().flush()?;

    actix_rt::System::new().block_on(async move {
        let node = tidegate::Node::new(config)?;
        if let Some(path) = path {
            actix_rt::spawn(tidegate::reload::watch(node.clone(), path));
        }
        let shutdown = async {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .expect("SIGTERM handler");
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        };
        tidegate::serve(listener, node, shutdown).await?;
        anyhow::Ok(())
    })?;
    Ok(())
}
