//! What a refusal costs its payer, on every front (issue 42: gRPC charged
//! `costs.malformed` for every refusal, `cost_exceeds_max` included; HTTP
//! publish charged nothing for a 400 or a 403).
//!
//! The rule: a refusal of the **input** (garbage, a forbidden channel, an
//! invalid or oversized message, more subscriptions than the plan allows)
//! costs `costs.malformed`, so a client looping on bad input pays for
//! each attempt as a socket sending garbage does (§0: garbage is not
//! free). A refusal by a **limit** (`cost_exceeds_max`, a rate limit) costs
//! nothing: nothing was taken, and §0 says an operation over `max_single`
//! is refused before any charge. Refusals before a payer is known (no or
//! a bad credential) and an operator's ban charge no one.

use crate::config::Costs;
use crate::protocol::ErrorCode;

/// The units a refusal with `code` costs the payer.
pub fn refusal_units(costs: &Costs, code: ErrorCode) -> u32 {
    match code {
        ErrorCode::BadRequest
        | ErrorCode::Forbidden
        | ErrorCode::PayloadTooLarge
        | ErrorCode::TooManySubscriptions => costs.malformed,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_refusals_cost_malformed_limit_refusals_nothing() {
        let costs = Costs {
            malformed: 3,
            ..Costs::default()
        };
        for code in [
            ErrorCode::BadRequest,
            ErrorCode::Forbidden,
            ErrorCode::PayloadTooLarge,
            ErrorCode::TooManySubscriptions,
        ] {
            assert_eq!(refusal_units(&costs, code), 3, "{code:?}");
        }
        for code in [
            ErrorCode::CostExceedsMax,
            ErrorCode::RateLimited,
            ErrorCode::Unauthorized,
            ErrorCode::Banned,
        ] {
            assert_eq!(refusal_units(&costs, code), 0, "{code:?}");
        }
    }
}
