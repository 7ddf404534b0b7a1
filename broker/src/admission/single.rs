//! The largest single charge (§0's `costs.max_single`): the one place a
//! price is compared with it. An operation priced above it is refused
//! with `cost_exceeds_max` before any bucket is touched, and no wait can
//! help, so the refusal is free (see [`super::refusal`]).
//!
//! Every priced operation of the cost table is held to it, whatever the
//! front: a socket frame, a backend's publish (HTTP, each message of a
//! batch, gRPC, Pusher's HTTP API), a client publish, a subscription
//! (each channel), and each `publish` of a GraphQL mutation (each message
//! of `publishBatch`), which costs what an HTTP publish of it costs. A
//! GraphQL document as a whole is a sum of field weights held to its own
//! `graphql_max_single` (§12), not to this limit.

/// A price above the largest single charge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("costs {cost} units, above the largest single charge of {max}")]
pub struct CostExceedsMax {
    pub cost: u32,
    pub max: u32,
}

/// `Ok` when `cost` fits under `max_single` (the plan's
/// `costs.max_single`). Inlined into the socket's per-frame path.
#[inline]
pub fn check_single(cost: u32, max_single: u32) -> Result<(), CostExceedsMax> {
    if cost > max_single {
        Err(CostExceedsMax {
            cost,
            max: max_single,
        })
    } else {
        Ok(())
    }
}

/// [`check_single`] of a price counted in `u64` (a GraphQL publish's).
#[inline]
pub fn check_single_wide(cost: u64, max_single: u32) -> Result<(), CostExceedsMax> {
    check_single(u32::try_from(cost).unwrap_or(u32::MAX), max_single)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_itself_is_admitted_one_more_is_not() {
        assert_eq!(check_single(20, 20), Ok(()));
        assert_eq!(
            check_single(21, 20),
            Err(CostExceedsMax { cost: 21, max: 20 })
        );
        assert_eq!(check_single(0, 0), Ok(()));
        assert_eq!(
            check_single_wide(u64::MAX, 20),
            Err(CostExceedsMax {
                cost: u32::MAX,
                max: 20
            })
        );
    }
}
