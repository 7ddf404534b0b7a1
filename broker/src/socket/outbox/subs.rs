//! Where each of a socket's subscriptions stands: one [`Sub`] a channel,
//! kept in the outbox beside its queue, under the same lock
//! (`outbox.rs`'s `Shared`), so that a message is queued exactly once, in
//! `seq` order, after its subscribe ack. What the hub's deliveries and the
//! joins do with them is `delivery.rs`'s.

use std::collections::HashMap;
use std::sync::Arc;

use crate::session::{OnLoss, Subscription};

/// A socket's subscriptions, by channel. Bounded by the plan's
/// `max_subscriptions` (a subscribe past it is refused before it is
/// added).
pub(super) type Subs = HashMap<Arc<str>, Sub, foldhash::fast::RandomState>;

/// A subscription as the socket holds it. 32 bytes: a live
/// [`Subscription`] is its position and keeps its machine boxed only
/// while it joins, recovers or holds messages, so every entry of the
/// socket's map stays small (issue 42: idle memory per subscribed socket).
pub(super) struct Sub {
    /// The number of its join: the bridge's answer to a join superseded
    /// meanwhile (unsubscribed, or subscribed again) changes nothing.
    pub(super) join: u64,
    pub(super) sub: Subscription,
}

impl Sub {
    /// Joining as join number `join`: live messages are held until the
    /// bridge's answer (`Outbox::joined`).
    pub(super) fn joining(join: u64) -> Sub {
        Sub {
            join,
            sub: Subscription::new(OnLoss::Continue),
        }
    }
}
