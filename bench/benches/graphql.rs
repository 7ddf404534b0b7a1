//! GraphQL pricing (§12, seed 004: "pricing must be cheaper than the work
//! it protects"): the broker's own `graphql::pricing::estimate` on a
//! 200-field document already parsed (what the server does after parsing),
//! the same document through a fragment spread 40 times, a 30-level
//! fragment chain refused as too complex (2^30 fields once expanded,
//! measured from one walk of each fragment), and, for scale, parsing it
//! (the parse is async-graphql's, paid before pricing anyway).

use std::hint::black_box;

use async_graphql_value::Variables;
use criterion::{Criterion, criterion_group, criterion_main};
use tidegate::config::Costs;
use tidegate::graphql::pricing::{Weights, estimate};

/// 40 aliased channels × 5 fields = 200 selected fields, with nested
/// lists sized by arguments and by a variable.
fn two_hundred_fields() -> String {
    let mut q = String::from("query($n: Int = 5) {");
    for i in 0..40 {
        q.push_str(&format!(
            " c{i}: channel(name: \"doc:{i}\") {{ name seq subscribers history(last: $n) {{ seq }} }}"
        ));
    }
    q.push_str(" }");
    q
}

fn with_fragment() -> String {
    let mut q = String::from("{");
    for i in 0..40 {
        q.push_str(&format!(" c{i}: channel(name: \"doc:{i}\") {{ ...F }}"));
    }
    q.push_str(" } fragment F on Channel { name seq history(last: 5) { seq data } }");
    q
}

/// Each fragment spreads the next twice, `levels` deep.
fn fragment_chain(levels: usize) -> String {
    let mut q = String::from("{ ...F0 } ");
    for i in 0..levels {
        q.push_str(&format!(
            "fragment F{i} on Query {{ ...F{} ...F{} }} ",
            i + 1,
            i + 1
        ));
    }
    q.push_str(&format!("fragment F{levels} on Query {{ __typename }}"));
    q
}

fn publish(_: &str, _: usize) -> u64 {
    1
}

fn pricing(c: &mut Criterion) {
    let w = Weights::new(&Costs::default());
    let vars = Variables::default();
    let mut g = c.benchmark_group("graphql_pricing");
    let text = two_hundred_fields();
    let doc = async_graphql::parser::parse_query(&text).unwrap();
    assert_eq!(
        estimate(&doc, None, &vars, w, &publish).unwrap().cost,
        40 * (1 + 3 + 1 + 5)
    );
    g.bench_function("estimate_200_fields", |b| {
        b.iter(|| black_box(estimate(black_box(&doc), None, &vars, w, &publish)))
    });
    let frag = async_graphql::parser::parse_query(with_fragment()).unwrap();
    g.bench_function("estimate_fragment_spread_40_times", |b| {
        b.iter(|| black_box(estimate(black_box(&frag), None, &vars, w, &publish)))
    });
    let chain = async_graphql::parser::parse_query(fragment_chain(30)).unwrap();
    assert!(estimate(&chain, None, &vars, w, &publish).is_err());
    g.bench_function("refuse_fragment_chain_30_levels", |b| {
        b.iter(|| black_box(estimate(black_box(&chain), None, &vars, w, &publish)))
    });
    g.bench_function("parse_200_fields", |b| {
        b.iter(|| black_box(async_graphql::parser::parse_query(black_box(&text)).unwrap()))
    });
    // The `publish` mutation a backend sends: parse it, or clone it from
    // a parsed copy.
    let m = "mutation($c: String!, $d: JSON!) { publish(channel: $c, data: $d) { seq } }";
    g.bench_function("parse_publish_mutation", |b| {
        b.iter(|| black_box(async_graphql::parser::parse_query(black_box(m)).unwrap()))
    });
    let parsed = async_graphql::parser::parse_query(m).unwrap();
    g.bench_function("clone_publish_mutation", |b| {
        b.iter(|| black_box(parsed.clone()))
    });
    g.finish();
}

criterion_group!(benches, pricing);
criterion_main!(benches);
