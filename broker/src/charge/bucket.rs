//! The buckets the bridge keeps by name, as the ledger charges them: an
//! API key's and a token identity's (client publish), each with its
//! capacity, refill and dry-run name.

use super::KeyState;
use crate::config::{LimitName, Limits};
use crate::metrics::Layer;

/// The name of an identity's bucket: beside the API keys' (fingerprints in
/// hex, which never hold a `:`), the same on every node.
pub(super) fn identity_bucket(account: &str) -> String {
    format!("sub:{account}")
}

/// A bucket the bridge keeps by name, with its capacity and refill.
pub(super) struct Bucket<'b> {
    pub(super) id: &'b str,
    pub(super) capacity: f64,
    pub(super) rate: f64,
    /// The limit whose dry run shadows its refusals (none: always
    /// enforced; §0 lists no API key bucket).
    pub(super) dry_run: Option<LimitName>,
}

impl<'b> Bucket<'b> {
    /// An API key's: its account plan's burst and rate (§5).
    pub(super) fn key(key: &'b KeyState, limits: &Limits) -> Bucket<'b> {
        Bucket {
            id: &key.id,
            capacity: f64::from(limits.account_burst),
            rate: limits.account_messages_per_sec,
            dry_run: None,
        }
    }

    /// An identity's: the plan's per-connection numbers.
    pub(super) fn identity(id: &'b str, limits: &Limits) -> Bucket<'b> {
        Bucket {
            id,
            capacity: f64::from(limits.burst),
            rate: limits.messages_per_sec,
            dry_run: Some(LimitName::Messages),
        }
    }
}

/// Whether a refusal by a key's or an account's bucket is only counted
/// (dry run): under GraphQL's layer, its own name shadows it on either
/// bucket (§12: `dry_run = ["graphql"]`); elsewhere `name`, the bucket's
/// own (an API key's bucket has none: §0 lists the socket's and the
/// account's limits, so it always enforces).
pub(super) fn dry_run(layer: Layer, limits: &Limits, name: Option<LimitName>) -> bool {
    match layer {
        Layer::Graphql => limits.is_dry_run(LimitName::Graphql),
        _ => name.is_some_and(|n| limits.is_dry_run(n)),
    }
}
