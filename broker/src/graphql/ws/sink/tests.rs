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
    fn recover(&self, backlog: Arc<dyn crate::node::dialect::Backlog>) {
        backlog.pump(&|_| true);
    }
    fn forget(&self, _: &Arc<dyn crate::node::dialect::Backlog>) {}
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
        assert!(got[s.conn as usize - 1][0].ends_with(body));
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
