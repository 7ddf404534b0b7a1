//! Bad input gets a precise error or close code, never a panic, and the
//! socket's other traffic is unaffected.

use serde_json::json;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};

use crate::common::{Broker, Client};

/// Sends `raw`, expects a `bad_request` (naming `id` if given) whose
/// message contains `needle`, then checks the socket still works.
async fn bad_request(c: &mut Client, raw: Message, id: Option<u64>, needle: &str) {
    c.send_raw(raw).await;
    let e = c.next_json().await;
    assert_eq!(
        (e["type"].as_str(), e["code"].as_str()),
        (Some("error"), Some("bad_request")),
        "{e}"
    );
    match id {
        Some(id) => assert_eq!(e["id"], id, "{e}"),
        None => assert!(e.get("id").is_none(), "{e}"),
    }
    let message = e["message"].as_str().unwrap();
    assert!(message.contains(needle), "{message:?} lacks {needle:?}");
    let ok = c
        .call(json!({"type":"publish","channel":"doc:1","data":1}), 9999)
        .await;
    assert_eq!(ok["type"], "ack", "the socket still works after {needle}");
}

#[tokio::test]
async fn each_malformed_frame_gets_a_precise_error() {
    let broker = Broker::start("");
    let mut c = broker.client("acme").await;
    bad_request(&mut c, Message::text("{not json"), None, "malformed JSON").await;
    bad_request(&mut c, Message::text("[1,2,3]"), None, "JSON object").await;
    bad_request(&mut c, Message::text(r#"{"id":1}"#), Some(1), "\"type\"").await;
    bad_request(
        &mut c,
        Message::text(r#"{"type":"dance","id":2}"#),
        Some(2),
        "unknown frame type",
    )
    .await;
    bad_request(&mut c, Message::binary(vec![1u8, 2, 3]), None, "binary").await;
    let deep = format!(
        r#"{{"type":"publish","channel":"doc:1","id":3,"data":{}1{}}}"#,
        "[".repeat(40),
        "]".repeat(40)
    );
    bad_request(&mut c, Message::text(deep), None, "nesting").await;
    bad_request(
        &mut c,
        Message::text(r#"{"type":"subscribe","channel":"doc:1","since":1e400,"id":4}"#),
        Some(4),
        "since",
    )
    .await;
    bad_request(
        &mut c,
        Message::text(r#"{"type":"budget","id":{"a":1}}"#),
        None,
        "id must be",
    )
    .await;
    bad_request(
        &mut c,
        Message::text(r#"{"type":"publish","channel":"doc:1","id":5}"#),
        Some(5),
        "data",
    )
    .await;
}

#[tokio::test]
async fn huge_numbers_in_data_are_delivered_verbatim() {
    let broker = Broker::start("");
    let mut c = broker.client("acme").await;
    c.call(json!({"type":"subscribe","channel":"doc:n"}), 1)
        .await;
    c.send_raw(Message::text(r#"{"type":"publish","channel":"doc:n","data":[1e999999,123456789012345678901234567890],"id":2}"#))
        .await;
    let mut texts = Vec::new();
    while texts.len() < 2 {
        if let Some(Ok(Message::Text(t))) = futures_util::StreamExt::next(&mut c.ws).await {
            texts.push(t.to_string());
        }
    }
    let message = texts.iter().find(|t| t.contains("\"message\"")).unwrap();
    assert!(
        message.ends_with(r#""data":[1e999999,123456789012345678901234567890]}"#),
        "{message}"
    );
}

#[tokio::test]
async fn invalid_utf8_closes_1007() {
    let broker = Broker::start("");
    let mut c = broker.client("acme").await;
    c.send_raw(Message::Frame(Frame::message(
        vec![b'"', 0xff, 0xfe, b'"'],
        OpCode::Data(Data::Text),
        true,
    )))
    .await;
    assert_eq!(c.closed().await, Some(1007));
}

#[tokio::test]
async fn other_sockets_are_unaffected_by_a_bad_one() {
    let broker = Broker::start("");
    let mut good = broker.client("acme").await;
    good.call(json!({"type":"subscribe","channel":"doc:z"}), 1)
        .await;
    let mut bad = broker.client("acme").await;
    bad.send_raw(Message::Frame(Frame::message(
        vec![0xc3],
        OpCode::Data(Data::Text),
        true,
    )))
    .await;
    assert_eq!(bad.closed().await, Some(1007));
    let seq = broker
        .publish_http("doc:z", json!("still here"))
        .await
        .json::<serde_json::Value>()
        .await
        .unwrap()["seq"]
        .clone();
    let m = good.next_json().await;
    assert_eq!(
        (m["seq"].clone(), m["data"].as_str()),
        (seq, Some("still here"))
    );
}
