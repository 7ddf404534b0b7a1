//! One fan-out, several subscriptions: a body is rendered once per
//! selection and shared; each subscription's own head (id, first
//! `extensions`) stays its own.

use async_graphql::parser::parse_query;
use async_graphql_value::Variables;
use serde_json::{Value as Json, json};

use super::*;

/// An outlet that records what is queued.
struct Recorder {
    gauge: OutboundGauge,
    frames: Mutex<Vec<Vec<Bytes>>>,
}

impl Outlet for Recorder {
    fn push(&self, parts: &mut [Bytes]) {
        let parts = parts.iter_mut().map(std::mem::take).collect();
        self.frames.lock().push(parts);
    }
    fn push_frame(&self, frame: Bytes) {
        self.frames.lock().push(vec![frame]);
    }
    fn push_keyed(&self, _: &Arc<str>, _: Arc<str>, frame: Bytes) -> bool {
        self.push_frame(frame);
        true
    }
    fn gauge(&self) -> &OutboundGauge {
        &self.gauge
    }
    fn congested(&self) {}
    fn recover(&self, backlog: Arc<dyn crate::dialect::Backlog>) {
        backlog.pump(&|_| true);
    }
    fn forget(&self, _: &Arc<dyn crate::dialect::Backlog>) {}
    fn page_room(&self, _: usize) -> Option<usize> {
        None
    }
    fn page_done(&self, _: usize) {}
    fn pump_backlogs(&self) {}
}

fn sink(conn: u64, query: &str, id: &str, first: Option<&str>) -> (Arc<OpSink>, Arc<Recorder>) {
    let doc = parse_query(query).unwrap();
    let (_, op) = doc.operations.iter().next().unwrap();
    let shape = Shape::compile(&doc, &op.node, &Variables::default(), id, "doc:1");
    let out = Arc::new(Recorder {
        gauge: OutboundGauge::new(1 << 20),
        frames: Mutex::new(Vec::new()),
    });
    let s = OpSink::new(conn, "doc:1", shape, out.clone(), first.map(str::to_owned));
    s.joined(Joined {
        recovered: None,
        backlog: Default::default(),
        last_seq: 10,
    });
    (s, out)
}

fn json_of(parts: &[Bytes]) -> Json {
    serde_json::from_slice(wire::payload(&parts.concat())).unwrap()
}

#[test]
fn one_fan_out_renders_a_body_per_selection_and_each_head_is_its_own() {
    let plain = r#"subscription { messages(channel: "doc:1") { seq data } }"#;
    let aliased = r#"subscription { m: messages(channel: "doc:1") { data s: seq } }"#;
    let ext = r#"{"rateLimit":{"cost":2}}"#;
    let subs = [
        sink(1, plain, "7d0f3a9e-1b2c-4d5e-8f60-718293a4b5c6", None),
        sink(2, aliased, "1", None),
        sink(3, plain, "x\"y", Some(ext)),
        sink(4, aliased, "2", Some(ext)),
    ];
    let channel: Arc<str> = "doc:1".into();
    let frame = wire::message("doc:1", 11, r#"{"n":1}"#);
    let mut renders = Renders::default();
    for (s, out) in &subs {
        out.gauge.add(frame.len());
        s.message(&channel, 11, &frame, None, &mut renders);
    }
    let got: Vec<Vec<Bytes>> = subs
        .iter()
        .map(|(_, o)| o.frames.lock()[0].clone())
        .collect();
    let v: Vec<Json> = got.iter().map(|p| json_of(p)).collect();
    let plain_data = json!({"messages":{"seq":11,"data":{"n":1}}});
    let aliased_data = json!({"m":{"data":{"n":1},"s":11}});
    assert_eq!(v[0]["id"], "7d0f3a9e-1b2c-4d5e-8f60-718293a4b5c6");
    assert_eq!(v[0]["payload"], json!({"data": plain_data}));
    assert_eq!(v[1]["id"], "1");
    assert_eq!(v[1]["payload"], json!({"data": aliased_data}));
    assert_eq!(v[2]["id"], "x\"y");
    assert_eq!(
        v[2]["payload"],
        json!({"extensions":{"rateLimit":{"cost":2}},"data": plain_data})
    );
    assert_eq!(v[3]["payload"]["data"], aliased_data);
    assert_eq!(v[3]["payload"]["extensions"]["rateLimit"]["cost"], 2);
    // One body rendered per selection, not per subscription.
    assert_eq!(renders.len(), 2);
    for (s, _) in &subs {
        let body = renders.get(s.shape.body_key()).unwrap();
        assert!(got[s.conn as usize - 1].concat().ends_with(body));
    }
    // What each queued is what its gauge counts (the hub's reservation
    // released).
    for (i, (_, out)) in subs.iter().enumerate() {
        let len: usize = got[i].iter().map(Bytes::len).sum();
        assert_eq!(out.gauge.pending(), len, "sink {i}");
    }
    // The next fan-out renders the next message: nothing is kept across.
    let frame = wire::message("doc:1", 12, "2");
    let mut renders = Renders::default();
    for (s, out) in &subs {
        out.gauge.add(frame.len());
        s.message(&channel, 12, &frame, None, &mut renders);
    }
    let second = json_of(&subs[2].1.frames.lock()[1]);
    assert_eq!(
        second,
        json!({"type":"next","id":"x\"y","payload":{"data":{"messages":{"seq":12,"data":2}}}}),
        "extensions only on the first"
    );
}

/// A `next` as it was queued before heads were kept: one buffer.
fn whole_next(shape: &Shape, seq: u64, data: &[u8]) -> Vec<u8> {
    shape.render_whole(None, seq, data).to_vec()
}

#[test]
fn a_pair_is_the_same_bytes_its_body_shared_and_its_head_kept_while_the_length_holds() {
    let q = r#"subscription { messages(channel: "doc:1") { seq data } }"#;
    let a = sink(1, q, "7d0f3a9e-1b2c-4d5e-8f60-718293a4b5c6", None);
    let b = sink(2, q, "0b1c2d3e-4f50-4a6b-9c7d-8e9fa0b1c2d3", None);
    let channel: Arc<str> = "doc:1".into();
    // 11 and 12 give bodies of one length, 100 a longer one; 130 bytes of
    // data take the frame past 125 bytes (a 4-byte header).
    let long = format!("\"{}\"", "x".repeat(128));
    let msgs: [(u64, &str); 4] = [(11, "1"), (12, "2"), (100, "3"), (101, &long)];
    for (seq, data) in msgs {
        let frame = wire::message("doc:1", seq, data);
        let mut renders = Renders::default();
        for (s, out) in [&a, &b] {
            out.gauge.add(frame.len());
            s.message(&channel, seq, &frame, None, &mut renders);
        }
    }
    let (fa, fb) = (a.1.frames.lock().clone(), b.1.frames.lock().clone());
    for (i, (seq, data)) in msgs.iter().enumerate() {
        for (s, f) in [(&a.0, &fa), (&b.0, &fb)] {
            assert_eq!(f[i].len(), 2, "a head and a body");
            assert_eq!(
                f[i].concat(),
                whole_next(&s.shape, *seq, data.as_bytes()),
                "message {seq}: the same bytes as one buffer"
            );
        }
        assert_eq!(fa[i][1].as_ptr(), fb[i][1].as_ptr(), "one body shared");
    }
    let head = |f: &Vec<Vec<Bytes>>, i: usize| f[i][0].as_ptr();
    assert_eq!(head(&fa, 0), head(&fa, 1), "same length: the head is kept");
    assert_ne!(head(&fa, 1), head(&fa, 2), "a longer body: a new header");
    assert_eq!(fa[3][0][1], 126, "a 16-bit length");
    // The gauge counts exactly what is queued.
    for (out, f) in [(&a.1, &fa), (&b.1, &fb)] {
        let queued: usize = f.iter().flatten().map(Bytes::len).sum();
        assert_eq!(out.gauge.pending(), queued);
    }
}

/// The `seq`s of what was queued, in order.
fn seqs(out: &Recorder) -> Vec<u64> {
    let frames = out.frames.lock();
    frames
        .iter()
        .map(|p| {
            json_of(p)["payload"]["data"]["messages"]["seq"]
                .as_u64()
                .unwrap()
        })
        .collect()
}

/// A sink not joined yet.
fn joining(query: &str) -> (Arc<OpSink>, Arc<Recorder>) {
    let doc = parse_query(query).unwrap();
    let (_, op) = doc.operations.iter().next().unwrap();
    let shape = Shape::compile(&doc, &op.node, &Variables::default(), "1", "doc:1");
    let out = Arc::new(Recorder {
        gauge: OutboundGauge::new(1 << 20),
        frames: Mutex::new(Vec::new()),
    });
    let s = OpSink::new(1, "doc:1", shape, out.clone(), None);
    (s, out)
}

/// A live message as the hub hands it over: reserved in the gauge first.
fn deliver(s: &OpSink, out: &Recorder, seq: u64) {
    let frame = wire::message("doc:1", seq, &seq.to_string());
    out.gauge.add(frame.len());
    s.message(&"doc:1".into(), seq, &frame, None, &mut Renders::default());
}

fn queued_bytes(out: &Recorder) -> usize {
    out.frames.lock().iter().flatten().map(Bytes::len).sum()
}

#[test]
fn history_then_what_was_held_each_seq_once_and_the_first_says_recovered() {
    let q = r#"subscription { messages(channel: "doc:1") { seq } }"#;
    let (s, out) = joining(q);
    deliver(&s, &out, 11);
    deliver(&s, &out, 12);
    let backlog: Vec<(u64, Bytes)> = (9..=11)
        .map(|seq| (seq, wire::message("doc:1", seq, "0")))
        .collect();
    s.joined(Joined {
        recovered: Some(true),
        backlog: backlog.into(),
        last_seq: 11,
    });
    deliver(&s, &out, 13);
    assert_eq!(seqs(&out), [9, 10, 11, 12, 13], "11 once, as history");
    let first = json_of(&out.frames.lock()[0]);
    assert_eq!(first["payload"]["extensions"]["recovered"], true);
    assert_eq!(out.gauge.pending(), queued_bytes(&out), "held 11 released");
    assert!(!s.broken());
    assert_eq!(s.end().dropped, 0);
}

#[test]
fn a_drop_breaks_it_nothing_newer_is_queued_and_the_end_names_the_last_seq_sent() {
    let q = r#"subscription { messages(channel: "doc:1") { seq } }"#;
    let (s, out) = joining(q);
    deliver(&s, &out, 11);
    s.dropped(&"doc:1".into(), 12);
    deliver(&s, &out, 13);
    assert!(s.broken(), "a loss while joining");
    s.joined(Joined {
        recovered: None,
        backlog: Default::default(),
        last_seq: 10,
    });
    assert_eq!(seqs(&out), [11], "what came before the loss");
    deliver(&s, &out, 14);
    s.dropped(&"doc:1".into(), 15);
    assert_eq!(seqs(&out), [11]);
    assert_eq!(
        out.gauge.pending(),
        queued_bytes(&out),
        "13 and 14 released"
    );
    let report = s.end();
    assert_eq!((report.dropped, report.last_seq), (4, 11));
    deliver(&s, &out, 16);
    assert_eq!(out.gauge.pending(), queued_bytes(&out), "ended: released");
}
