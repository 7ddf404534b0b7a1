//! One publish from a backend service, whatever the transport (HTTP §5,
//! gRPC §8): the same checks in the same order, the same price, the same
//! API-key bucket, the same bridge. The transports only read requests and
//! say the outcome in their own words (an HTTP status, a gRPC status or a
//! stream reply).

use serde_json::value::RawValue;

use crate::cluster::KeyCharge;
use crate::config::Limits;
use crate::http::keys::KeyState;
use crate::node::Node;
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
/// the price (`pricing::publish`, with the channel's current fan-out).
pub fn check(
    node: &Node,
    channel: &str,
    data: &str,
    key: &KeyState,
    limits: &Limits,
) -> Result<u32, Refusal> {
    price(channel, data, key, limits, node.bridge.subscribers(channel))
}

/// [`check`] with the channel's fan-out given rather than read from a
/// node: the checks and the price that depend on nothing but the message,
/// the key and the plan (the fuzz targets call it directly).
pub fn price(
    channel: &str,
    data: &str,
    key: &KeyState,
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
    if !key.publish.matches(channel) {
        return Err(Refusal::new(
            ErrorCode::Forbidden,
            format!("this API key may not publish on {channel:?}"),
        ));
    }
    let c = &limits.costs;
    let cost = crate::pricing::publish(c, size, subscribers);
    if cost > c.max_single {
        return Err(Refusal::new(
            ErrorCode::CostExceedsMax,
            format!(
                "this message costs {cost} units, above the largest single charge of {}; \
                 send less data or publish to a channel with fewer subscribers",
                c.max_single
            ),
        ));
    }
    Ok(cost)
}

/// Takes `cost` from the key's bucket: its account plan's burst, refilled
/// at the account rate, cluster-wide through the bridge. One bucket per
/// key, whichever transport spends it. A cost of 0 only reads the balance.
pub async fn charge(node: &Node, key: &KeyState, limits: &Limits, cost: f64) -> KeyCharge {
    node.bridge
        .charge_key(
            &key.id,
            cost,
            f64::from(limits.account_burst),
            limits.account_messages_per_sec,
        )
        .wait()
        .await
}

/// Publishes through the bridge (local or cluster), counts it under
/// `tidegate_publishes_total{via}` and hands it to the webhooks
/// (`message.published`, §9); resolves to the message's `seq`.
pub async fn publish(node: &Node, channel: &str, data: &str, via: &'static str) -> u64 {
    let seq = node.bridge.publish(channel, data).wait().await;
    node.metrics.published(via);
    node.published(channel, seq, data);
    seq
}
