//! The price of one subscription, whatever the front (a socket's
//! `subscribe` frame, each channel of an SSE stream or of a gRPC
//! `Subscribe` call, a graphql-ws subscription): [`crate::pricing::subscribe`]
//! of the plan's cost table, checked against `max_single` once here, so
//! the same subscription is priced and refused the same way everywhere
//! (issue 42). The units then go to [`super::Ledger::charge`] with the
//! front's payer.

use super::publish::Refusal;
use crate::config::{LimitName, Limits};
use crate::exceeded::Exceeded;
use crate::metrics::{Layer, Metrics};
use crate::protocol::ErrorCode;

/// Units for subscribing to `channel` (`since`: from a position), or
/// `cost_exceeds_max` when one channel costs more than the largest single
/// charge (no wait can help; nothing is charged for it).
pub fn price(limits: &Limits, channel: &str, since: bool) -> Result<u32, Refusal> {
    let c = &limits.costs;
    let price = crate::pricing::subscribe(c, since);
    crate::admission::check_single(price, c.max_single).map_err(|over| {
        Refusal::new(
            ErrorCode::CostExceedsMax,
            format!("subscribing to {channel:?} {over}"),
        )
    })?;
    Ok(price)
}

/// [`price`] for a front that counts its refusal itself (one `exceeded`
/// event under `layer`), and lets it through, counted as a dry run, when
/// the plan has `cost` in `dry_run` (as a socket's frame is).
pub fn price_counted(
    limits: &Limits,
    channel: &str,
    since: bool,
    (layer, account, metrics): (Layer, &str, &Metrics),
) -> Result<u32, Refusal> {
    price(limits, channel, since).or_else(|r| {
        let dry = limits.is_dry_run(LimitName::Cost);
        Exceeded::new(layer, r.code.as_str(), account)
            .channel(channel)
            .dry_run(dry)
            .emit(metrics);
        if dry {
            Ok(crate::pricing::subscribe(&limits.costs, since))
        } else {
            Err(r)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscribe_plus_recovery_within_max_single() {
        let mut l = Limits::default();
        l.costs.subscribe = 5;
        l.costs.recovery = 2;
        l.costs.max_single = 6;
        assert_eq!(price(&l, "doc:1", false), Ok(5));
        let over = price(&l, "doc:1", true).unwrap_err();
        assert_eq!(over.code, ErrorCode::CostExceedsMax);
        assert!(over.message.contains("costs 7 units"), "{}", over.message);
    }
}
