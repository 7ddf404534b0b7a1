//! One publish to many GraphQL subscriptions over `graphql-transport-ws`
//! (§12) on real sockets: the broker renders a message's body once per
//! distinct selection and shares it, so this checks that every
//! subscription still gets exactly its own `next`: its own id (random, as
//! the `graphql-ws` client makes them), its own selection, and
//! `extensions` on its own first message only.

use serde_json::{Value, json};

use crate::common::{API_KEY, Broker, Client};
use crate::graphql_ws::{connected, live, subscribe};

async fn publish(b: &Broker, channel: &str, data: Value) -> u64 {
    b.published(channel, data).await
}

/// The next `n` `next` messages on `c`, by operation id.
async fn nexts(c: &mut Client, n: usize) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    while out.len() < n {
        let m = c.next_json().await;
        assert_eq!(m["type"], "next", "{m}");
        out.push((m["id"].as_str().unwrap().to_owned(), m["payload"].clone()));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_on_one_channel_each_get_their_own_id_selection_and_extensions() {
    let b = Broker::start("");
    let plain = r#"subscription { messages(channel: "doc:fan") { seq data } }"#;
    let aliased = r#"subscription { m: messages(channel: "doc:fan") { data channel s: seq } }"#;
    let (ida, idb) = (
        "9b2f61d4-07c3-4e8a-b1f5-3c6d2e8a4f10",
        "e41a7c02-5d9b-4f36-a8e1-0b7c94d2f6a3",
    );
    let mut a = connected(&b, API_KEY).await;
    let mut c = connected(&b, API_KEY).await;
    subscribe(&mut a, ida, plain, json!({})).await;
    // One socket holding both selections.
    subscribe(&mut c, idb, plain, json!({})).await;
    subscribe(&mut c, "other", aliased, json!({})).await;
    live(&b, "doc:fan", 3).await;

    let s1 = publish(&b, "doc:fan", json!({"n": 1})).await;
    let plain1 = json!({"messages":{"seq":s1,"data":{"n":1}}});
    let [(id, p)] = <[_; 1]>::try_from(nexts(&mut a, 1).await).unwrap();
    assert_eq!((id.as_str(), &p["data"]), (ida, &plain1));
    assert!(
        p["extensions"]["rateLimit"]["cost"].as_u64() > Some(0),
        "{p}"
    );
    let got = nexts(&mut c, 2).await;
    assert_eq!((got[0].0.as_str(), &got[0].1["data"]), (idb, &plain1));
    assert_eq!(got[1].0, "other");
    assert_eq!(
        got[1].1["data"],
        json!({"m":{"data":{"n":1},"channel":"doc:fan","s":s1}})
    );
    assert!(got.iter().all(|(_, p)| p.get("extensions").is_some()));

    // A late subscription: its first message carries its charge, the
    // others' second ones carry nothing, and the body is the same.
    let mut d = connected(&b, API_KEY).await;
    subscribe(&mut d, "late", plain, json!({})).await;
    live(&b, "doc:fan", 4).await;
    let s2 = publish(&b, "doc:fan", json!("two")).await;
    let plain2 = json!({"messages":{"seq":s2,"data":"two"}});
    let [(_, p)] = <[_; 1]>::try_from(nexts(&mut d, 1).await).unwrap();
    assert_eq!(p["data"], plain2);
    assert!(p.get("extensions").is_some(), "{p}");
    let [(_, p)] = <[_; 1]>::try_from(nexts(&mut a, 1).await).unwrap();
    assert_eq!(p, json!({ "data": plain2 }));
    let got = nexts(&mut c, 2).await;
    assert_eq!(got[0].1, json!({ "data": plain2 }));
    assert_eq!(
        got[1].1,
        json!({"data":{"m":{"data":"two","channel":"doc:fan","s":s2}}})
    );
}
