//! The one report of a drop episode.

use crate::hub::{OutboundGauge, Reserve};

/// A subscriber's drop episode, as its gauge counts it: it begins at the
/// first message dropped at the mark ([`Reserve::FirstDrop`], when the
/// front starts its slow-consumer grace) and ends once the subscriber is
/// back under its mark, when the front reports how many were lost, once
/// (`slow_consumer` on a socket, `SlowConsumer` on a gRPC stream, a
/// GraphQL subscription's `SLOW_CONSUMER`).
///
/// Every message dropped until the episode is reported is dropped (the
/// gauge keeps refusing while it is congested), so nothing queued after a
/// loss overtakes the report of it.
pub struct Episode;

impl Episode {
    /// Whether a delivery's reservation began an episode: the front wakes
    /// whoever runs its grace.
    pub fn begins(reserved: Reserve) -> bool {
        reserved == Reserve::FirstDrop
    }

    /// Ends the episode if the subscriber is back under its mark: how many
    /// messages it lost (`Some(0)`: it ended without a loss, answers
    /// having taken the subscriber over its mark). `None`: no episode, or
    /// still over the mark.
    pub fn end(gauge: &OutboundGauge) -> Option<u64> {
        if gauge.is_congested() && gauge.pending() < gauge.high_water() {
            Some(gauge.clear_congestion())
        } else {
            None
        }
    }
}
