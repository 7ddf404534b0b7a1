//! The config Tidegate runs with in the load generator. Tidegate runs the shipped `config.toml` (every limit at its default)
//! with only these changes, all listed in the result's `params`:
//! one worker thread; a `bench_publisher` plan with a high message budget
//! for the publisher's own account (subscribers stay on `free`); and,
//! because every client comes from one loopback address, per-IP handshake
//! limits raised (and the node accept budget, except in `storm`).
//!
//! `TIDEGATE_BENCH_SHIPPED_CONFIG` names another file to start from in
//! place of the shipped one: an older binary's own `config.toml`, for a
//! before/after run (an older binary refuses keys added since); empty is
//! unset.

use anyhow::{Context, Result, anyhow};
use tidegate::config::{Config, DEFAULT_TOML};

/// What every Tidegate bench config changes from the shipped file.
pub const TIDEGATE_BASE: &str = r#"
[node]
id = "bench"
workers = 1

[handshake]
# All load comes from 127.0.0.1: per-IP limits would measure themselves.
ip_handshakes_per_sec = 1000000.0
ip_handshake_burst = 1000000
ip_max_open = 1000000
ip_max_unfinished = 1000000

# The publisher's own budget (its account, its sockets); subscribers keep
# the `free` plan with every default.
[plans.bench_publisher]
messages_per_sec = 1000000.0
burst = 1000000
account_messages_per_sec = 1000000.0
account_burst = 1000000
max_connections = 64
handshake_burst = 64
"#;

/// Node accept budget raised for throughput scenarios.
pub const RAISED_ACCEPT_BUDGET: &str = r#"
[handshake]
node_accepts_per_sec = 1000000.0
"#;

/// The environment variable naming a config file to use in place of the
/// shipped one (see the module's doc).
pub const SHIPPED_CONFIG_ENV: &str = "TIDEGATE_BENCH_SHIPPED_CONFIG";

/// The plan publishers' tokens name.
pub const PUBLISHER_PLAN: &str = "bench_publisher";

fn merge(base: &mut toml::Table, over: toml::Table) {
    for (k, v) in over {
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

/// The shipped config with `layers` merged over it in order; returns the
/// TOML text and the config it validates to.
pub fn tidegate_config(layers: &[&str]) -> Result<(String, Config)> {
    let shipped = match std::env::var_os(SHIPPED_CONFIG_ENV).filter(|p| !p.is_empty()) {
        Some(path) => std::fs::read_to_string(&path)
            .with_context(|| format!("{SHIPPED_CONFIG_ENV}: reading {}", path.display()))?,
        None => DEFAULT_TOML.to_owned(),
    };
    let mut root: toml::Table = shipped.parse().context("shipped config.toml")?;
    for layer in layers {
        merge(&mut root, layer.parse().context("bench config layer")?);
    }
    let text = toml::to_string(&root)?;
    let config = Config::from_toml(&text, &|_| None).map_err(|e| anyhow!("bench config: {e}"))?;
    Ok((text, config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_layers_validate() {
        let (text, config) = tidegate_config(&[TIDEGATE_BASE, RAISED_ACCEPT_BUDGET]).unwrap();
        assert!(text.contains("bench_publisher"));
        assert_eq!(config.node.workers, 1);
        assert!(config.limits_for("x", Some(PUBLISHER_PLAN)).is_ok());
    }
}
