//! Integration tests: a real broker on a free port, real WebSocket and HTTP
//! clients. One test binary (one link), one module per area.

mod common;

mod bad_input;
mod channels;
mod cli;
mod handshake;
mod http_publish;
mod inbound_limits;
mod ops;
mod slow_consumer;
