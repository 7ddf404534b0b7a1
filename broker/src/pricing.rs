//! The cost function (seed 004): what an operation costs, computed before
//! any work is done, from numbers the node already holds. A publish is
//! priced by what it makes the broker do: a base price, its size, and its
//! fan-out (the channel's current subscribers, which the hub and the
//! cluster bridge keep counted, so pricing never waits on Redis).
//! docs/limits.md says how to fit the prices to measured cost.

use crate::config::Costs;

/// Units for publishing `data_len` bytes of `data` to a channel with
/// `subscribers` current subscribers: `publish`, plus `publish_per_kib` per
/// started KiB, plus `publish_per_1k_subscribers` per full 1,000
/// subscribers. Saturates instead of overflowing (then `max_single`
/// refuses it).
#[inline]
pub fn publish(costs: &Costs, data_len: usize, subscribers: u64) -> u32 {
    let kib = u32::try_from(data_len.div_ceil(1024)).unwrap_or(u32::MAX);
    let thousands = u32::try_from(subscribers / 1000).unwrap_or(u32::MAX);
    costs
        .publish
        .saturating_add(costs.publish_per_kib.saturating_mul(kib))
        .saturating_add(costs.publish_per_1k_subscribers.saturating_mul(thousands))
}

/// Units for subscribing to one channel, whatever the front (a socket's
/// `subscribe` frame, a channel of an SSE stream or of a gRPC `Subscribe`
/// call, a graphql-ws subscription): `subscribe`, plus `recovery` when it
/// continues from a position (`since`). Saturates (then `max_single`
/// refuses it).
#[inline]
pub fn subscribe(costs: &Costs, since: bool) -> u32 {
    costs
        .subscribe
        .saturating_add(if since { costs.recovery } else { 0 })
}

/// Units for `bytes` of history delivered to a client (a socket's or a
/// subscription's recovery, a GraphQL `history` read's `data`):
/// `recovery_per_kib` per started KiB. The one price of history bytes,
/// whichever front reads them. Saturates.
#[inline]
pub fn recovery(costs: &Costs, bytes: usize) -> u32 {
    let kib = u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX);
    kib.saturating_mul(costs.recovery_per_kib)
}

/// The price of a presence read of at most `limit` members (§13):
/// `presence` per started 100 of `limit`.
#[inline]
pub fn presence(costs: &Costs, limit: u32) -> u32 {
    costs.presence.saturating_mul(limit.div_ceil(100).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn costs(per_kib: u32, per_1k: u32) -> Costs {
        Costs {
            publish: 1,
            publish_per_kib: per_kib,
            publish_per_1k_subscribers: per_1k,
            ..Costs::default()
        }
    }

    #[test]
    fn flat_by_default() {
        let c = Costs::default();
        assert_eq!(publish(&c, 60_000, 50_000), 1);
    }

    #[test]
    fn fan_out_is_priced_per_full_thousand() {
        let c = costs(0, 2);
        assert_eq!(publish(&c, 10, 2), 1);
        assert_eq!(publish(&c, 10, 999), 1);
        assert_eq!(publish(&c, 10, 1_000), 3);
        assert_eq!(publish(&c, 10, 50_000), 101);
    }

    #[test]
    fn size_is_priced_per_started_kib() {
        let c = costs(3, 0);
        assert_eq!(publish(&c, 0, 0), 1);
        assert_eq!(publish(&c, 1, 0), 4);
        assert_eq!(publish(&c, 1024, 0), 4);
        assert_eq!(publish(&c, 1025, 0), 7);
    }

    #[test]
    fn saturates() {
        let c = costs(u32::MAX, u32::MAX);
        assert_eq!(publish(&c, 1 << 20, u64::MAX), u32::MAX);
    }

    #[test]
    fn history_bytes_cost_per_started_kib() {
        let c = Costs {
            recovery_per_kib: 2,
            ..Costs::default()
        };
        assert_eq!(recovery(&c, 0), 0);
        assert_eq!(recovery(&c, 1), 2);
        assert_eq!(recovery(&c, 1024), 2);
        assert_eq!(recovery(&c, 1025), 4);
        assert_eq!(recovery(&c, usize::MAX), u32::MAX);
    }

    #[test]
    fn presence_reads_cost_per_started_hundred() {
        let c = Costs::default();
        assert_eq!(presence(&c, 1), 1);
        assert_eq!(presence(&c, 100), 1);
        assert_eq!(presence(&c, 101), 2);
        assert_eq!(presence(&c, 1000), 10);
    }
}
