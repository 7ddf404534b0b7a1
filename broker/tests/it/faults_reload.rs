//! A config reload during a flood (issue 15): reloads applied while
//! sockets flood the node drop no socket and no answer, and traffic goes on.

use std::collections::HashSet;

use serde_json::{Value, json};

use crate::common::{Broker, Client, config};

const FLOODERS: usize = 4;
const CHUNKS: u64 = 10;
const PER_CHUNK: u64 = 40;

/// The free plan at `rate` messages per second (burst the same).
fn plan(rate: u32) -> String {
    format!("[plans.free]\nmessages_per_sec = {rate}\nburst = {rate}\n")
}

fn record(seen: &mut HashSet<u64>, id: &Value) {
    let id = id.as_u64().expect("numeric ids");
    assert!(seen.insert(id), "id {id} answered twice");
}

/// Reads until every id in `1..=n` is answered (an ack, an error naming
/// it, or a `rate_limited` listing it), each exactly once.
async fn answers(c: &mut Client, n: u64) {
    let mut seen = HashSet::new();
    while seen.len() < n as usize {
        let v = c.next_json().await;
        match (v["type"].as_str(), v["ids"].as_array()) {
            (Some("ack"), _) => record(&mut seen, &v["id"]),
            (Some("error"), Some(ids)) => ids.iter().for_each(|id| record(&mut seen, id)),
            (Some("error"), None) => record(&mut seen, &v["id"]),
            _ => {}
        }
    }
    assert!(seen.iter().all(|id| (1..=n).contains(id)), "{seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_during_a_flood_drops_no_socket_and_no_answer() {
    let b = Broker::start(&plan(20));
    let mut watcher = b.client("watcher").await;
    let ack = watcher
        .call(json!({"type":"subscribe","channel":"doc:flood"}), 1)
        .await;
    assert_eq!(ack["type"], "ack", "{ack}");
    let mut flooders = Vec::new();
    for i in 0..FLOODERS {
        flooders.push(b.client(&format!("flooder{i}")).await);
    }

    // Frames go out in chunks with a reload between chunks, so every
    // reload lands while the node is still working through a flood.
    let mut id = 0;
    for chunk in 0..CHUNKS {
        for _ in 0..PER_CHUNK {
            id += 1;
            for f in &mut flooders {
                f.send(json!({"type":"publish","channel":"doc:flood","data":id,"id":id}))
                    .await;
            }
        }
        let rate = if chunk % 2 == 0 { 200 } else { 20 };
        b.node
            .reload(config(&plan(rate)))
            .expect("the reload applies");
    }
    for f in &mut flooders {
        answers(f, CHUNKS * PER_CHUNK).await;
    }

    // Every socket is still open and still served under the last config.
    assert_eq!(b.node.sockets.len(), FLOODERS + 1);
    let budget = flooders[0].call(json!({"type":"budget"}), 10_000).await;
    assert_eq!(budget["connection"]["capacity"], 20, "{budget}");
    let resp = b.publish_http("doc:flood", json!("after")).await;
    assert_eq!(resp.status(), 200);
    watcher
        .until(|m| m["type"] == "message" && m["data"] == "after")
        .await;
}
