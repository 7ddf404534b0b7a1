//! Prices computed by hand against the rules of §12.

use super::*;

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
    assert_eq!(
        e.depth, 9,
        "its depth is held against the limit like any other"
    );
    assert_eq!(
        e.fields, 12,
        "every field of it counts toward the expanded size"
    );
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
fn budget_and_prices_weigh_nothing_but_no_operation_is_free() {
    assert_eq!(
        price("{ budget { remaining capacity refillPerSec resetIn } prices { json } }"),
        MIN_COST
    );
    assert_eq!(price("{ __typename }"), 1);
    assert_eq!(
        price("{ a: prices { json } b: prices { json } c: budget { remaining } }"),
        1
    );
    // The minimum is a floor, not an addition.
    assert_eq!(
        price(r#"{ channel(name: "a") { name } budget { remaining } }"#),
        2
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
    assert_eq!(e.operation, OperationType::Mutation);
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
        Err(Refusal::TooDeep { depth: 11, max: 10 })
    );
    // Through a fragment: the spread's depth adds to where it is spread.
    let q = format!("{{ a {{ b {{ ...F }} }} }} fragment F on Query {}", nest(9));
    assert!(price_with(&q, serde_json::json!({})).is_err());
}

#[test]
fn fragments_spread_twice_per_level_are_priced_from_one_walk_of_each() {
    // Each fragment spread twice in the next: 2^20 leaves, priced from 21
    // fragments walked once each (a plan that allows that many fields).
    let mut q = String::from("{ ...F0 } ");
    for i in 0..20 {
        q.push_str(&format!(
            "fragment F{i} on Query {{ ...F{} ...F{} }} ",
            i + 1,
            i + 1
        ));
    }
    q.push_str("fragment F20 on Query { budget { remaining } x }");
    let w = Weights {
        max_fields: u64::from(u32::MAX),
        ..weights()
    };
    let e = estimate_with(&q, serde_json::json!({}), w).unwrap();
    assert_eq!(e.cost, 1 << 20);
    assert_eq!(e.fields, 3 << 20, "budget, remaining and x at every leaf");
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
        MIN_COST
    );
    assert!(
        matches!(
            estimate(&doc, None, &v, weights(), &publish),
            Err(Refusal::NoOperation(_))
        ),
        "ambiguous: refused before it runs"
    );
    assert!(matches!(
        estimate(&doc, Some("C"), &v, weights(), &publish),
        Err(Refusal::NoOperation(_))
    ));
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
    assert_eq!(
        actual(&doc, None, &v, weights(), &ConstValue::Null),
        MIN_COST,
        "nothing returned still cost the minimum"
    );
    // Aliases and fragments find their values under their response keys.
    let q = r#"{ a: channels(prefix:"q", first: 3) { ...F } } fragment F on Channel { n: name }"#;
    let doc = parse_query(q).unwrap();
    let data = ConstValue::from_json(serde_json::json!({"a": [{"n": "x"}]})).unwrap();
    assert_eq!(actual(&doc, None, &v, weights(), &data), 2);
}
