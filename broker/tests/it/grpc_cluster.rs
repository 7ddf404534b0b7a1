//! The gRPC API in cluster mode (a real Redis or a real three-master Redis
//! Cluster this test starts, each body on both): fan-out
//! between nodes through the bridge, one key budget across nodes and
//! transports, and the fan-out price counted cluster-wide.

use std::time::Instant;

use serde_json::json;
use tidegate::grpc::proto::subscribe_event::Event;

use crate::cluster::{bridge_up, node, prefix};
use crate::common::{API_KEY, PATIENCE};
use crate::grpc::{assert_rate_limited, authed, connect, md, msg, subscribe_req};
use crate::grpc_subscribe::{next, next_message};
use crate::redis_cluster::Backend;

/// Each body on one Redis and on a three-master Redis Cluster.
macro_rules! on_both {
    ($($name:ident),* $(,)?) => {
        mod one_redis {
            $(
                #[actix_rt::test]
                async fn $name() {
                    super::$name(&crate::redis_server::RedisServer::start()).await;
                }
            )*
        }
        mod redis_cluster {
            $(
                #[actix_rt::test]
                async fn $name() {
                    super::$name(&crate::redis_cluster::RedisCluster::start()).await;
                }
            )*
        }
    };
}

on_both!(
    grpc_publish_and_subscribe_work_across_nodes_with_one_budget,
    the_fan_out_price_counts_every_nodes_subscribers,
);

async fn grpc_publish_and_subscribe_work_across_nodes_with_one_budget(redis: &impl Backend) {
    let p = prefix();
    let extra = "[plans.free]\naccount_burst = 5\naccount_messages_per_sec = 0.01\naccount_sample_every = 1\n";
    let a = node(redis, "a", &p, extra);
    let b = node(redis, "b", &p, extra);
    bridge_up(&a, true).await;
    bridge_up(&b, true).await;

    let mut on_b = connect(&b).await;
    let mut s = on_b
        .subscribe(authed(subscribe_req(&[("doc:x", None)]), API_KEY))
        .await
        .unwrap()
        .into_inner();
    assert!(matches!(next(&mut s).await, Ok(Some(Event::Ack(_)))));

    // Subscribe cost 1 on b; two gRPC publishes on a, one HTTP on b.
    let mut on_a = connect(&a).await;
    let mut seqs = Vec::new();
    for i in 0..2 {
        let r = on_a
            .publish(authed(msg("doc:x", &i.to_string(), ""), API_KEY))
            .await
            .unwrap();
        seqs.push(r.into_inner().seq);
    }
    let r = b.publish_http("doc:x", json!(2)).await;
    assert_eq!(r.status(), 200);
    let body: serde_json::Value = r.json().await.unwrap();
    seqs.push(body["seq"].as_u64().unwrap());
    for (i, seq) in seqs.iter().enumerate() {
        let m = next_message(&mut s).await;
        assert_eq!((m.seq, m.data_json), (*seq, i.to_string()));
    }
    // One unit left of five, cluster-wide: one more publish, then none.
    on_a.publish(authed(msg("doc:x", "3", ""), API_KEY))
        .await
        .unwrap();
    let refused = on_b
        .publish(authed(msg("doc:x", "4", ""), API_KEY))
        .await
        .unwrap_err();
    assert_rate_limited(&refused);
}

async fn the_fan_out_price_counts_every_nodes_subscribers(redis: &impl Backend) {
    let p = prefix();
    let extra = "[grpc]\nmax_concurrent_streams = 2000\n\
                 [plans.free]\naccount_burst = 100000\naccount_messages_per_sec = 1000\n\
                 [plans.free.costs]\npublish_per_1k_subscribers = 3\n";
    let a = node(redis, "a", &p, extra);
    let b = node(redis, "b", &p, extra);
    bridge_up(&a, true).await;
    bridge_up(&b, true).await;
    // 1,000 subscribers, all on b.
    let c = connect(&b).await;
    let mut joining = Vec::new();
    for _ in 0..1000 {
        let mut c = c.clone();
        joining.push(tokio::spawn(async move {
            c.subscribe(authed(subscribe_req(&[("doc:wide", None)]), API_KEY))
                .await
                .unwrap()
                .into_inner()
        }));
    }
    let mut subs = Vec::new();
    for j in joining {
        subs.push(j.await.unwrap());
    }
    let mut on_a = connect(&a).await;
    let mut on_b = connect(&b).await;
    let cost = |r: tonic::Response<_>| md(r.metadata(), "tidegate-cost");
    // b counts its own at once; a learns them at the next exchange.
    let r = on_b
        .publish(authed(msg("doc:wide", "1", ""), API_KEY))
        .await
        .unwrap();
    assert_eq!(cost(r), 4);
    // Waits (polling, with a deadline, like `bridge_up`) for a's view of
    // b's subscribers; publishing meanwhile would fill the unread streams.
    let deadline = Instant::now() + PATIENCE;
    while a.node.broker.subscribers("doc:wide") < 1000 {
        assert!(
            Instant::now() < deadline,
            "a never saw b's subscribers (a up {}, b up {}, b counts {})",
            a.node.bridge.is_up(),
            b.node.bridge.is_up(),
            b.node.broker.subscribers("doc:wide"),
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let r = on_a
        .publish(authed(msg("doc:wide", "1", ""), API_KEY))
        .await
        .unwrap();
    assert_eq!(cost(r), 4);
    drop(subs);
}
