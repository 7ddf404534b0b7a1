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
//! Eight layers; a module imports only from layers below its own (and from
//! earlier siblings where docs/architecture.md's table says so, which
//! `tests/layers.rs` enforces). Lowest first:
//!
//! 0. **Base**, data and pure functions: [`protocol`] (frames, codes,
//!    channel names, globs, the wire encoding; imports nothing),
//!    [`config`] (`config.toml`, plans, validation that reports every
//!    problem), [`clock`], [`limiter`] (token bucket, keyed buckets, the
//!    account sampler, notice throttle), [`pricing`] (the cost function),
//!    [`auth`] (tokens, verified with every configured key: HS secrets with
//!    key ids, public keys from PEM and JWKS files, for rotation without a
//!    flag day), [`tls`] (rustls with ring for the listeners, certificates
//!    swapped on SIGHUP, https webhooks and `rediss://`), [`alive`], [`process_metrics`], [`metrics`]
//!    (Prometheus families, the webhook metrics, the overview's history),
//!    [`exceeded`] (one event and one count per refusal), [`refusal`] (the
//!    HTTP refusal body), [`gate`] (handshake defences, the client
//!    address), [`rules`] (extra limits by account, channel, pair or
//!    connection), [`bans`].
//! 1. **Core**: [`hub`] (channels, `seq`, bounded history, local fan-out,
//!    one encoding per publish; it writes into subscribers' queues through
//!    `hub::Sink` and does not know sockets exist), [`idempotency`] (the
//!    node's table of publish keys, §17: a retry gets the first `seq`) and
//!    [`cluster`] (the bridge, in parts: the [`cluster::Broker`] half,
//!    the distributed [`cluster::LimiterStore`], and the
//!    [`cluster::Bridge`] that bundles them with the admin store; memory
//!    for one node, Redis for many; it reports upward through
//!    [`cluster::Events`] and does not know the node).
//! 2. **Services**: [`admission`] (the one-place rules of every front's
//!    admission: the `Authorization` parser and whom a verified credential
//!    names, the `max_single` comparison, what a refusal costs), [`account`] (the supervisor actor: sampled account
//!    budget, connection cap, 1008 on breach; the `CloseWith` and
//!    `Reconfigure` messages every connection takes), [`charge`] (the one
//!    charge primitive every front calls: payer, price, admitted or a
//!    typed refusal; API keys; a backend publish's checks and price),
//!    [`webhook`] (outbound webhooks, §9, on their own thread),
//!    [`presence`] (who is in a channel, §13: coalesced diffs, members
//!    held in Redis under each node's lease), [`hooks`] (backend hooks,
//!    §15: the backend asked before connect, subscribe, publish, refresh
//!    and rpc, behind its own pacing, single flight, cache and breaker,
//!    on its own thread).
//! 3. **Node**: [`node`] (what a node shares and how operator actions apply
//!    to its connections; it knows no front), [`unfinished`] (connections
//!    whose request is not complete yet: TLS handshake, head or body).
//! 4. **Session**: [`session`] (the one subscription state machine every
//!    front keeps beside its queue: joining, recovering under half the
//!    mark, live, broken; the one drop-episode report; the small trait a
//!    front renders a message through).
//! 5. **Dialect**: [`dialect`] (the socket machinery's plug-in interface:
//!    what `socket` offers a protocol it carries other than `tidegate.v1`,
//!    implemented by `socket`, used by `graphql` and `pusher`; it speaks
//!    the WebSocket machinery's words, no front's protocol).
//! 6. **Fronts**, which never import each other: [`socket`] (one actix
//!    actor per WebSocket owning its buckets, subscriptions and outbound
//!    queue, `socket/actor/`; the handshake in `socket/handshake.rs`), [`http`] (publish
//!    and batch, `/healthz`, `/readyz`, `/metrics`), [`grpc`]
//!    (`tidegate.v1.Broker` on its own runtime), [`admin`] (the operators'
//!    routes and page, §10), [`graphql`] (the GraphQL API, §12: documents
//!    priced and measured before they run, charged to the bucket HTTP and
//!    gRPC share, run on a runtime of their own, refunded after),
//!    [`pusher`] (the Pusher Channels protocol, §16: `/app/{key}` as a
//!    dialect of the socket machinery, the app's channels under names no
//!    Tidegate client can give).
//! 7. **Top**: [`drain`] (the staggered SIGTERM drain), [`reload`] (SIGHUP
//!    and file-change reloads), [`server`] (routes, listeners and
//!    `run(listener, config, shutdown)`, the entry point of the binary and
//!    of every integration test), [`fuzzing`] (the parsers' entry points
//!    for the fuzz targets).

pub mod account;
pub mod admin;
pub mod admission;
pub mod alive;
pub mod auth;
pub mod bans;
pub mod charge;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod cors;
pub mod dialect;
pub mod drain;
pub mod exceeded;
pub mod fuzzing;
pub mod gate;
pub mod graphql;
pub mod grpc;
pub mod hooks;
pub mod http;
pub mod hub;
pub mod idempotency;
pub mod limiter;
pub mod metrics;
pub mod node;
pub mod presence;
pub mod pricing;
pub mod process_metrics;
pub mod protocol;
pub mod pusher;
pub mod refusal;
pub mod reload;
pub mod rules;
pub mod server;
pub mod session;
pub mod socket;
pub mod tls;
pub mod unfinished;
pub mod webhook;

pub use config::Config;
pub use node::Node;
pub use server::{run, serve, serve_with_grpc};
