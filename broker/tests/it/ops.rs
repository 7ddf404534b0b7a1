//! §6: health, readiness, metrics, and unknown paths.

use serde_json::json;

use crate::common::Broker;

#[tokio::test]
async fn health_and_readiness() {
    let broker = Broker::start("");
    assert_eq!(
        reqwest::get(broker.url("/healthz")).await.unwrap().status(),
        200
    );
    assert_eq!(
        reqwest::get(broker.url("/readyz")).await.unwrap().status(),
        200
    );
    let missing = reqwest::get(broker.url("/nope")).await.unwrap();
    assert_eq!(missing.status(), 404);
    assert_eq!(
        crate::common::refusal_json(missing).await["error"],
        "not_found"
    );
    // A known path with the wrong method is refused in the same shape.
    let wrong = reqwest::get(broker.url("/v1/publish")).await.unwrap();
    assert_eq!(wrong.status(), 405);
    assert_eq!(
        crate::common::refusal_json(wrong).await["error"],
        "bad_request"
    );
}

#[tokio::test]
async fn metrics_count_connections_messages_and_rejections() {
    let broker = Broker::start("");
    let mut c = broker.client("acme").await;
    c.call(json!({"type":"subscribe","channel":"doc:m"}), 1)
        .await;
    c.call(json!({"type":"publish","channel":"doc:m","data":1}), 2)
        .await;
    c.call(json!({"type":"subscribe","channel":"nope:1"}), 3)
        .await;
    let text = broker.metrics().await;
    let v = |s: &str| crate::common::metric_value(&text, s);
    assert_eq!(v("tidegate_connections_opened_total"), 1.0);
    assert_eq!(v("tidegate_connections{transport=\"ws\"}"), 1.0);
    assert!(v("tidegate_messages_in_total") >= 3.0);
    assert!(v("tidegate_messages_out_total") >= 1.0);
    assert_eq!(v("tidegate_publishes_total{via=\"ws\"}"), 1.0);
    assert_eq!(
        v("tidegate_rejections_total{layer=\"connection\",reason=\"forbidden\"}"),
        1.0
    );
    assert!(text.contains("tidegate_cluster_bridge_up"));
    // Latency histograms, the version and the process's own gauges.
    assert!(
        v("tidegate_delivery_duration_seconds_count") >= 1.0,
        "{text}"
    );
    assert!(v("tidegate_delivery_duration_seconds_sum") > 0.0, "{text}");
    assert_eq!(
        v(r#"tidegate_handshake_duration_seconds_count{outcome="accepted"}"#),
        1.0
    );
    assert_eq!(
        v(&format!(
            "tidegate_build_info{{version=\"{}\"}}",
            env!("CARGO_PKG_VERSION")
        )),
        1.0
    );
    assert!(v("tidegate_process_resident_memory_bytes") > 0.0, "{text}");
    assert!(v("tidegate_process_open_fds") > 0.0, "{text}");
    assert!(v("tidegate_process_max_fds") >= v("tidegate_process_open_fds"));
    let refused = broker.try_connect("not-a-token").await;
    assert!(refused.is_err());
    let text = broker.metrics().await;
    assert_eq!(
        crate::common::metric_value(
            &text,
            r#"tidegate_handshake_duration_seconds_count{outcome="refused"}"#
        ),
        1.0
    );
    drop(c);
    // The close is observed by the broker asynchronously; wait for the
    // gauge to reflect it rather than sleeping a fixed time.
    let deadline = std::time::Instant::now() + crate::common::PATIENCE;
    while broker
        .metric("tidegate_connections{transport=\"ws\"}")
        .await
        != 0.0
    {
        assert!(
            std::time::Instant::now() < deadline,
            "connection never counted as closed"
        );
        tokio::task::yield_now().await;
    }
}

/// `tidegate_actors{kind}` counts socket actors and account supervisors
/// while they live and gives them back when they end; the runtimes' task
/// gauges are there for the actix threads and the gRPC server.
#[tokio::test]
async fn actors_and_tasks_are_counted_and_given_back() {
    const SOCKETS: &str = r#"tidegate_actors{kind="socket"}"#;
    const SUPERVISORS: &str = r#"tidegate_actors{kind="account_supervisor"}"#;
    let broker = Broker::start("");
    let a1 = broker.client("acct-a").await;
    let a2 = broker.client("acct-a").await;
    let b = broker.client("acct-b").await;
    let text = broker.metrics().await;
    let v = |s: &str| crate::common::metric_value(&text, s);
    assert_eq!(v(SOCKETS), 3.0, "{text}");
    assert_eq!(v(SUPERVISORS), 2.0, "{text}");
    for runtime in ["actix", "grpc"] {
        let series = format!("tidegate_runtime_alive_tasks{{runtime=\"{runtime}\"}}");
        assert!(text.contains(&series), "no {series} in {text}");
    }
    drop((a1, a2, b));
    // Actors end asynchronously after their sockets close: wait for the
    // gauges rather than a fixed time.
    let deadline = std::time::Instant::now() + crate::common::PATIENCE;
    loop {
        let text = broker.metrics().await;
        let v = |s: &str| crate::common::metric_value(&text, s);
        if v(SOCKETS) == 0.0 && v(SUPERVISORS) == 0.0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "actors never given back: {} sockets, {} supervisors",
            v(SOCKETS),
            v(SUPERVISORS)
        );
        tokio::task::yield_now().await;
    }
}
