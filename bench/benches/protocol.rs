//! Frame decode (client → server) and message encode (server → client).

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use tidegate::protocol::frames;
use tidegate::protocol::wire;

/// A JSON value of exactly `size` bytes (a string).
fn data(size: usize) -> String {
    format!("\"{}\"", "x".repeat(size.saturating_sub(2)))
}

fn publish_frame(size: usize) -> String {
    format!(
        r#"{{"type":"publish","channel":"doc:42","id":17,"data":{}}}"#,
        data(size)
    )
}

fn decode(c: &mut Criterion) {
    let mut g = c.benchmark_group("decode");
    for size in [64usize, 1024] {
        let text = publish_frame(size);
        g.throughput(Throughput::Bytes(text.len() as u64));
        g.bench_with_input(BenchmarkId::new("publish", size), &text, |b, t| {
            b.iter(|| black_box(frames::parse(black_box(t), 32).is_ok()))
        });
    }
    // An object payload: `data` is skipped over as raw JSON, not decoded.
    let object = r#"{"type":"publish","channel":"doc:42","id":17,"data":{"op":"insert","pos":1187,"text":"hello","attrs":{"bold":true}}}"#;
    g.throughput(Throughput::Bytes(object.len() as u64));
    g.bench_function("publish_object", |b| {
        b.iter(|| black_box(frames::parse(black_box(object), 32).is_ok()))
    });
    let sub = r#"{"type":"subscribe","channel":"doc:42","since":1187,"id":3}"#;
    g.throughput(Throughput::Bytes(sub.len() as u64));
    g.bench_function("subscribe", |b| {
        b.iter(|| black_box(frames::parse(black_box(sub), 32).is_ok()))
    });
    let bad = r#"{"type":"publish","channel":"doc:42","data":{"#;
    g.bench_function("malformed", |b| {
        b.iter(|| black_box(frames::parse(black_box(bad), 32).is_err()))
    });
    g.finish();
}

fn encode(c: &mut Criterion) {
    let mut g = c.benchmark_group("encode");
    for size in [64usize, 1024] {
        let d = data(size);
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_with_input(BenchmarkId::new("message", size), &d, |b, d| {
            b.iter(|| black_box(wire::message(black_box("doc:42"), black_box(1_188), d)))
        });
    }
    let id = serde_json::value::RawValue::from_string("17".into()).expect("raw id");
    g.throughput(Throughput::Elements(1));
    g.bench_function("ack_with_seq", |b| {
        b.iter(|| black_box(wire::ack(black_box(&id), Some(1_188), None)))
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = decode, encode
}
criterion_main!(benches);
