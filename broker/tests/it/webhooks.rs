//! Outbound webhooks (§9) against real HTTP receivers started by the test:
//! signatures, per-endpoint isolation, the receiver's limits (Retry-After,
//! backoff, final 4xx, 410), bounded queues, pacing and bad receivers.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use serde_json::json;
use tidegate::webhook::sign;

use crate::common::{Broker, PATIENCE};
use crate::receiver::{Receiver, Reply};

pub const SECRET: &str = "webhook-test-secret-0123456789";

/// One `[[webhooks]]` entry with quick retries, plus `extra` keys (its
/// events are `message.published` unless `extra` names them).
pub fn hook(id: &str, url: &str, extra: &str) -> String {
    let events = if extra.contains("events") {
        ""
    } else {
        "events = [\"message.published\"]\n"
    };
    format!(
        "[[webhooks]]\nid = \"{id}\"\nurl = \"{url}\"\nsecret = \"{SECRET}\"\n{events}backoff_base_ms = 50\nbackoff_max_ms = 200\n{extra}\n"
    )
}

async fn publish(b: &Broker, channel: &str, n: u64) {
    b.published(channel, json!({ "n": n })).await;
}

/// Polls `/metrics` until `series` reaches `want` (fails after PATIENCE).
pub async fn metric_at_least(b: &Broker, series: &str, want: f64) -> f64 {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let v = b.metric(series).await;
        if v >= want {
            return v;
        }
        assert!(Instant::now() < deadline, "{series} = {v}, wanted {want}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn signed_with_the_standard_webhooks_scheme_and_the_contract_body() {
    let mut rx = Receiver::accepting();
    let b = Broker::start(&hook("billing", &rx.url, "channels = [\"doc:*\"]"));
    publish(&b, "other:1", 0).await;
    publish(&b, "doc:1", 7).await;
    let got = rx.next().await;
    assert!(
        sign::verify(
            SECRET.as_bytes(),
            &got.signature,
            &got.id,
            got.timestamp,
            &got.raw
        ),
        "signature {:?} does not verify",
        got.signature
    );
    assert!(got.signature.starts_with("v1,"));
    let now = tidegate::webhook::send::unix_secs();
    assert!(got.timestamp.abs_diff(now) < 60);
    assert_eq!(got.body["id"], got.id.as_str());
    assert_eq!(got.body["type"], "message.published");
    assert_eq!(
        got.body["data"]["channel"], "doc:1",
        "other:1 is not covered"
    );
    assert_eq!(got.body["data"]["data"], json!({"n": 7}));
    assert!(got.body["data"]["seq"].as_u64().unwrap() > 0);
    metric_at_least(
        &b,
        "tidegate_webhook_deliveries_total{endpoint=\"billing\",outcome=\"delivered\"}",
        1.0,
    )
    .await;
}

#[tokio::test]
async fn rotation_signs_with_every_secret() {
    let mut rx = Receiver::accepting();
    let old = "the-old-secret-still-24-bytes";
    let cfg = format!(
        "[[webhooks]]\nid = \"r\"\nurl = \"{}\"\nsecrets = [\"{SECRET}\", \"{old}\"]\nevents = [\"message.published\"]\n",
        rx.url
    );
    let b = Broker::start(&cfg);
    publish(&b, "doc:1", 1).await;
    let got = rx.next().await;
    assert_eq!(got.signature.split(' ').count(), 2);
    for secret in [SECRET, old] {
        assert!(sign::verify(
            secret.as_bytes(),
            &got.signature,
            &got.id,
            got.timestamp,
            &got.raw
        ));
    }
}

#[tokio::test]
async fn a_hanging_and_a_failing_endpoint_do_not_hold_up_a_healthy_one() {
    let mut hanging = Receiver::start(|_| Reply::Hang);
    let mut failing = Receiver::start(|_| Reply::status(500));
    let mut healthy = Receiver::accepting();
    let cfg = [
        hook(
            "hanging",
            &hanging.url,
            "timeout_ms = 60000\nmax_in_flight = 2",
        ),
        hook("failing", &failing.url, ""),
        hook("healthy", &healthy.url, "rate_per_sec = 1000\nburst = 1000"),
    ]
    .concat();
    let b = Broker::start(&cfg);
    let n = 50;
    for i in 0..n {
        publish(&b, "doc:iso", i).await;
    }
    let mut ids = HashSet::new();
    while ids.len() < n as usize {
        ids.insert(healthy.next().await.id);
    }
    // Every event reached the healthy endpoint while the hanging one holds
    // exactly its two in-flight slots and the failing one keeps failing.
    hanging.next().await;
    hanging.next().await;
    assert!(
        hanging.drain().is_empty(),
        "more than max_in_flight requests to the hanging endpoint"
    );
    failing.next().await;
    metric_at_least(
        &b,
        "tidegate_webhook_deliveries_total{endpoint=\"failing\",outcome=\"retry\"}",
        1.0,
    )
    .await;
    assert_eq!(
        b.metric("tidegate_webhook_queue{endpoint=\"hanging\"}")
            .await,
        (n - 2) as f64
    );
}

#[tokio::test]
async fn retry_after_pauses_only_that_endpoint_and_the_retry_keeps_its_id() {
    let mut limited = Receiver::start(|_| Reply::Status(429, vec![("retry-after", "2".into())]));
    let mut other = Receiver::accepting();
    let cfg = [
        hook("limited", &limited.url, ""),
        hook("other", &other.url, ""),
    ]
    .concat();
    let b = Broker::start(&cfg);
    publish(&b, "doc:1", 1).await;
    let first = limited.next().await;
    limited.answer(|_| Reply::ok());
    // The 429 is settled (the pause recorded) before the next event exists,
    // so that event cannot go out ahead of the retry.
    metric_at_least(
        &b,
        "tidegate_webhook_deliveries_total{endpoint=\"limited\",outcome=\"paused\"}",
        1.0,
    )
    .await;
    other.next().await;
    // The other endpoint keeps receiving during the pause.
    publish(&b, "doc:1", 2).await;
    let during = other.next().await;
    let retry = limited.next().await;
    assert_eq!(retry.id, first.id, "webhook-id changed on retry");
    assert!(
        retry.at.duration_since(first.at) >= Duration::from_secs(2),
        "retried {:?} after a Retry-After of 2 s",
        retry.at.duration_since(first.at)
    );
    assert!(
        during.at < retry.at,
        "the other endpoint waited for the pause"
    );
    assert_eq!(limited.next().await.body["data"]["data"]["n"], 2);
}

/// After a pause the kept event goes out alone: the events queued behind
/// it wait until its attempt has been answered, then share the window.
#[tokio::test]
async fn after_a_pause_the_retry_goes_alone_until_it_is_delivered() {
    let hold = Duration::from_millis(400);
    let mut answers = 0;
    let mut rx = Receiver::start(move |_| {
        answers += 1;
        match answers {
            1 => Reply::Status(429, vec![("retry-after", "1".into())]),
            2 => Reply::Slow(hold),
            _ => Reply::ok(),
        }
    });
    let b = Broker::start(&hook("limited", &rx.url, "max_in_flight = 4"));
    publish(&b, "doc:1", 0).await;
    let first = rx.next().await;
    metric_at_least(
        &b,
        "tidegate_webhook_deliveries_total{endpoint=\"limited\",outcome=\"paused\"}",
        1.0,
    )
    .await;
    for n in 1..=3 {
        publish(&b, "doc:1", n).await;
    }
    let retry = rx.next().await;
    assert_eq!(
        retry.id, first.id,
        "the kept event is not the first retried"
    );
    // The three newer events are still queued while the retry is answered.
    assert_eq!(
        b.metric("tidegate_webhook_queue{endpoint=\"limited\"}")
            .await,
        3.0,
        "events went out beside the retry"
    );
    let mut rest = Vec::new();
    for _ in 0..3 {
        rest.push(rx.next().await);
    }
    for got in &rest {
        assert!(
            got.at.duration_since(retry.at) >= hold,
            "event {} went out {:?} after the retry, before it was answered",
            got.body["data"]["data"]["n"],
            got.at.duration_since(retry.at)
        );
    }
    let ns: HashSet<u64> = rest
        .iter()
        .map(|g| g.body["data"]["data"]["n"].as_u64().unwrap())
        .collect();
    assert_eq!(ns, HashSet::from([1, 2, 3]));
}

#[tokio::test]
async fn failures_back_off_and_every_event_is_delivered_by_id() {
    // Each event fails twice (500, then a malformed Retry-After), then succeeds.
    let mut seen = std::collections::HashMap::<String, u32>::new();
    let mut rx = Receiver::start(move |got| {
        let n = seen.entry(got.id.clone()).or_default();
        *n += 1;
        match *n {
            1 => Reply::status(500),
            2 => Reply::Status(503, vec![("retry-after", "soon".into())]),
            _ => Reply::ok(),
        }
    });
    let b = Broker::start(&hook("flaky", &rx.url, "max_in_flight = 1"));
    let n = 5;
    for i in 0..n {
        publish(&b, "doc:1", i).await;
    }
    let mut attempts = std::collections::HashMap::<String, Vec<Instant>>::new();
    let mut delivered = HashSet::new();
    while delivered.len() < n as usize {
        let got = rx.next().await;
        let a = attempts.entry(got.id.clone()).or_default();
        a.push(got.at);
        if a.len() == 3 {
            delivered.insert(got.body["data"]["data"]["n"].as_u64().unwrap());
        }
    }
    assert_eq!(delivered, (0..n).collect::<HashSet<_>>());
    assert!(attempts.values().all(|a| a.len() == 3), "{attempts:?}");
    let retries = b
        .metric("tidegate_webhook_deliveries_total{endpoint=\"flaky\",outcome=\"retry\"}")
        .await;
    assert_eq!(retries, (2 * n) as f64);
}

#[tokio::test]
async fn other_4xx_is_final_and_410_disables_until_the_config_changes() {
    let mut rx = Receiver::start(|got| {
        if got.body["data"]["data"]["n"] == 0 {
            Reply::status(404)
        } else {
            Reply::ok()
        }
    });
    let cfg = hook("strict", &rx.url, "max_in_flight = 1");
    let b = Broker::start(&cfg);
    publish(&b, "doc:1", 0).await;
    publish(&b, "doc:1", 1).await;
    let first = rx.next().await;
    let second = rx.next().await;
    assert_eq!(first.body["data"]["data"]["n"], 0);
    assert_eq!(
        second.body["data"]["data"]["n"], 1,
        "the 404'd event was retried"
    );
    assert_eq!(
        b.metric("tidegate_webhook_deliveries_total{endpoint=\"strict\",outcome=\"rejected\"}")
            .await,
        1.0
    );

    rx.answer(|_| Reply::status(410));
    publish(&b, "doc:1", 2).await;
    rx.next().await;
    metric_at_least(
        &b,
        "tidegate_webhook_deliveries_total{endpoint=\"strict\",outcome=\"gone\"}",
        1.0,
    )
    .await;
    publish(&b, "doc:1", 3).await;
    metric_at_least(&b, "tidegate_webhook_queue{endpoint=\"strict\"}", 1.0).await;
    assert_eq!(
        b.metric("tidegate_webhook_endpoint_healthy{endpoint=\"strict\"}")
            .await,
        0.0
    );
    assert!(rx.drain().is_empty(), "a disabled endpoint was sent to");
    // A changed entry re-enables it and the kept event goes out.
    rx.answer(|_| Reply::ok());
    let changed = crate::common::config(&hook("strict", &rx.url, "max_in_flight = 2"));
    b.node.reload(changed).unwrap();
    assert_eq!(rx.next().await.body["data"]["data"]["n"], 3);
}

#[tokio::test]
async fn a_full_queue_drops_its_oldest_and_counts_it() {
    let mut rx = Receiver::start(|_| Reply::Hang);
    let b = Broker::start(&hook(
        "small",
        &rx.url,
        "max_in_flight = 1\nqueue_max = 3\ntimeout_ms = 60000",
    ));
    publish(&b, "doc:1", 0).await;
    rx.next().await; // in flight, and hanging
    for i in 1..10 {
        publish(&b, "doc:1", i).await;
    }
    assert_eq!(
        b.metric("tidegate_webhook_queue{endpoint=\"small\"}").await,
        3.0
    );
    assert_eq!(
        b.metric("tidegate_webhook_deliveries_total{endpoint=\"small\",outcome=\"dropped\"}")
            .await,
        6.0
    );
}

#[tokio::test]
async fn pacing_holds_the_configured_rate() {
    let mut rx = Receiver::accepting();
    let (rate, burst) = (20.0, 2.0);
    let b = Broker::start(&hook("paced", &rx.url, "rate_per_sec = 20\nburst = 2"));
    let n = 20;
    for i in 0..n {
        publish(&b, "doc:1", i).await;
    }
    let mut arrivals = Vec::new();
    for _ in 0..n {
        arrivals.push(rx.next().await.at);
    }
    // A bucket of `burst` refilling at `rate` admits at most
    // burst + rate * t requests in any window of length t.
    let first = arrivals[0];
    for (i, at) in arrivals.iter().enumerate() {
        let t = at.duration_since(first).as_secs_f64();
        assert!(
            (i + 1) as f64 <= burst + rate * t + 1.0,
            "request {} arrived {t:.3}s after the first",
            i + 1
        );
    }
}
