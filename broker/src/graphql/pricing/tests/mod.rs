//! The pricer's unit tests: prices computed by hand against the rules of
//! §12 (`prices.rs`), and the document limits measured in the same walk
//! (`limits.rs`).

use async_graphql::parser::parse_query;
use async_graphql_value::{ConstValue, Variables};

use super::*;

mod limits;
mod prices;

fn weights() -> Weights {
    Weights::new(&Costs::default())
}

/// One unit per publish, five on the channel `big` (a stand-in for size
/// and fan-out, which `pricing::publish` prices).
fn publish(channel: &str, _len: usize) -> u64 {
    if channel == "big" { 5 } else { 1 }
}

fn estimate_with(q: &str, vars: serde_json::Value, w: Weights) -> Result<Estimate, Refusal> {
    let doc = parse_query(q).expect("the test document parses");
    estimate(&doc, None, &Variables::from_json(vars), w, &publish)
}

fn price_with(q: &str, vars: serde_json::Value) -> Result<Estimate, Refusal> {
    estimate_with(q, vars, weights())
}

fn price(q: &str) -> u64 {
    price_with(q, serde_json::json!({})).unwrap().cost
}
