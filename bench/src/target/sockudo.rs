//! Sockudo (<https://github.com/sockudo/sockudo>), the Pusher-compatible
//! Rust server, as a peer of Tidegate's Pusher wire (issue 40): the same
//! Pusher clients (`/app/{key}`, one signed `private-` channel, client
//! events as the publishes, see `pusher.rs`) against a Sockudo process the
//! bench starts on free loopback ports with the config written here.
//!
//! The config is Sockudo's shipped defaults with only what the bench needs
//! changed, all listed in [`config`]: loopback ports instead of 6001/9601,
//! the bench's app (the same key and secret as Tidegate's Pusher layer)
//! with client events on, and the limits that would measure themselves
//! (everything comes from one address, and the publishers send far more
//! than Pusher's 10 client events/s) raised the way `TIDEGATE_BASE` raises
//! Tidegate's. Nothing else (buffers, pings, activity timeout, metrics,
//! logging) moves from Sockudo's defaults.

use serde_json::{Value, json};

use super::pusher::{APP_ID, APP_KEY, APP_SECRET};

/// Where a run's Sockudo listens.
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    /// The WebSocket and HTTP API port (Sockudo's default is 6001).
    pub http: u16,
    /// The Prometheus listener (Sockudo's default is 9601).
    pub metrics: u16,
}

/// A budget no bench client reaches: limits stay on but never bind.
const ROOMY: u32 = 1_000_000_000;

/// Sockudo's config file (JSON, which it reads beside TOML) for one run.
pub fn config(ports: Ports) -> Value {
    json!({
        "host": "127.0.0.1",
        "port": ports.http,
        "metrics": {"enabled": true, "host": "127.0.0.1", "port": ports.metrics},
        // All load comes from 127.0.0.1 (Sockudo's default lets one IP
        // open 20 sockets a minute).
        "rate_limiter": {
            "enabled": true,
            "driver": "memory",
            "api_rate_limit": {"max_requests": ROOMY, "window_seconds": 60},
            "websocket_rate_limit": {"max_requests": ROOMY, "window_seconds": 60},
        },
        "app_manager": {
            "driver": "memory",
            "array": {"apps": [{
                "id": APP_ID,
                "key": APP_KEY,
                "secret": APP_SECRET,
                "enabled": true,
                "policy": {
                    "limits": {
                        "max_connections": ROOMY,
                        "max_client_events_per_second": ROOMY,
                    },
                    "features": {"enable_client_messages": true},
                },
            }]},
        },
    })
}

/// The environment Sockudo runs with: only `PATH`, so no `PORT`, `HOST`
/// or app variable of the caller's overrides the file, and one Tokio
/// worker like Tidegate's bench config (`[node] workers = 1`).
pub const ENV: &[(&str, &str)] = &[("TOKIO_WORKER_THREADS", "1")];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_names_the_ports_and_the_bench_app() {
        let c = config(Ports {
            http: 40001,
            metrics: 40002,
        });
        assert_eq!(c["port"], 40001);
        assert_eq!(c["metrics"]["port"], 40002);
        assert_eq!(c["host"], "127.0.0.1");
        let app = &c["app_manager"]["array"]["apps"][0];
        assert_eq!(app["key"], APP_KEY);
        assert_eq!(app["secret"], APP_SECRET);
        assert_eq!(app["policy"]["features"]["enable_client_messages"], true);
        assert!(app["policy"]["limits"]["max_client_events_per_second"].as_u64() > Some(1000));
    }
}
