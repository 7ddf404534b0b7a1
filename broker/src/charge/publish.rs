//! The price of one publish from a backend service, whatever the
//! transport (HTTP §5, gRPC §8; GraphQL's `publish` later): the same
//! checks in the same order and the same units, before anything is
//! charged. The units then go to [`super::Ledger::charge`] with the API
//! key as the payer, and the message to [`crate::node::Node::publish`].

use serde_json::value::RawValue;

use crate::config::Limits;
use crate::protocol::glob::GlobSet;
use crate::protocol::{ErrorCode, channel};

/// A refusal of one message: a contract code and a sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: ErrorCode,
    pub message: String,
}

impl Refusal {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Refusal {
        Refusal {
            code,
            message: message.into(),
        }
    }
}

/// `data` must be JSON no deeper than the plan allows (HTTP checks this
/// while parsing its body; gRPC carries `data_json` as text).
pub fn check_json(data: &str, max_depth: u32) -> Result<(), Refusal> {
    if crate::protocol::json::depth_exceeds(data.as_bytes(), max_depth) {
        return Err(Refusal::new(
            ErrorCode::BadRequest,
            format!("data_json nesting is deeper than {max_depth} levels"),
        ));
    }
    serde_json::from_str::<&RawValue>(data)
        .map(|_| ())
        .map_err(|e| Refusal::new(ErrorCode::BadRequest, format!("data_json is not JSON: {e}")))
}

/// Every per-message check but the rate limit, in the order of §5, then
/// the units (`pricing::publish`, with the channel's fan-out
/// `subscribers`, which the caller reads from the bridge): the checks and
/// the price that depend on nothing but the message, the key and the plan
/// (the fuzz targets call it directly). A price above the plan's
/// `max_single` is refused here too, message by message, as a batch
/// needs; [`super::Price::publish`] carries the same limit for the
/// primitive.
///
/// `grants`: the channels the publisher may publish on (an API key's
/// `pub_channels`, a token's).
pub fn price(
    channel: &str,
    data: &str,
    grants: &GlobSet,
    limits: &Limits,
    subscribers: u64,
) -> Result<u32, Refusal> {
    channel::validate(channel).map_err(|why| Refusal::new(ErrorCode::BadRequest, why))?;
    let size = data.len();
    if size > limits.max_payload_bytes {
        return Err(Refusal::new(
            ErrorCode::PayloadTooLarge,
            format!(
                "data is {size} bytes, above the limit of {}",
                limits.max_payload_bytes
            ),
        ));
    }
    if !grants.matches(channel) {
        return Err(Refusal::new(
            ErrorCode::Forbidden,
            format!("this credential may not publish on {channel:?}"),
        ));
    }
    let c = &limits.costs;
    let cost = crate::pricing::publish(c, size, subscribers);
    crate::admission::check_single(cost, c.max_single).map_err(|over| {
        Refusal::new(
            ErrorCode::CostExceedsMax,
            format!(
                "this message {over}; \
                 send less data or publish to a channel with fewer subscribers"
            ),
        )
    })?;
    Ok(cost)
}
