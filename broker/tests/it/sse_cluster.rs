//! SSE streams in a cluster (§14 "cluster mode as for sockets"): a
//! message published on one node reaches a stream on another, a stream cut
//! on one node resumes on another from the cluster's history, and the
//! account's connection cap counts streams and sockets cluster-wide.

use serde_json::json;

use crate::cluster::{bridge_up, node, prefix};
use crate::redis_server::RedisServer;
use crate::sse_client::open;
use crate::sse_stream::stream;

async fn publish(b: &crate::common::Broker, n: u64) -> u64 {
    b.published("doc:k", json!({"n": n})).await
}

#[actix_rt::test]
async fn streams_resume_across_nodes_and_share_the_cap() {
    let redis = RedisServer::start();
    let p = prefix();
    let a = node(&redis, "a", &p, "[plans.free]\nmax_connections = 2\n");
    let b = node(&redis, "b", &p, "[plans.free]\nmax_connections = 2\n");
    bridge_up(&a, true).await;
    bridge_up(&b, true).await;
    let mut on_b = stream(&b, "acme", "channel=doc:k", &[]).await;
    // Live once the join (through the bridge) is done: its id arrives.
    while on_b.next().await.unwrap().id.is_none() {}
    let first = publish(&a, 0).await;
    assert_eq!(on_b.message().await["seq"], first);
    let position = on_b.last_id.clone().unwrap();
    drop(on_b);
    b.wait_sockets(0).await;
    let later = [publish(&a, 1).await, publish(&b, 2).await];
    let mut on_a = stream(&a, "acme", "channel=doc:k", &[("Last-Event-ID", &position)]).await;
    let r = on_a.event().await;
    assert_eq!(
        r.json(),
        json!({"channel":"doc:k","recovered":true}),
        "{r:?}"
    );
    assert_eq!(on_a.message().await["seq"], later[0]);
    assert_eq!(on_a.message().await["seq"], later[1]);
    // One stream on a, one socket on b: the account's cap of 2 is reached.
    let _ws = b.client("acme").await;
    let (status, body, _) = open(
        b.addr,
        &format!("/v1/sse?token={}&channel=doc:k", b.token("acme")),
        &[],
    )
    .await
    .err()
    .expect("the cluster-wide cap refuses a third");
    assert_eq!(
        (status, body["error"].as_str()),
        (429, Some("too_many_connections")),
        "{body}"
    );
}
