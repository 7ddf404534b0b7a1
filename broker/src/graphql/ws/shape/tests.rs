use async_graphql::parser::parse_query;
use async_graphql_value::Variables;
use serde_json::{Value as Json, json};

use super::*;

/// The whole `next` message a shape renders, parsed, and its parts.
fn next(query: &str, vars: Json, ext: Option<&str>, seq: u64, data: &str) -> (Json, Vec<Bytes>) {
    let doc = parse_query(query).unwrap();
    let (_, op) = doc.operations.iter().next().unwrap();
    let vars = Variables::from_json(vars);
    let shape = Shape::compile(&doc, &op.node, &vars, "op-1", "doc:1");
    let data = Bytes::copy_from_slice(data.as_bytes());
    let parts = shape.render(ext, seq, &data);
    let whole = shape.render_whole(ext, seq, &data);
    let joined: Vec<u8> = parts.iter().flat_map(|p| p.iter().copied()).collect();
    assert_eq!(joined, whole.to_vec());
    // The subscription's own head around the shared body is the same frame.
    let body = shape.render_body(seq, &data);
    assert_eq!(shape.render_around(ext, &body), whole);
    let v = serde_json::from_slice(wire::payload(&whole)).unwrap();
    (v, parts)
}

#[test]
fn a_plain_selection_fills_seq_and_data_and_shares_the_data_bytes() {
    let data = r#"{"text":"hi","n":[1,2]}"#;
    let (v, parts) = next(
        r#"subscription { messages(channel: "doc:1") { seq data } }"#,
        json!({}),
        None,
        42,
        data,
    );
    assert_eq!(
        v,
        json!({"type":"next","id":"op-1","payload":{"data":{"messages":{"seq":42,"data":{"text":"hi","n":[1,2]}}}}})
    );
    assert_eq!(parts.len(), 3, "head, the shared data, the constant tail");
    assert_eq!(
        &parts[1][..],
        data.as_bytes(),
        "data is the hub's bytes, uncopied"
    );
}

#[test]
fn aliases_repeats_typename_and_the_channel_are_the_executors_answer() {
    let (v, _) = next(
        r#"subscription { m: messages(channel: "doc:1") { s: seq seq channel __typename d: data seq } }"#,
        json!({}),
        None,
        7,
        "true",
    );
    assert_eq!(
        v["payload"]["data"],
        json!({"m":{"s":7,"seq":7,"channel":"doc:1","__typename":"Message","d":true}})
    );
    // Key order is the document's (serde_json keeps it only with
    // preserve_order; compare the text).
    let (_, parts) = next(
        r#"subscription { m: messages(channel: "doc:1") { s: seq channel d: data } }"#,
        json!({}),
        None,
        7,
        "1",
    );
    let text: Vec<u8> = parts.iter().flat_map(|p| p.iter().copied()).collect();
    let text = String::from_utf8_lossy(wire::payload(&text)).into_owned();
    assert!(
        text.ends_with(r#""data":{"m":{"s":7,"channel":"doc:1","d":1}}}}"#),
        "{text}"
    );
}

#[test]
fn fragments_and_directives_select_as_collect_fields_does() {
    let q = r#"
        subscription($withData: Boolean!, $noSeq: Boolean = true) {
          messages(channel: "doc:1") {
            ...F
            ... on Message { channel @skip(if: true) }
            data @include(if: $withData)
            seq @skip(if: $noSeq)
          }
        }
        fragment F on Message { __typename seq @include(if: false) }
    "#;
    let (v, _) = next(q, json!({"withData": true}), None, 3, "[]");
    assert_eq!(
        v["payload"]["data"]["messages"],
        json!({"__typename":"Message","data":[]})
    );
    let (v, _) = next(q, json!({"withData": false, "noSeq": false}), None, 3, "[]");
    assert_eq!(
        v["payload"]["data"]["messages"],
        json!({"__typename":"Message","seq":3})
    );
}

#[test]
fn extensions_lead_the_payload_and_conflation_marks_them() {
    let ext = r#"{"rateLimit":{"cost":3}}"#;
    let (v, _) = next(
        r#"subscription { messages(channel: "doc:1") { seq } }"#,
        json!({}),
        Some(ext),
        9,
        "1",
    );
    assert_eq!(v["payload"]["extensions"]["rateLimit"]["cost"], 3);
    assert_eq!(v["payload"]["data"]["messages"]["seq"], 9);
    let doc = parse_query(r#"subscription { messages(channel: "doc:1") { seq data } }"#).unwrap();
    let (_, op) = doc.operations.iter().next().unwrap();
    let shape = Shape::compile(&doc, &op.node, &Variables::default(), "x\"y", "doc:1");
    let data = Bytes::from_static(b"{\"payload\":{}}");
    for ext in [None, Some(ext)] {
        let frame = wire::conflated(&shape.render_whole(ext, 1, &data));
        let v: Json = serde_json::from_slice(wire::payload(&frame)).unwrap();
        assert_eq!(v["id"], "x\"y");
        assert_eq!(v["payload"]["extensions"]["conflated"], true, "{v}");
        assert_eq!(
            v["payload"]["data"]["messages"]["data"],
            json!({"payload":{}})
        );
    }
}

#[test]
fn a_large_message_gets_the_long_frame_header() {
    let big = format!("\"{}\"", "x".repeat(70_000));
    let (v, _) = next(
        r#"subscription { messages(channel: "doc:1") { data seq } }"#,
        json!({}),
        None,
        1,
        &big,
    );
    assert_eq!(
        v["payload"]["data"]["messages"]["data"]
            .as_str()
            .unwrap()
            .len(),
        70_000
    );
    assert_eq!(v["payload"]["data"]["messages"]["seq"], 1);
}

fn shape(query: &str, vars: Json, id: &str) -> Shape {
    let doc = parse_query(query).unwrap();
    let (_, op) = doc.operations.iter().next().unwrap();
    Shape::compile(&doc, &op.node, &Variables::from_json(vars), id, "doc:1")
}

#[test]
fn the_body_is_the_selections_and_the_head_the_subscriptions_own() {
    let plain = r#"subscription { messages(channel: "doc:1") { seq data } }"#;
    let a = shape(plain, json!({}), "0b6c1e52-6f0e-4a8e-9c3d-2f5a7d1b9e40");
    let b = shape(plain, json!({}), "1");
    assert_eq!(a.body_key(), b.body_key(), "ids are not in the body");
    let body = a.render_body(5, b"[1]");
    assert_eq!(body, b.render_body(5, b"[1]"));
    assert_eq!(&body[..], br#""data":{"messages":{"seq":5,"data":[1]}}}}"#);
    for (s, ext) in [(&a, None), (&b, Some(r#"{"rateLimit":{"cost":3}}"#))] {
        assert_eq!(s.render_around(ext, &body), s.render_whole(ext, 5, b"[1]"));
    }
    // The same selection reached through a fragment and a variable is the
    // same body.
    let via = shape(
        r#"subscription($d: Boolean!) { messages(channel: "doc:1") { ...F data @include(if: $d) } }
           fragment F on Message { seq }"#,
        json!({"d": true}),
        "2",
    );
    assert_eq!(via.body_key(), a.body_key());
    // Any difference in what is selected, or how it is named, is another
    // body.
    for other in [
        r#"subscription { messages(channel: "doc:1") { data seq } }"#,
        r#"subscription { m: messages(channel: "doc:1") { seq data } }"#,
        r#"subscription { messages(channel: "doc:1") { s: seq data } }"#,
        r#"subscription { messages(channel: "doc:1") { seq data channel } }"#,
        r#"subscription { messages(channel: "doc:1") { seq } }"#,
        r#"subscription { messages(channel: "doc:1") { data } }"#,
        r#"subscription { messages(channel: "doc:1") { seq data __typename } }"#,
        r#"subscription { __typename messages(channel: "doc:1") { seq data } }"#,
    ] {
        let o = shape(other, json!({}), "1");
        assert_ne!(o.body_key(), a.body_key(), "{other}");
        assert_ne!(o.render_body(5, b"[1]"), body, "{other}");
    }
    let skipped = shape(
        r#"subscription($d: Boolean!) { messages(channel: "doc:1") { seq data @include(if: $d) } }"#,
        json!({"d": false}),
        "1",
    );
    assert_ne!(skipped.body_key(), a.body_key());
}
