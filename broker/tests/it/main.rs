//! Integration tests: a real broker on a free port, real WebSocket and HTTP
//! clients. One test binary (one link), one module per area.

mod common;

mod account_precision;
mod accounts;
mod admin;
mod admin_cluster;
mod bad_input;
mod channels;
mod cli;
mod cli_env;
mod closing;
mod cluster;
mod cluster_failover;
mod cluster_reshard;
mod cluster_sharded;
mod delivery;
mod faults_fd_limit;
mod faults_half_open;
mod faults_redis;
mod faults_reload;
mod faults_slowloris;
mod fuzz_bounded;
mod graphql;
mod graphql_budget;
mod grpc;
mod grpc_cluster;
mod grpc_operators;
mod grpc_stream;
mod grpc_subscribe;
mod handshake;
mod handshake_limits;
mod http_publish;
mod inbound_limits;
mod ops;
mod process;
mod receiver;
mod redis_cluster;
mod redis_server;
mod rules;
mod slow_consumer;
mod webhooks;
mod webhooks_cluster;
mod webhooks_input;
