//! Seed 003 rules (refunds, hold), seed 004 costs and dry run, skip roles,
//! and the structured exceeded events.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tidegate::auth::{Claims, unix_now};

use crate::common::{Broker, Client};

/// A publish's answer: "ack", or the error code (rate_limited answers list
/// the id in `ids`).
async fn publish(c: &mut Client, channel: &str, id: u64) -> String {
    c.send(json!({"type":"publish","channel":channel,"data":id,"id":id}))
        .await;
    let v = c
        .until(|v| {
            v["id"] == id
                || v["ids"]
                    .as_array()
                    .is_some_and(|ids| ids.contains(&json!(id)))
        })
        .await;
    match v["type"].as_str() {
        Some("ack") => "ack".into(),
        _ => v["code"].as_str().unwrap().into(),
    }
}

const TWO_RULES: &str = r#"
[[plans.free.rules]]
id = "per-user"
track_by = "account"
capacity = 5
window_ms = 60000
[[plans.free.rules]]
id = "hot-doc"
track_by = "channel"
capacity = 1
window_ms = 60000
namespace = "hot"
"#;

#[tokio::test]
async fn all_rules_must_pass_and_a_later_refusal_refunds_the_earlier_ones() {
    let broker = Broker::start(TWO_RULES);
    let mut c = broker.client("acme").await;
    let token = broker.token_with("acme", &["*"], &["*"], None);
    let mut c2 = Client::connect(&broker.ws_url(), &token).await.unwrap();
    c2.next_json().await;
    assert_eq!(publish(&mut c2, "hot:1", 1).await, "ack");
    // Refused by hot-doc three times: per-user is refunded each time.
    for id in 2..5 {
        assert_eq!(publish(&mut c2, "hot:1", id).await, "rate_limited");
    }
    // per-user has 4 left (5 - the one admitted), shared by the account.
    for id in 10..14 {
        assert_eq!(
            publish(&mut c, "doc:x", id).await,
            "ack",
            "refunds made room"
        );
    }
    assert_eq!(publish(&mut c, "doc:x", 14).await, "rate_limited");
    let text = broker.metrics().await;
    assert!(text.contains(r#"tidegate_rejections_total{layer="rule",reason="rate_limited"}"#));
}

#[tokio::test]
async fn hold_throttles_a_sequential_stream_without_loss() {
    let broker = Broker::start(
        r#"
[plans.free]
messages_per_sec = 1000
burst = 1000
account_messages_per_sec = 1000
account_burst = 1000
[[plans.free.rules]]
id = "paced"
track_by = "connection"
capacity = 5
window_ms = 100
hold_max_delay_ms = 100
"#,
    );
    let mut c = broker.client("acme").await;
    for id in 0..30u64 {
        c.send(json!({"type":"publish","channel":"doc:h","data":id,"id":id}))
            .await;
    }
    for id in 0..30u64 {
        let v = c.next_json().await;
        assert_eq!(
            (v["type"].as_str(), v["id"].as_u64()),
            (Some("ack"), Some(id)),
            "{v}"
        );
    }
}

#[tokio::test]
async fn a_wait_longer_than_the_hold_limit_drops_and_reports() {
    let broker = Broker::start(
        "[[plans.free.rules]]\nid = \"slow\"\ntrack_by = \"connection\"\ncapacity = 1\nwindow_ms = 60000\nhold_max_delay_ms = 100\n",
    );
    let mut c = broker.client("acme").await;
    assert_eq!(publish(&mut c, "doc:1", 1).await, "ack");
    assert_eq!(publish(&mut c, "doc:1", 2).await, "rate_limited");
}

#[tokio::test]
async fn an_operation_over_the_largest_charge_is_refused_without_emptying_the_bucket() {
    let broker = Broker::start("[plans.free.costs]\npublish_per_kib = 10\n");
    let mut c = broker.client("acme").await;
    let big = "x".repeat(3000);
    let e = c
        .call(json!({"type":"publish","channel":"doc:1","data":big}), 1)
        .await;
    assert_eq!(e["code"], "cost_exceeds_max");
    let message = e["message"].as_str().unwrap();
    assert!(
        message.contains("costs 31") && message.contains("max_single"),
        "{message}"
    );
    // Nothing was taken: the whole burst is still there.
    let b = c.call(json!({"type":"budget"}), 9).await;
    assert_eq!(b["connection"]["remaining"], 20, "{b}");
    assert_eq!(publish(&mut c, "doc:1", 2).await, "ack");
}

#[tokio::test]
async fn dry_run_limits_observe_and_count_without_refusing() {
    let broker = Broker::start("[plans.free]\ndry_run = [\"messages\"]\n");
    let mut c = broker.client("acme").await;
    for id in 0..60u64 {
        c.send(json!({"type":"publish","channel":"doc:d","data":id,"id":id}))
            .await;
    }
    for _ in 0..60 {
        assert_eq!(c.until(|v| v["type"] != "budget").await["type"], "ack");
    }
    let text = broker.metrics().await;
    let v = |s: &str| crate::common::metric_value(&text, s);
    assert!(
        v(r#"tidegate_dry_run_rejections_total{layer="connection",reason="rate_limited"}"#) >= 30.0
    );
    assert_eq!(
        v(r#"tidegate_rejections_total{layer="connection",reason="rate_limited"}"#),
        0.0
    );
}

#[tokio::test]
async fn service_roles_skip_the_rules() {
    let broker = Broker::start(&format!(
        "{TWO_RULES}\n[plans.free]\nskip_rules_for_roles = [\"service\"]\n"
    ));
    let token = broker.mint(Claims {
        sub: "svc".into(),
        exp: unix_now() + 60,
        plan: None,
        role: Some("service".into()),
        sub_channels: vec![],
        pub_channels: vec!["*".into()],
        info: None,
    });
    let mut c = Client::connect(&broker.ws_url(), &token).await.unwrap();
    c.next_json().await;
    for id in 0..8 {
        assert_eq!(publish(&mut c, "hot:1", id).await, "ack");
    }
}

/// Records every `tidegate::exceeded` event's fields.
#[derive(Clone, Default)]
struct Events(Arc<Mutex<Vec<Value>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Events {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if event.metadata().target() != "tidegate::exceeded" {
            return;
        }
        struct Fields(serde_json::Map<String, Value>);
        impl tracing::field::Visit for Fields {
            fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                self.0
                    .insert(f.name().into(), json!(format!("{v:?}").trim_matches('"')));
            }
            fn record_u64(&mut self, f: &tracing::field::Field, v: u64) {
                self.0.insert(f.name().into(), json!(v));
            }
            fn record_bool(&mut self, f: &tracing::field::Field, v: bool) {
                self.0.insert(f.name().into(), json!(v));
            }
            fn record_str(&mut self, f: &tracing::field::Field, v: &str) {
                self.0.insert(f.name().into(), json!(v));
            }
        }
        let mut fields = Fields(Default::default());
        event.record(&mut fields);
        self.0.lock().unwrap().push(Value::Object(fields.0));
    }
}

#[tokio::test]
async fn every_rejection_emits_one_structured_event() {
    use tracing_subscriber::layer::SubscriberExt;
    let events = Events::default();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_subscriber::filter::LevelFilter::DEBUG)
        .with(events.clone());
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let broker = Broker::start(TWO_RULES);
    let token = broker.token_with("acme", &["*"], &["*"], None);
    let mut c = Client::connect(&broker.ws_url(), &token).await.unwrap();
    c.next_json().await;
    publish(&mut c, "hot:9", 1).await;
    assert_eq!(publish(&mut c, "hot:9", 2).await, "rate_limited");
    let got = events.0.lock().unwrap().clone();
    let rule: Vec<_> = got.iter().filter(|e| e["layer"] == "rule").collect();
    assert_eq!(rule.len(), 1, "one event for one rejection: {got:?}");
    let e = rule[0];
    assert_eq!(e["rule"], "hot-doc");
    assert_eq!(e["account"], "acme");
    assert_eq!(e["channel"], "hot:9");
    assert_eq!(e["count"], 1);
    assert!(
        e["reset_ms"].as_u64().unwrap() > 50_000,
        "reset time is the next token: {e}"
    );
    assert_eq!(e["dry_run"], false);
}
