//! Webhooks against bad receivers and bad config (§9): a 50 MB answer, a
//! redirect, an unreachable URL, a short secret refused by `check-config`;
//! events from the broker (occupancy, limits); reloads.

use std::process::Command;

use serde_json::json;

use crate::common::{Broker, config};
use crate::receiver::{Receiver, Reply};
use crate::webhooks::{hook, metric_at_least};

fn series(endpoint: &str, outcome: &str) -> String {
    format!("tidegate_webhook_deliveries_total{{endpoint=\"{endpoint}\",outcome=\"{outcome}\"}}")
}

#[tokio::test]
async fn a_fifty_megabyte_answer_is_read_bounded_not_buffered() {
    let fifty_mb = 50 * 1024 * 1024;
    let mut big = Receiver::start(move |_| Reply::Huge(fifty_mb));
    let b = Broker::start(&hook("big", &big.url, ""));
    b.publish_http("doc:1", json!(1)).await;
    big.next().await;
    metric_at_least(&b, &series("big", "delivered"), 1.0).await;
    // The broker stopped reading after 64 KiB and dropped the connection:
    // the receiver could only push what the socket buffers hold.
    assert!(
        big.produced() < fifty_mb / 2,
        "{} bytes of the body were produced",
        big.produced()
    );
    assert_eq!(b.metric(&series("big", "retry")).await, 0.0);
}

#[tokio::test]
async fn a_redirect_is_a_failure_and_is_not_followed() {
    let mut elsewhere = Receiver::accepting();
    let target = elsewhere.url.clone();
    let mut redirecting =
        Receiver::start(move |_| Reply::Status(302, vec![("location", target.clone())]));
    let b = Broker::start(&hook("moved", &redirecting.url, ""));
    b.publish_http("doc:1", json!(1)).await;
    let first = redirecting.next().await;
    let again = redirecting.next().await;
    assert_eq!(
        first.id, again.id,
        "the event is retried at the configured URL"
    );
    assert!(elsewhere.drain().is_empty(), "the redirect was followed");
    assert!(b.metric(&series("moved", "retry")).await >= 1.0);
}

#[tokio::test]
async fn an_unreachable_url_retries_with_backoff_beside_a_healthy_endpoint() {
    // A port that was free a moment ago: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut ok = Receiver::accepting();
    let cfg = [
        hook("nowhere", &format!("http://127.0.0.1:{port}/hook"), ""),
        hook("ok", &ok.url, ""),
    ]
    .concat();
    let b = Broker::start(&cfg);
    b.publish_http("doc:1", json!(1)).await;
    ok.next().await;
    metric_at_least(&b, &series("nowhere", "retry"), 2.0).await;
    // The failing event stays queued between attempts (the gauge reads 0
    // only while an attempt is in flight, so wait for a reading between).
    let queued = metric_at_least(&b, "tidegate_webhook_queue{endpoint=\"nowhere\"}", 1.0).await;
    assert_eq!(queued, 1.0);
}

#[tokio::test]
async fn an_endpoint_failing_past_its_window_is_unhealthy_then_recovers() {
    let mut rx = Receiver::start(|_| Reply::status(500));
    let b = Broker::start(&hook(
        "sick",
        &rx.url,
        "unhealthy_after_ms = 300\nprobe_interval_ms = 100",
    ));
    b.publish_http("doc:1", json!(1)).await;
    let healthy = "tidegate_webhook_endpoint_healthy{endpoint=\"sick\"}";
    let deadline = std::time::Instant::now() + crate::common::PATIENCE;
    while b.metric(healthy).await != 0.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "never became unhealthy"
        );
        rx.next().await;
    }
    rx.answer(|_| Reply::ok());
    metric_at_least(&b, &series("sick", "delivered"), 1.0).await;
    assert_eq!(b.metric(healthy).await, 1.0);
}

#[test]
fn check_config_refuses_short_secrets_and_bad_urls() {
    let dir = std::env::temp_dir().join(format!("tidegate-wh-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("webhooks.toml");
    std::fs::write(
        &file,
        "[[webhooks]]\nid = \"a\"\nurl = \"ftp://x/\"\nsecret = \"short\"\nevents = [\"message.sent\"]\n\
         [[webhooks]]\nid = \"b\"\nurl = \"http://127.0.0.1:9/\"\nsecret_env = \"TIDEGATE_TEST_UNSET_SECRET\"\nqueue_max = 0\nmax_infligth = 3\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tidegate"))
        .arg("check-config")
        .arg(&file)
        .env_remove("TIDEGATE_TEST_UNSET_SECRET")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    for want in [
        "webhooks[0] (\"a\").secret: must be at least 24 bytes (this one has 5)",
        "webhooks[0] (\"a\").url: must be an http:// URL",
        "webhooks[0] (\"a\").events: unknown event \"message.sent\"",
        "webhooks[1] (\"b\").secret_env: environment variable TIDEGATE_TEST_UNSET_SECRET is not set",
        "webhooks[1] (\"b\").queue_max: must be at least 1",
        "webhooks[1].max_infligth: unknown key",
    ] {
        assert!(err.contains(want), "missing {want:?} in:\n{err}");
    }
}

#[tokio::test]
async fn occupied_once_and_vacated_after_the_delay_without_flapping() {
    let mut rx = Receiver::accepting();
    let b = Broker::start(&hook(
        "occ",
        &rx.url,
        "events = [\"channel.occupied\", \"channel.vacated\"]\nvacated_delay_ms = 2000\nmax_in_flight = 1",
    ));
    let mut one = b.client("acme").await;
    let mut two = b.client("acme").await;
    let sub = |id| json!({"type":"subscribe","channel":"doc:occ","id":id});
    let unsub = |id| json!({"type":"unsubscribe","channel":"doc:occ","id":id});
    one.call(sub(1), 1).await;
    two.call(sub(1), 1).await;
    // A quick leave and come back: no vacated, no second occupied.
    one.call(unsub(2), 2).await;
    two.call(unsub(2), 2).await;
    one.call(sub(3), 3).await;
    let last_leave = std::time::Instant::now();
    one.call(unsub(4), 4).await;
    let occupied = rx.next().await;
    assert_eq!(occupied.body["type"], "channel.occupied");
    assert_eq!(occupied.body["data"], json!({"channel":"doc:occ"}));
    let vacated = rx.next().await;
    assert_eq!(
        vacated.body["type"], "channel.vacated",
        "{:?}",
        vacated.body
    );
    assert!(vacated.at.duration_since(last_leave) >= std::time::Duration::from_secs(2));
    assert!(rx.drain().is_empty());
}

#[tokio::test]
async fn limit_exceeded_once_per_account_reason_and_minute() {
    let mut rx = Receiver::accepting();
    let cfg = format!(
        "[plans.free]\nmax_connections = 1\n{}",
        hook(
            "limits",
            &rx.url,
            "events = [\"limit.exceeded\", \"message.published\"]\nmax_in_flight = 1"
        )
    );
    let b = Broker::start(&cfg);
    let _kept = b.client("capped").await;
    for _ in 0..3 {
        let refused = b.try_connect(&b.token("capped")).await;
        assert_eq!(refused.err().map(|r| r.0), Some(429));
    }
    b.publish_http("doc:1", json!("marker")).await;
    let first = rx.next().await;
    assert_eq!(first.body["type"], "limit.exceeded");
    assert_eq!(
        first.body["data"],
        json!({"account":"capped","reason":"too_many_connections"})
    );
    // Events go out in order: the marker comes right after the one event.
    assert_eq!(rx.next().await.body["type"], "message.published");
}

#[tokio::test]
async fn reload_adds_removes_and_repaces_endpoints_without_a_restart() {
    let mut a = Receiver::start(|_| Reply::Hang);
    let mut c = Receiver::accepting();
    let b = Broker::start(&hook("a", &a.url, "max_in_flight = 1\ntimeout_ms = 60000"));
    b.publish_http("doc:1", json!(0)).await;
    a.next().await;
    b.publish_http("doc:1", json!(1)).await;
    b.publish_http("doc:1", json!(2)).await;
    assert_eq!(
        b.metric("tidegate_webhook_queue{endpoint=\"a\"}").await,
        2.0
    );

    // Only pacing changes: the two pending events are kept.
    let repaced = hook("a", &a.url, "max_in_flight = 3\ntimeout_ms = 60000");
    b.node.reload(config(&repaced)).unwrap();
    let mut ns: Vec<_> = vec![a.next().await, a.next().await]
        .into_iter()
        .map(|g| g.body["data"]["data"].as_u64().unwrap())
        .collect();
    ns.sort();
    assert_eq!(ns, [1, 2]);

    // Added: c starts receiving; removed: a gets nothing more.
    b.node.reload(config(&hook("c", &c.url, ""))).unwrap();
    b.publish_http("doc:1", json!(3)).await;
    assert_eq!(c.next().await.body["data"]["data"], 3);
    assert!(a.drain().is_empty());
    let metrics = b.metrics().await;
    assert!(
        !metrics.contains("tidegate_webhook_queue{endpoint=\"a\"}"),
        "{metrics}"
    );
}
