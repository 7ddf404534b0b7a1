//! Integration tests: a real broker on a free port, real WebSocket and HTTP
//! clients. One test binary (one link), one module per area.

mod common;

mod account_precision;
mod accounts;
mod bad_input;
mod channels;
mod cli;
mod cluster;
mod fuzz_bounded;
mod handshake;
mod handshake_limits;
mod http_publish;
mod inbound_limits;
mod ops;
mod process;
mod redis_server;
mod rules;
mod slow_consumer;
