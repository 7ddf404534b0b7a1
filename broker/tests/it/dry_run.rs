//! Dry run has one meaning on every front (issue 42): a limit in dry run
//! lets through what it would refuse, and counts it in
//! `tidegate_dry_run_rejections_total`. Before, gRPC `Subscribe` refused
//! an over-cap call in dry run while the other fronts let it through, and
//! Pusher let it through without counting it.

use serde_json::json;
use tidegate::grpc::proto::subscribe_event::Event;

use crate::common::{API_KEY, Broker};
use crate::graphql_ws::{connected, live, next_for, subscribe};
use crate::grpc::{authed, connect, news_key_config, subscribe_req};
use crate::grpc_subscribe::{next, next_message};
use crate::sse_stream::stream;

const PLAN: &str = "[plans.free]\nmax_subscriptions = 2\ndry_run = [\"subscriptions\"]\n";

#[tokio::test]
async fn the_subscription_cap_in_dry_run_lets_the_third_through_on_every_front() {
    let b = Broker::start(&format!("{PLAN}{}", news_key_config()));
    // /v1/ws: three subscribes, three acks.
    let mut ws = b.client("acme").await;
    for (id, channel) in [(1u64, "doc:a"), (2, "doc:b"), (3, "doc:c")] {
        let ack = ws
            .call(json!({"type":"subscribe","channel":channel}), id)
            .await;
        assert_eq!(ack["type"], "ack", "{ack}");
    }
    // SSE: a stream of three channels opens.
    let mut sse = stream(&b, "acme", "channel=doc:a&channel=doc:b&channel=doc:c", &[]).await;
    // gRPC: a Subscribe of three channels opens and acks each.
    let mut grpc = connect(&b).await;
    let mut events = grpc
        .subscribe(authed(
            subscribe_req(&[("doc:a", None), ("doc:b", None), ("doc:c", None)]),
            API_KEY,
        ))
        .await
        .expect("the over-cap Subscribe is let through in dry run")
        .into_inner();
    for _ in 0..3 {
        assert!(matches!(next(&mut events).await, Ok(Some(Event::Ack(_)))));
    }
    // graphql-ws: three operations at once.
    let mut gql = connected(&b, API_KEY).await;
    for id in ["1", "2", "3"] {
        subscribe(
            &mut gql,
            id,
            r#"subscription { messages(channel: "doc:c") { seq } }"#,
            json!({}),
        )
        .await;
    }
    // Pusher: a third public channel succeeds.
    let (mut pusher, _) = crate::pusher_ws::connected(&b, crate::pusher_ws::KEY).await;
    for channel in ["a", "b", "c"] {
        let ok = crate::pusher_ws::subscribe(&mut pusher, channel, None).await;
        assert_eq!(
            ok["event"], "pusher_internal:subscription_succeeded",
            "{ok}"
        );
    }
    // Every third subscription is live and delivers.
    live(&b, "doc:c", 1 + 1 + 1 + 3).await;
    let r = b.publish_http("doc:c", json!("third")).await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        ws.until(|v| v["type"] == "message").await["channel"],
        "doc:c"
    );
    assert_eq!(sse.message().await["channel"], "doc:c");
    assert_eq!(next_message(&mut events).await.channel, "doc:c");
    assert_eq!(next_for(&mut gql, "3").await["type"], "next");
    // Each counted once as a dry-run refusal, none as a refusal.
    let text = b.metrics().await;
    let count = |kind: &str, layer: &str| {
        crate::common::metric_value(
            &text,
            &format!(r#"{kind}{{layer="{layer}",reason="too_many_subscriptions"}}"#),
        )
    };
    // `connection`: /v1/ws, SSE and Pusher.
    for (layer, n) in [("connection", 3.0), ("grpc", 1.0), ("graphql", 1.0)] {
        assert_eq!(
            count("tidegate_dry_run_rejections_total", layer),
            n,
            "{layer}"
        );
        assert_eq!(count("tidegate_rejections_total", layer), 0.0, "{layer}");
    }
}
