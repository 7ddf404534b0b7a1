//! Hot reload: on SIGHUP, or when the config file changes, validate the new
//! file and apply it to the running node without dropping a connection; if
//! it has problems, keep the old config and log every one of them.
//!
//! SIGHUP is always handled, file or not: operators send it by habit, and
//! the default action of an unhandled HUP is to kill the process.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::signal::unix::Signal;

use crate::config::{Config, ConfigError};
use crate::node::Node;

/// How often the file's modification time is looked at.
const POLL: Duration = Duration::from_secs(2);

/// Loads `path` and applies it. The listen addresses (HTTP and gRPC)
/// cannot change on a running node: the old ones are kept (and a different
/// one logged).
pub fn reload_file(node: &Node, path: &Path) -> Result<(), ConfigError> {
    let result = Config::load(path).and_then(|mut config| {
        let running = node.config.load();
        config.keep_flags_from(&running)?;
        let listen = running.node.listen;
        if config.node.listen != listen {
            tracing::warn!(old = %listen, new = %config.node.listen, "node.listen needs a restart; keeping the old address");
            config.set_listen(listen)?;
        }
        let grpc = running.grpc.listen;
        if config.grpc.listen != grpc {
            tracing::warn!(old = %grpc, new = %config.grpc.listen, "grpc.listen needs a restart; keeping the old address");
            config.set_grpc_listen(grpc)?;
        }
        node.reload(config).map_err(|problems| ConfigError { problems })
    });
    match &result {
        Ok(()) => node.metrics.reloaded("applied"),
        Err(e) => {
            node.metrics.reloaded("refused");
            for p in &e.problems {
                tracing::error!(file = %path.display(), problem = %p, "config reload refused; keeping the running config");
            }
        }
    }
    result
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Installs the SIGHUP handler. Call it before the node announces itself,
/// so that a HUP sent as soon as the node is up finds it in place.
pub fn hangups() -> Option<Signal> {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGHUP");
            None
        }
    }
}

/// Reloads `path` on SIGHUP and when it changes; without a file, SIGHUP
/// reads the key and certificate files the config names again (a JWKS,
/// PEM keys, the listeners' certificates) and is otherwise counted as
/// ignored. Runs until the task is dropped.
pub async fn watch(node: Arc<Node>, path: Option<PathBuf>, hangup: Option<Signal>) {
    match path {
        Some(path) => watch_file(node, path, hangup).await,
        None => {
            let Some(mut hangup) = hangup else { return };
            while hangup.recv().await.is_some() {
                if !names_files(&node.config.load()) {
                    node.metrics.reloaded("ignored");
                    tracing::info!(
                        "SIGHUP ignored: this node runs the embedded config (no --config file to reload)"
                    );
                    continue;
                }
                match node.reload_files() {
                    Ok(()) => node.metrics.reloaded("applied"),
                    Err(problems) => {
                        node.metrics.reloaded("refused");
                        for p in &problems {
                            tracing::error!(problem = %p, "key or certificate reload refused; keeping the running ones");
                        }
                    }
                }
            }
        }
    }
}

/// Whether the config names key or certificate files a SIGHUP re-reads.
fn names_files(config: &Config) -> bool {
    !config.auth.jwks_file.is_empty()
        || config
            .jwt_keys
            .iter()
            .any(|k| matches!(k.source, crate::config::KeySource::PublicKeyFile(_)))
        || !config.node.tls_cert_file.is_empty()
        || !config.grpc.tls_cert_file.is_empty()
}

async fn watch_file(node: Arc<Node>, path: PathBuf, mut hangup: Option<Signal>) {
    let mut seen = modified(&path);
    let mut tick = tokio::time::interval(POLL);
    loop {
        let by_signal = tokio::select! {
            Some(()) = async { match &mut hangup { Some(h) => h.recv().await, None => std::future::pending().await } } => true,
            _ = tick.tick() => false,
        };
        let now = modified(&path);
        if by_signal || now != seen {
            seen = now;
            let _ = reload_file(&node, &path);
        }
    }
}
