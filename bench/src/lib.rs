//! Tidegate's load generator: loopback scenarios that measure a broker
//! from the outside, Tidegate and NATS side by side.
//!
//! # Layout
//!
//! - [`ws`]: a minimal WebSocket client (handshake with refusals reported,
//!   masked writes, zero-copy frame reads) so the load generator stays the
//!   cheap side of the measurement.
//! - [`sse`]: a minimal Server-Sent Events reader (plain HTTP/1.1,
//!   chunked bodies) for Tidegate's `GET /v1/sse`.
//! - [`nats`]: the NATS text protocol inside WebSocket frames.
//! - [`target`]: the broker as clients see it: connect, subscribe,
//!   publish, and events reduced to what scenarios count; the Tidegate
//!   bench config.
//! - [`payload`]: the timestamped bytes each publish carries.
//! - [`find`]: substring search with each needle's searcher built once.
//! - [`procs`]: starting and killing the brokers, pinning, RSS.
//! - [`scenario`]: `fanout`, `idle`, `handshakes`, `behaviours`, `storm`,
//!   `slow`.
//! - [`report`]: the JSON document each scenario prints, with the machine.
//! - [`chart`]: SVG charts of the results.

pub mod chart;
pub mod find;
pub mod nats;
pub mod payload;
pub mod procs;
pub mod report;
pub mod scenario;
pub mod sse;
pub mod target;
pub mod ws;
