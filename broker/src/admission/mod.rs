//! The admission's one-place rules: the decisions every front makes about
//! a request before and around its charge, written once so that the same
//! situation gets the same answer on `/v1/ws`, SSE, HTTP publish, client
//! publish, presence, GraphQL, gRPC and Pusher (issue 42: each front had
//! its own copy, and the copies had drifted apart).
//!
//! - [`credential`]: the one `Authorization` parser ([`bearer`]); the
//!   scheme is case-insensitive (RFC 7235); and whom a verified credential
//!   names ([`Who`]), what the §1 layers after the credential take.
//! - [`single`]: the one comparison of a price with the plan's
//!   `max_single`, the largest single charge (§0); over it is
//!   `cost_exceeds_max` before any bucket is touched, on every front.
//! - [`cap`]: the subscription cap (`max_subscriptions`) and what dry run
//!   means for it, one decision for every front that subscribes.
//! - [`refusal`]: what a refusal costs its payer: garbage, forbidden and
//!   invalid input `costs.malformed`; a limit's refusal (`cost_exceeds_max`,
//!   a rate limit) nothing.
//!
//! The bucket take itself is [`crate::charge::Ledger::charge`], which
//! applies [`single`] to every payer. Pure functions of their arguments:
//! `tests/layers.rs` holds the rules' one place (no `Bearer` parse, no
//! `max_single` comparison and no subscription-cap dry-run test
//! elsewhere).

pub mod cap;
pub mod credential;
pub mod refusal;
pub mod single;

pub use cap::{Cap, subscription_cap};
pub use credential::{TokenTimes, Who, bearer};
pub use refusal::refusal_units;
pub use single::{CostExceedsMax, check_single};
