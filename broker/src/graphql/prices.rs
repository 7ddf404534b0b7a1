//! `GET /v1/prices` and `Query.prices` (§12): the caller's whole price
//! list, so a client can predict every charge: its plan, each budget, and
//! the price of every operation on every protocol.

use serde_json::{Value, json};

use super::caller::{Caller, Payer};
use super::pricing::{self, Kind, Size};
use crate::config::Costs;
use crate::node::Node;

/// The price list for `caller`, with the numbers in force now (a share of
/// each cluster-wide budget during a Redis outage, §7).
pub fn document(node: &Node, caller: &Caller) -> Value {
    let l = &caller.limits;
    let c = &l.costs;
    let share = node.limiter_store.account_share(&caller.account);
    let publish = json!({
        "base": c.publish,
        "perStartedKib": c.publish_per_kib,
        "perFull1kSubscribers": c.publish_per_1k_subscribers,
    });
    let mut budgets = json!({
        "connection": {
            "capacity": l.burst,
            "refillPerSec": l.messages_per_sec,
            "maxSingle": c.max_single,
        },
        "account": {
            "capacity": (f64::from(l.account_burst) * share) as u64,
            "refillPerSec": l.account_messages_per_sec * share,
            "sampleEvery": l.account_sample_every,
        },
        "graphql": {
            "chargedTo": match caller.payer { Payer::Key(_) => "apiKey", Payer::Account => "account" },
            "maxSingle": caller.max_single(share),
        },
    });
    if let Payer::Key(_) = caller.payer {
        budgets["apiKey"] = json!({
            "capacity": (f64::from(l.account_burst) * share) as u64,
            "refillPerSec": l.account_messages_per_sec * share,
            "maxSingle": c.max_single,
        });
    }
    // §13: `presence` per started 100 of `limit`.
    let presence = json!({"perStarted100OfLimit": c.presence, "defaultLimit": 100});
    json!({
        "account": caller.account,
        "plan": caller.plan,
        "budgets": budgets,
        "socket": {
            "subscribe": c.subscribe,
            "recovery": c.recovery,
            "unsubscribe": c.unsubscribe,
            "publish": publish,
            "budget": c.budget,
            "presence": presence,
            "presence_stats": c.presence_stats,
            "malformed": c.malformed,
            "maxSingle": c.max_single,
        },
        "http": {
            "publish": publish,
            "publishBatch": "the sum of its messages' publish prices",
            "maxSingle": c.max_single,
        },
        "grpc": {
            "Publish": publish,
            "PublishStream": "each message as Publish",
            "Subscribe": c.subscribe,
            "Presence": presence,
        },
        "presence": {
            "GET /v1/presence": presence,
        },
        "graphql": {
            "field": c.graphql_field,
            "listSize": c.graphql_list_size,
            "introspection": c.graphql_introspection,
            "maxDepth": c.graphql_max_depth,
            "maxFields": c.graphql_max_fields,
            "maxSingle": caller.max_single(share),
            "minimumPerOperation": pricing::MIN_COST,
            "refusedDocument": c.malformed,
            "free": ["Query.budget", "Query.prices", "__typename"],
            "Channel.history.data": {"perStartedKibRendered": c.recovery_per_kib},
            "Query.channels.scan": {
                "perFullChannels": crate::graphql::schema::SCAN_PER_UNIT,
                "units": c.graphql_field,
            },
            "lists": lists(c),
            "Mutation.publish": publish,
            "Mutation.publishBatch": "the sum of its messages' publish prices",
        },
    })
}

/// Every list field and how it is sized, from pricing's own table.
fn lists(c: &Costs) -> Value {
    let mut out = serde_json::Map::new();
    for (ty, field) in [
        ("Query", "channels"),
        ("Channel", "history"),
        ("Channel", "presence"),
        ("PresenceDiff", "joins"),
        ("PresenceDiff", "leaves"),
    ] {
        let sized = match pricing::field(pricing::ty(ty), field) {
            Kind::List(_, Size::Arg(arg, default)) => {
                json!({"slicingArgument": arg, "default": default})
            }
            Kind::List(_, Size::Assumed) => json!({"assumedSize": c.graphql_list_size}),
            _ => continue,
        };
        out.insert(format!("{ty}.{field}"), sized);
    }
    Value::Object(out)
}
