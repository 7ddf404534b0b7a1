//! §15's protection of the backend: the client pays before the call, the
//! hook's pacing bucket, single flight, the cache and the breaker.

use serde_json::json;

use crate::common::{Broker, PATIENCE};
use crate::hooks_backend::{Backend, Reply};

fn hooked(backend: &Backend, extra: &str) -> Broker {
    Broker::start(&backend.hook(&format!(
        "events = [\"subscribe\"]\nchannels = [\"doc:*\"]\n{extra}"
    )))
}

async fn wait_for(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + PATIENCE;
    while !ok() {
        assert!(std::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

#[actix_rt::test]
async fn an_empty_bucket_never_reaches_the_backend() {
    let backend = Backend::start(|_| Reply::ok());
    let broker = hooked(
        &backend,
        "[plans.free]\nburst = 2\nmessages_per_sec = 0.001\n[plans.free.costs]\nmax_single = 2",
    );
    let mut c = broker.client("u1").await;
    for i in 1..=5 {
        c.send(json!({"type": "subscribe", "channel": format!("doc:{i}"), "id": i}))
            .await;
    }
    // Two paid and asked; three dropped by the connection's own bucket
    // (told in `rate_limited` notices, at most one a second).
    let (mut acks, mut dropped) = (0, 0);
    while acks < 2 || dropped < 3 {
        let f = c.next_json().await;
        match f["type"].as_str() {
            Some("ack") => acks += 1,
            _ => {
                assert_eq!(f["code"], "rate_limited", "{f}");
                dropped += f["dropped"].as_u64().unwrap();
            }
        }
    }
    assert_eq!((acks, dropped), (2, 3));
    assert_eq!(backend.calls(), 2, "only what was paid for was asked");
}

#[actix_rt::test]
async fn the_backend_never_sees_more_than_the_hooks_burst() {
    let backend = Backend::start(|_| Reply::ok());
    let broker = hooked(
        &backend,
        "burst = 3\nrate_per_sec = 0.001\ntimeout_ms = 200\nbreaker_failures = 100",
    );
    let mut c = broker.client("u1").await;
    for i in 1..=10 {
        c.send(json!({"type": "subscribe", "channel": format!("doc:{i}"), "id": i}))
            .await;
    }
    let mut acks = 0;
    let mut shed = 0;
    for _ in 0..10 {
        let f = c.until(|f| f["id"].is_number()).await;
        match f["type"].as_str() {
            Some("ack") => acks += 1,
            _ => {
                assert_eq!(f["code"], "hook_unavailable", "{f}");
                shed += 1;
            }
        }
    }
    assert_eq!((acks, shed), (3, 7));
    assert_eq!(backend.calls(), 3);
    assert_eq!(
        broker.node.metrics.hooks.calls("app", "subscribe", "shed"),
        7
    );
}

#[actix_rt::test]
async fn identical_calls_in_flight_are_made_once() {
    let backend = Backend::start(|_| Reply::ok());
    backend.close_gate();
    let broker = hooked(&backend, "timeout_ms = 10000");
    let mut clients = Vec::new();
    for _ in 0..5 {
        clients.push(broker.client("u1").await);
    }
    for c in &mut clients {
        c.send(json!({"type": "subscribe", "channel": "doc:1", "id": 1}))
            .await;
    }
    let hooks = broker.node.metrics.hooks.clone();
    wait_for("four calls joined the first", || {
        hooks.calls("app", "subscribe", "shared") == 4
    })
    .await;
    backend.open();
    for c in &mut clients {
        assert_eq!(c.until(|f| f["id"] == 1).await["type"], "ack");
    }
    assert_eq!(backend.calls(), 1);
}

#[actix_rt::test]
async fn cached_answers_are_reused_allowed_or_refused() {
    let mut backend = Backend::start(|v| {
        if v["channel"] == "doc:no" {
            Reply::error("not_member")
        } else {
            Reply::ok()
        }
    });
    let broker = hooked(&backend, "cache_ms = 600000");
    let mut a = broker.client("u1").await;
    let mut b = broker.client("u1").await;
    for c in [&mut a, &mut b] {
        assert_eq!(
            c.call(json!({"type": "subscribe", "channel": "doc:1"}), 1)
                .await["type"],
            "ack"
        );
        assert_eq!(
            c.call(json!({"type": "subscribe", "channel": "doc:no"}), 2)
                .await["code"],
            "not_member"
        );
    }
    backend.call().await;
    backend.call().await;
    assert_eq!(backend.calls(), 2, "one call per distinct decision");
    assert_eq!(
        broker
            .node
            .metrics
            .hooks
            .calls("app", "subscribe", "cached"),
        2
    );
    let mut other = broker.client("u2").await;
    other
        .call(json!({"type": "subscribe", "channel": "doc:1"}), 3)
        .await;
    assert_eq!(backend.calls(), 3, "another user is another decision");
}

#[actix_rt::test]
async fn the_breaker_opens_stops_calls_then_probes() {
    let backend = Backend::start(|_| Reply::Status(500));
    let broker = hooked(&backend, "breaker_failures = 3\nbreaker_open_ms = 300");
    let mut c = broker.client("u1").await;
    for i in 1..=5 {
        let e = c
            .call(
                json!({"type": "subscribe", "channel": format!("doc:{i}")}),
                i,
            )
            .await;
        assert_eq!(e["code"], "hook_unavailable", "{e}");
    }
    assert_eq!(backend.calls(), 3, "open after 3 failures: no more calls");
    assert_eq!(
        broker
            .metric("tidegate_hook_breaker_open{hook=\"app\"}")
            .await,
        1.0
    );
    assert_eq!(
        broker.node.metrics.hooks.calls("app", "subscribe", "shed"),
        2
    );
    backend.answer(|_| Reply::ok());
    // Once open_ms has passed, one call probes; its answer closes it.
    let mut i = 100;
    loop {
        i += 1;
        let f = c
            .call(
                json!({"type": "subscribe", "channel": format!("doc:{i}")}),
                i,
            )
            .await;
        if f["type"] == "ack" {
            break;
        }
        assert_eq!(backend.calls(), 3, "no call while open");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(backend.calls(), 4, "one probe");
    assert_eq!(
        broker
            .metric("tidegate_hook_breaker_open{hook=\"app\"}")
            .await,
        0.0
    );
}
