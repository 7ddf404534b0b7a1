//! Prices computed by hand against the rules of §12.

use async_graphql::parser::parse_query;
use async_graphql_value::{ConstValue, Variables};

use super::*;

fn weights() -> Weights {
    Weights::new(&Costs::default())
}

/// One unit per publish, five on the channel `big` (a stand-in for size
/// and fan-out, which `pricing::publish` prices).
fn publish(channel: &str, _: &ConstValue) -> u64 {
    if channel == "big" { 5 } else { 1 }
}

fn price_with(q: &str, vars: serde_json::Value) -> Result<Estimate, TooDeep> {
    let doc = parse_query(q).expect("the test document parses");
    estimate(&doc, None, &Variables::from_json(vars), weights(), &publish)
}

fn price(q: &str) -> u64 {
    price_with(q, serde_json::json!({})).unwrap().cost
}

#[test]
fn the_contracts_worked_example_costs_71() {
    let q = r#"{ channels(prefix:"q", first: 10) { name history(last: 5) { seq } } }"#;
    // 1 (channels) + 10 (name) + 10 (history) + 10×5 (seq)
    assert_eq!(price(q), 71);
}

#[test]
fn lists_default_as_the_schema_says() {
    // channels first = 50, history last = 50: 1 + 50×(1 + 50×2)
    let q = r#"{ channels(prefix:"q") { history { seq data } } }"#;
    assert_eq!(price(q), 1 + 50 * (1 + 50 * 2));
    // presence first = 100; presenceStats is an object: 1 + 1 + 2
    let q = r#"{ channel(name:"a") { presence { user } presenceStats { users connections } } }"#;
    assert_eq!(price(q), 1 + (1 + 100) + (1 + 2));
    // An explicit null is the default too.
    let q = r#"{ channels(prefix:"q", first: null) { name } }"#;
    assert_eq!(price(q), 1 + 50);
}

#[test]
fn nested_lists_multiply_what_is_under_them() {
    let q =
        r#"{ channels(prefix:"", first: 3) { name seq history(last: 4) { channel seq data } } }"#;
    // 1 + 3×(1 + 1 + 1 + 4×3)
    assert_eq!(price(q), 1 + 3 * (3 + 4 * 3));
    assert_eq!(price(r#"{ channels(prefix:"", first: 0) { name } }"#), 1);
    assert_eq!(
        price(r#"{ channels(prefix:"", first: -5) { name } }"#),
        1,
        "a negative size prices as 0 (the resolver refuses it)"
    );
}

#[test]
fn aliases_are_priced_separately() {
    let q = r#"{ a: channel(name:"x") { name } b: channel(name:"y") { name seq } }"#;
    assert_eq!(price(q), 2 + 3);
    let q = r#"{ channel(name:"x") { one: name two: name } }"#;
    assert_eq!(price(q), 3);
}

#[test]
fn fragments_are_priced_where_they_are_spread() {
    let q = r#"
        { channels(prefix:"q", first: 10) { ...F } x: channels(prefix:"r", first: 2) { ...F } }
        fragment F on Channel { name seq }"#;
    // (1 + 10×2) + (1 + 2×2)
    assert_eq!(price(q), 26);
    let q = r#"{ channel(name:"a") { ...F ...F } } fragment F on Channel { name history(last: 2) { seq } }"#;
    // 1 + 2×(1 + 1 + 2×1)
    assert_eq!(price(q), 1 + 2 * 4);
    let q = r#"{ channel(name:"a") { ... on Channel { name } ... { seq } } }"#;
    assert_eq!(price(q), 3);
}

#[test]
fn variables_size_lists_and_their_defaults_apply() {
    let q = r#"query($n: Int, $m: Int = 3) {
        channels(prefix:"q", first: $n) { history(last: $m) { seq } } }"#;
    let p = |v| price_with(q, v).unwrap().cost;
    // 1 + 4×(1 + 3×1)
    assert_eq!(p(serde_json::json!({"n": 4})), 17);
    assert_eq!(p(serde_json::json!({"n": 4, "m": 10})), 1 + 4 * 11);
    // $n missing: the schema's default (50).
    assert_eq!(p(serde_json::json!({})), 1 + 50 * 4);
}

#[test]
fn skip_and_include_are_honoured() {
    let q = r#"query($yes: Boolean!) { channel(name:"a") {
        name @skip(if: true) seq @include(if: $yes) subscribers @include(if: false) } }"#;
    assert_eq!(
        price_with(q, serde_json::json!({"yes": true}))
            .unwrap()
            .cost,
        2
    );
    assert_eq!(
        price_with(q, serde_json::json!({"yes": false}))
            .unwrap()
            .cost,
        1
    );
}

#[test]
fn introspection_costs_its_weight_once_for_its_subtree() {
    let q = r#"{ __schema { types { name fields { name args { name type { ofType { ofType { ofType { name } } } } } } } } }"#;
    let e = price_with(q, serde_json::json!({})).unwrap();
    assert_eq!(e.cost, 100);
    assert!(e.depth <= 1, "its depth is not held against the limit");
    assert_eq!(
        price(r#"{ __type(name: "Channel") { name } channel(name:"a") { name } }"#),
        102
    );
    assert_eq!(
        price(r#"{ __typename channel(name:"a") { __typename } }"#),
        1
    );
}

#[test]
fn budget_and_prices_are_free() {
    assert_eq!(
        price("{ budget { remaining capacity refillPerSec resetIn } prices { json } }"),
        0
    );
}

#[test]
fn publish_costs_what_a_publish_costs_and_a_batch_the_sum() {
    assert_eq!(
        price(r#"mutation { publish(channel: "a", data: {x: 1}) { channel seq } }"#),
        1
    );
    assert_eq!(
        price(r#"mutation { publish(channel: "big", data: 1) { seq } }"#),
        5
    );
    let q = r#"mutation { publishBatch(messages: [{channel: "a", data: 1}, {channel: "big", data: {}}, {channel: "b", data: []}]) { seq } }"#;
    assert_eq!(price(q), 1 + 5 + 1);
    let q = r#"mutation($m: [PublishInput!]!, $c: String!) {
        one: publish(channel: $c, data: 2) { seq } publishBatch(messages: $m) { seq } }"#;
    let vars = serde_json::json!({"c": "big", "m": [{"channel": "big", "data": 1}, {"channel": "x", "data": 2}]});
    assert_eq!(price_with(q, vars).unwrap().cost, 5 + 5 + 1);
    let e = price_with(q, serde_json::json!({"c": "a", "m": []})).unwrap();
    assert_eq!(e.operation, Some(OperationType::Mutation));
    assert!(
        !e.sized_lists,
        "a batch's size is exact: no refund to compute"
    );
}

#[test]
fn subscriptions_are_priced_like_queries() {
    let q = r#"subscription { messages(channel: "a", since: 5) { channel seq data } }"#;
    assert_eq!(price(q), 4);
    let q = r#"subscription { presence(channel: "a") { channel joins { user } leaves { user info } } }"#;
    // 1 + 1 + (1 + 50×1) + (1 + 50×2)
    assert_eq!(price(q), 2 + 51 + 101);
}

#[test]
fn depth_past_the_limit_is_refused() {
    assert_eq!(
        price_with("{ a { b } }", serde_json::json!({}))
            .unwrap()
            .depth,
        2
    );
    let nest = |n: usize| format!("{}x{}", "{ a ".repeat(n), " }".repeat(n));
    let ten = price_with(&nest(10), serde_json::json!({})).unwrap();
    assert_eq!(ten.depth, 10);
    assert_eq!(
        price_with(&nest(11), serde_json::json!({})),
        Err(TooDeep { depth: 11, max: 10 })
    );
    // Through a fragment: the spread's depth adds to where it is spread.
    let q = format!("{{ a {{ b {{ ...F }} }} }} fragment F on Query {}", nest(9));
    assert!(price_with(&q, serde_json::json!({})).is_err());
}

#[test]
fn fragment_cycles_and_blowups_price_in_linear_time() {
    // A cycle (refused by validation later) does not loop.
    let q = "{ ...A } fragment A on Query { ...B } fragment B on Query { ...A name }";
    assert_eq!(price(q), 1);
    // Each fragment spread twice in the next: 2^20 leaves, priced from 21
    // fragments once each.
    let mut q = String::from("{ ...F0 } ");
    for i in 0..20 {
        q.push_str(&format!(
            "fragment F{i} on Query {{ ...F{} ...F{} }} ",
            i + 1,
            i + 1
        ));
    }
    q.push_str("fragment F20 on Query { budget { remaining } x }");
    assert_eq!(price(&q), 1 << 20);
    // A chain of fragments past the nesting bound is too deep, not a
    // stack overflow.
    let mut q = String::from("{ ...F0 } ");
    for i in 0..100 {
        q.push_str(&format!("fragment F{i} on Query {{ ...F{} }} ", i + 1));
    }
    q.push_str("fragment F100 on Query { x }");
    assert!(price_with(&q, serde_json::json!({})).is_err());
}

#[test]
fn operations_are_chosen_by_name() {
    let doc =
        parse_query(r#"query A { budget { remaining } } query B { channel(name:"a") { name } }"#)
            .unwrap();
    let v = Variables::default();
    assert_eq!(
        estimate(&doc, Some("B"), &v, weights(), &publish)
            .unwrap()
            .cost,
        2
    );
    assert_eq!(
        estimate(&doc, Some("A"), &v, weights(), &publish)
            .unwrap()
            .cost,
        0
    );
    let none = estimate(&doc, None, &v, weights(), &publish).unwrap();
    assert_eq!(
        (none.cost, none.operation),
        (0, None),
        "ambiguous: execution says so"
    );
}

#[test]
fn the_plans_weights_apply() {
    let costs = Costs {
        graphql_field: 2,
        graphql_list_size: 7,
        graphql_introspection: 9,
        ..Costs::default()
    };
    let w = Weights::new(&costs);
    let doc = parse_query(r#"{ channel(name:"a") { history(last: 3) { seq } } __schema { types { name } } subscription_free: budget { remaining } }"#).unwrap();
    let e = estimate(&doc, None, &Variables::default(), w, &publish).unwrap();
    // 2 + (2 + 3×2) + 9 + 0
    assert_eq!(e.cost, 2 + 8 + 9);
    let doc = parse_query(r#"subscription { presence(channel: "a") { joins { user } } }"#).unwrap();
    let e = estimate(&doc, None, &Variables::default(), w, &publish).unwrap();
    assert_eq!(e.cost, 2 + 2 + 7 * 2);
}

#[test]
fn the_actual_cost_sizes_lists_by_what_they_returned() {
    let q = r#"{ channels(prefix:"q", first: 10) { name history(last: 5) { seq } } budget { remaining } }"#;
    let doc = parse_query(q).unwrap();
    let v = Variables::default();
    let e = estimate(&doc, None, &v, weights(), &publish).unwrap();
    assert_eq!(e.cost, 71);
    assert!(e.sized_lists);
    let data = ConstValue::from_json(serde_json::json!({
        "channels": [
            {"name": "q:1", "history": [{"seq": 1}, {"seq": 2}]},
            {"name": "q:2", "history": []}
        ],
        "budget": {"remaining": 5}
    }))
    .unwrap();
    // 1 + 2 names + 2 histories + 2 seqs
    assert_eq!(actual(&doc, None, &v, weights(), &data), 7);
    assert_eq!(actual(&doc, None, &v, weights(), &ConstValue::Null), 0);
    // Aliases and fragments find their values under their response keys.
    let q = r#"{ a: channels(prefix:"q", first: 3) { ...F } } fragment F on Channel { n: name }"#;
    let doc = parse_query(q).unwrap();
    let data = ConstValue::from_json(serde_json::json!({"a": [{"n": "x"}]})).unwrap();
    assert_eq!(actual(&doc, None, &v, weights(), &data), 2);
}
