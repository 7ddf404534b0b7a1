//! The session layer: what every front does with a subscription between
//! the hub's delivery and its own wire, decided once.
//!
//! A subscription joins (live messages are held until the bridge
//! answers), recovers its history after `since` (in slices, paged under
//! half the subscriber's mark, live messages held behind it), is live
//! (each `seq` once and in order) and, for a front whose clients cannot
//! be told of a gap and go on (a GraphQL subscription), breaks at its
//! first loss: [`Subscription`], a plain type a front keeps under its own
//! lock beside its queue. A front's own frames that must keep their place
//! among the messages (Pusher's presence member events, which pusher-js
//! must get after `subscription_succeeded`) wait in it with them. How a
//! front says a message in its own words is [`Render`]; the one report of
//! a drop episode (when it begins, when it ends, how many were lost) is
//! [`Episode`]; what paging a recovery did, for the front's slow-consumer
//! grace, is [`Pumped`].
//!
//! It knows the hub's delivery types (`Joined`, `Recovery`, the gauge) and
//! no front: the fronts sit above it and never import each other.

mod answers;
mod compact;
mod episode;
mod pumped;
mod render;
mod subscription;

pub use answers::{Filled, Held, Joining, Left, Next, Offer, OnLoss, Phase, Report};
pub use compact::Subscription;
pub use episode::Episode;
pub use pumped::Pumped;
pub use render::Render;

#[cfg(test)]
mod tests;
