//! Tidegate: a realtime pub/sub broker that cannot be knocked over by its
//! own clients.
//!
//! Browsers subscribe over WebSocket, backend services publish over HTTP,
//! and every client behaviour — a typist, a runaway loop, an account
//! opening many sockets, a reader that stopped reading — meets its own
//! measured response.
//!
//! # Layout
//!
//! - [`server`]: routes and `run(listener, config, shutdown)`, the entry
//!   point of the binary and of every integration test; [`drain`]: the
//!   staggered SIGTERM drain.
//! - [`node`]: what a node shares: config, hub, bridge, metrics, sockets.
//! - [`socket`]: one actix actor per WebSocket. It owns its token buckets
//!   ([`socket::Admission`]), its subscriptions and its outbound queue
//!   (`socket/outbox.rs`, which knows the real unsent bytes, and which
//!   the hub writes live messages into directly: `socket/delivery.rs`);
//!   the handshake checks live in `socket/handshake.rs`.
//! - [`hub`]: channels, `seq`, bounded history and local fan-out (one
//!   encoding per publish, shared bytes for every subscriber).
//! - [`cluster`]: the [`cluster::Bridge`] between nodes; in memory for a
//!   single node.
//! - [`http`]: HTTP publish with per-key buckets, and `/healthz`,
//!   `/readyz`, `/metrics`.
//! - [`grpc`]: the gRPC API (`tidegate.v1.Broker`: `Publish`,
//!   `PublishStream`, `Subscribe`) on its own address and tokio runtime.
//! - [`backend`]: what HTTP and gRPC publish share (checks, price, the
//!   API-key bucket); [`pricing`]: the cost function (size, fan-out).
//! - [`account`]: the account supervisor actor (sampled account budget,
//!   connection cap, 1008 on breach).
//! - [`gate`]: handshake defences before account state (node accept
//!   budget, per-IP rate and cap, per-identity bucket).
//! - [`rules`]: extra limits by account, channel, pair or connection.
//! - [`exceeded`]: one structured event and one metric per refusal.
//! - [`limiter`]: pure limiter primitives (token bucket, keyed buckets,
//!   notice throttle).
//! - [`protocol`]: frames in and out, channel names, globs, and the code
//!   table shared with the TypeScript SDK.
//! - [`config`]: `config.toml`, plans and accounts, validation that
//!   reports every problem; [`reload`]: SIGHUP and file-change reloads.
//! - [`admin`]: the operators' routes and page (§10): overview, disconnect,
//!   ban and unban, cluster-wide through the bridge.
//! - [`webhook`]: outbound webhooks (§9), on their own thread.
//! - [`auth`]: tokens, verified with every configured key (HS secrets with
//!   key ids, public keys from PEM and JWKS files) for rotation without a
//!   flag day; [`tls`]: rustls (ring) for the listeners, with certificates
//!   swapped on SIGHUP, for https webhooks and `rediss://`.
//!   [`metrics`]: Prometheus counters and
//!   histograms; [`process_metrics`]: the process's memory, descriptors
//!   and CPU from `/proc`; [`alive`]: tokio tasks and actix actors alive.
//! - [`fuzzing`]: the parsers' entry points for the fuzz targets.

pub mod account;
pub mod admin;
pub mod alive;
pub mod auth;
pub mod backend;
pub mod cluster;
pub mod config;
pub mod drain;
pub mod exceeded;
pub mod fuzzing;
pub mod gate;
pub mod grpc;
pub mod http;
pub mod hub;
pub mod limiter;
pub mod metrics;
pub mod node;
pub mod pricing;
pub mod process_metrics;
pub mod protocol;
pub mod reload;
pub mod rules;
pub mod server;
pub mod socket;
pub mod tls;
pub mod unfinished;
pub mod webhook;

pub use config::Config;
pub use node::Node;
pub use server::{run, serve, serve_with_grpc};
