//! The operation as the executor runs it (defaults, `@skip`/`@include`,
//! list coercion), and the document limits measured in the pricing walk:
//! depth (introspection included), expanded size, fragment cycles, and
//! what a subscription may render per message.

use super::*;

fn too_complex(r: Result<Estimate, Refusal>) -> bool {
    matches!(r, Err(Refusal::TooComplex { max: 500, .. }))
}

#[test]
fn variable_defaults_decide_skip_and_include_as_the_executor_will() {
    let q = r#"query($s: Boolean = true, $i: Boolean = false) { channel(name: "a") {
        name @skip(if: $s) seq @include(if: $i) subscribers } }"#;
    // Nothing sent: both defaults apply, name and seq are left out.
    // 1 (channel) + 1 (subscribers)
    assert_eq!(price_with(q, serde_json::json!({})).unwrap().cost, 2);
    // Sent values win over the defaults: 1 + 3.
    let sent = serde_json::json!({"s": false, "i": true});
    assert_eq!(price_with(q, sent.clone()).unwrap().cost, 4);
    // The executor is given the same values (coerce fills the defaults in).
    let doc = parse_query(q).unwrap();
    let op = &operation(&doc, None).unwrap().node;
    let given = coerce(op, Variables::from_json(serde_json::json!({})));
    assert_eq!(
        given.into_value().into_json().unwrap(),
        serde_json::json!({"s": true, "i": false})
    );
    let given = coerce(op, Variables::from_json(sent.clone()));
    assert_eq!(given.into_value().into_json().unwrap(), sent);
}

#[test]
fn a_condition_that_is_not_the_boolean_true_is_false() {
    // async-graphql reads a condition that does not parse as a boolean as
    // false: @include leaves the field out, @skip keeps it.
    let q =
        r#"query($x: Boolean) { channel(name: "a") { name @include(if: $x) seq @skip(if: $x) } }"#;
    for x in [
        serde_json::json!("yes"),
        serde_json::json!(1),
        serde_json::Value::Null,
    ] {
        let vars = serde_json::json!({ "x": x });
        // 1 (channel) + 1 (seq)
        assert_eq!(price_with(q, vars).unwrap().cost, 2, "{x}");
    }
    assert_eq!(
        price_with(q, serde_json::json!({})).unwrap().cost,
        2,
        "not sent"
    );
}

#[test]
fn one_message_given_without_a_list_is_a_batch_of_one() {
    let q = r#"mutation { publishBatch(messages: {channel: "big", data: 1}) { seq } }"#;
    assert_eq!(price(q), 5);
    let q = r#"mutation($m: [PublishInput!]!) { publishBatch(messages: $m) { seq } }"#;
    let one = serde_json::json!({"m": {"channel": "big", "data": {"x": 1}}});
    assert_eq!(price_with(q, one).unwrap().cost, 5);
    let two =
        serde_json::json!({"m": [{"channel": "big", "data": 1}, {"channel": "a", "data": 2}]});
    assert_eq!(price_with(q, two).unwrap().cost, 6);
    // Aliases of an object batch are each priced: 3 × 5.
    let q = r#"mutation { a: publishBatch(messages: {channel: "big", data: 1}) { seq }
        b: publishBatch(messages: {channel: "big", data: 1}) { seq }
        c: publishBatch(messages: {channel: "big", data: 1}) { seq } }"#;
    assert_eq!(price(q), 15);
}

#[test]
fn the_expanded_size_counts_every_field_where_it_is_spread() {
    // channel + 2 × (name, history, seq)
    let q = r#"{ channel(name: "a") { ...F ...F } } fragment F on Channel { name history(last: 2) { seq } }"#;
    assert_eq!(price_with(q, serde_json::json!({})).unwrap().fields, 7);
    // Skipped selections count (validation walks them), but cost nothing.
    let q = r#"{ a: prices @skip(if: true) { json } channel(name: "a") @skip(if: true) { name } }"#;
    let e = price_with(q, serde_json::json!({})).unwrap();
    assert_eq!((e.cost, e.fields), (MIN_COST, 4));
    // 250 aliases of prices { json } are 500 fields: the limit, admitted at
    // the minimum; one more is too complex.
    let aliases = |n: usize| {
        let mut q = String::from("{");
        for i in 0..n {
            q.push_str(&format!(" p{i}: prices {{ json }}"));
        }
        q.push('}');
        q
    };
    let e = price_with(&aliases(250), serde_json::json!({})).unwrap();
    assert_eq!((e.cost, e.fields), (1, 500));
    assert!(too_complex(price_with(
        &aliases(251),
        serde_json::json!({})
    )));
    let e = price_with(&aliases(3200), serde_json::json!({}));
    assert!(too_complex(e.clone()), "{e:?}");
}

#[test]
fn fragments_that_double_per_level_are_too_complex_past_a_few_levels() {
    // F0 spreads F1 twice, ... F{n-1} spreads Fn twice, Fn is one field:
    // 2^n fields.
    let chain = |n: usize| {
        let mut q = String::from("{ ...F0 } ");
        for i in 0..n {
            q.push_str(&format!(
                "fragment F{i} on Query {{ ...F{} ...F{} }} ",
                i + 1,
                i + 1
            ));
        }
        q.push_str(&format!("fragment F{n} on Query {{ __typename }}"));
        q
    };
    let e = price_with(&chain(8), serde_json::json!({})).unwrap();
    assert_eq!((e.cost, e.fields), (1, 256));
    for n in [9, 30, 60] {
        assert!(
            too_complex(price_with(&chain(n), serde_json::json!({}))),
            "{n}"
        );
    }
    // Also below a skipped spread: validation would walk it all the same.
    let q = chain(30).replacen("{ ...F0 }", "{ ...F0 @skip(if: true) }", 1);
    assert!(too_complex(price_with(&q, serde_json::json!({}))));
}

#[test]
fn fragments_that_spread_themselves_are_refused() {
    let q = "{ ...A } fragment A on Query { ...B } fragment B on Query { ...A __typename }";
    assert_eq!(
        price_with(q, serde_json::json!({})),
        Err(Refusal::Cycle("A".into()))
    );
    let q = "{ ...A } fragment A on Query { ... on Query { ...A } }";
    assert!(matches!(
        price_with(q, serde_json::json!({})),
        Err(Refusal::Cycle(_))
    ));
}

#[test]
fn introspection_is_held_to_the_depth_limit() {
    let of_type = |n: usize| {
        format!(
            r#"{{ __type(name: "Channel") {{ {} name {} }} }}"#,
            "ofType { ".repeat(n),
            "}".repeat(n)
        )
    };
    // __type + 9 × ofType + name: depth 11.
    assert_eq!(
        price_with(&of_type(9), serde_json::json!({})),
        Err(Refusal::TooDeep { depth: 11, max: 10 })
    );
    let e = price_with(&of_type(8), serde_json::json!({})).unwrap();
    assert_eq!((e.cost, e.depth, e.fields), (100, 10, 10));
    // A skipped deep selection is still too deep: depth is the document's.
    let q = format!(
        "{{ x: prices @skip(if: true) {} }}",
        "{ a ".repeat(10) + &"}".repeat(10)
    );
    assert!(matches!(
        price_with(&q, serde_json::json!({})),
        Err(Refusal::TooDeep { .. })
    ));
}

#[test]
fn a_subscription_renders_each_field_once_per_message() {
    let refused = |q: &str, vars: serde_json::Value| {
        matches!(price_with(q, vars), Err(Refusal::Subscription(_)))
    };
    let none = serde_json::json!({});
    // Aliases of data: refused, directly or through fragments.
    assert!(refused(
        r#"subscription { messages(channel: "a") { a: data b: data } }"#,
        none.clone()
    ));
    assert!(refused(
        r#"subscription { messages(channel: "a") { ...F ...G } }
           fragment F on Message { x: data } fragment G on Message { y: data }"#,
        none.clone()
    ));
    // The same field under one key is merged, and rendered once.
    let q = r#"subscription { messages(channel: "a") { data data seq ...F } }
               fragment F on Message { data }"#;
    // messages + data × 3 + seq, each occurrence priced.
    assert_eq!(price_with(q, none.clone()).unwrap().cost, 5);
    // One root field.
    assert!(refused(
        r#"subscription { a: messages(channel: "a") { seq } b: messages(channel: "a") { seq } }"#,
        none.clone()
    ));
    assert!(refused(
        r#"subscription { messages(channel: "a") @skip(if: true) { seq } }"#,
        none.clone()
    ));
    // Decided on the variables as they run.
    let q = r#"subscription($two: Boolean = false) { messages(channel: "a") {
        data again: data @include(if: $two) } }"#;
    assert!(price_with(q, none.clone()).is_ok());
    assert!(refused(q, serde_json::json!({"two": true})));
    // Presence diffs: each list and each member field once.
    assert!(refused(
        r#"subscription { presence(channel: "a") { joins { user } j: joins { user } } }"#,
        none.clone()
    ));
    assert!(refused(
        r#"subscription { presence(channel: "a") { joins { user u: user } } }"#,
        none.clone()
    ));
    let q = r#"subscription { presence(channel: "a") { joins { user info } leaves { user } } }"#;
    // 1 + 1 + 50×2 + 1 + 50×1
    assert_eq!(price_with(q, none).unwrap().cost, 1 + 1 + 100 + 1 + 50);
}

#[test]
fn a_publish_is_priced_by_the_compact_json_it_publishes() {
    // A price of one unit per byte shows the length the pricer measured.
    let by_len = |_: &str, len: usize| len as u64;
    let q = r#"mutation($d: JSON!, $m: [PublishInput!]!) {
        a: publish(channel: "c", data: {x: [1, "two", null], y: $d, z: ENUM}) { seq }
        b: publish(channel: "c", data: $d) { seq }
        c: publishBatch(messages: $m) { seq }
        d: publishBatch(messages: [{channel: "c", data: $d}, {channel: "c", data: 7}]) { seq }
        e: publishBatch(messages: $m) { seq } }"#;
    let d = serde_json::json!({"k": "vé\"l", "n": 1.5});
    let m = serde_json::json!([{"channel": "c", "data": [true]}, {"channel": "c", "data": "s"}]);
    let vars = Variables::from_json(serde_json::json!({"d": d, "m": m}));
    let doc = parse_query(q).unwrap();
    let e = estimate(&doc, None, &vars, weights(), &by_len).unwrap();
    let len = |v: serde_json::Value| serde_json::to_string(&v).unwrap().len() as u64;
    let a = len(serde_json::json!({"x": [1, "two", null], "y": d, "z": "ENUM"}));
    let batch = len(serde_json::json!([true])) + len(serde_json::json!("s"));
    assert_eq!(e.cost, a + len(d.clone()) + batch + (len(d) + 1) + batch);
}
