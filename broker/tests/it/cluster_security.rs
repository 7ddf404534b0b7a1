//! The cluster's credentials: a `rediss://` bridge to a Redis that speaks
//! TLS only (`redis-server --tls-port`, certificates the test makes), and
//! control messages that only a node holding `cluster.secret` can send:
//! a forged ban, disconnect or breach published straight into Redis is
//! ignored and counted, while a real operator action still applies on
//! every node.

use serde_json::json;

use crate::certs::{TempDir, TestCa};
use crate::cluster::{bridge_up, node, prefix, subscribed};
use crate::redis_server::RedisServer;
use crate::webhooks::metric_at_least;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_share_a_tls_only_redis_over_rediss() {
    let dir = TempDir::new("rediss");
    let ca = TestCa::new();
    let (cert, key) = ca.write_leaf(&dir.0, "redis");
    let ca_file = ca.write(&dir.0);
    let redis = RedisServer::start_tls(cert, key, ca_file.clone());
    assert!(redis.url().starts_with("rediss://"));
    let p = prefix();
    let extra = format!("redis_ca_file = {ca_file:?}\n");
    let a = node(&redis, "a", &p, &extra);
    let b = node(&redis, "b", &p, &extra);
    bridge_up(&a, true).await;
    bridge_up(&b, true).await;
    let mut sub = subscribed(&a, "acme", "doc:tls").await;
    assert_eq!(
        b.publish_http("doc:tls", json!("across")).await.status(),
        200
    );
    let m = sub.until(|f| f["type"] == "message").await;
    assert_eq!(
        m["data"], "across",
        "delivered from the other node through rediss://"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_certificate_from_an_unknown_ca_is_refused() {
    let dir = TempDir::new("rediss-untrusted");
    let ca = TestCa::new();
    let (cert, key) = ca.write_leaf(&dir.0, "redis");
    let redis = RedisServer::start_tls(cert, key, ca.write(&dir.0));
    let connect = |ca_file: std::path::PathBuf| {
        let mut cluster = tidegate::config::Config::embedded().cluster.clone();
        cluster.redis_url = redis.url();
        cluster.redis_ca_file = ca_file.display().to_string();
        let target = tidegate::cluster::redis::RedisTarget::open(&cluster).unwrap();
        async move {
            let mut conn = target.client.get_multiplexed_async_connection().await?;
            redis::cmd("PING").query_async::<String>(&mut conn).await
        }
    };
    assert_eq!(connect(ca.write(&dir.0)).await.unwrap(), "PONG");
    let stranger = TempDir::new("rediss-stranger");
    let refused = connect(TestCa::new().write(&stranger.0)).await;
    assert!(
        refused.is_err(),
        "a certificate from an unknown CA was accepted"
    );
}

/// Publishes `message` on the cluster's control topic as any client of the
/// Redis could.
fn publish_control(redis: &RedisServer, prefix: &str, message: &str) {
    let client = redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_connection().unwrap();
    let _: i64 = redis::cmd("PUBLISH")
        .arg(format!("{prefix}ctl"))
        .arg(message)
        .query(&mut conn)
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_control_messages_are_ignored_and_counted() {
    let redis = RedisServer::start();
    let p = prefix();
    let admin = crate::admin::admin_config();
    let a = node(&redis, "a", &p, &format!("\n{admin}"));
    let b = node(&redis, "b", &p, &format!("\n{admin}"));
    bridge_up(&a, true).await;
    bridge_up(&b, true).await;
    let mut victim = subscribed(&a, "victim", "doc:1").await;

    // What an attacker with PUBLISH on this Redis would send: a disconnect
    // and a ban as the nodes used to send them, an account breach, and a
    // message in the signed format with a made-up signature.
    let disconnect =
        json!({"from": 1, "action": {"op": "disconnect", "who": {"account": "victim"}}});
    let ban = json!({"from": 1, "action": {"op": "ban", "target": {"account": "victim"}, "expires_at": u64::MAX}});
    publish_control(&redis, &p, &format!("admin:{disconnect}"));
    publish_control(&redis, &p, &format!("admin:{ban}"));
    publish_control(&redis, &p, "breach:victim");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    publish_control(
        &redis,
        &p,
        &format!(
            "tg1:{now}:0123456789abcdef:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA:admin:{disconnect}"
        ),
    );
    metric_at_least(
        &a,
        "tidegate_cluster_control_rejected_total{reason=\"unsigned\"}",
        3.0,
    )
    .await;
    metric_at_least(
        &a,
        "tidegate_cluster_control_rejected_total{reason=\"bad_signature\"}",
        1.0,
    )
    .await;
    // The socket is still open, served, and the account is not banned.
    let answer = victim.call(json!({"type":"budget"}), 7).await;
    assert_eq!(answer["type"], "budget", "{answer}");
    assert!(a.node.admin.bans.list().is_empty(), "a forged ban applied");

    // A real operator action on node b, signed by it, applies on node a.
    let resp = reqwest::Client::new()
        .post(b.url("/v1/admin/disconnect"))
        .bearer_auth(crate::admin::ADMIN_KEY)
        .json(&json!({"account": "victim"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(victim.closed().await, Some(4003));
    assert_eq!(
        a.metric("tidegate_cluster_control_rejected_total{reason=\"replayed\"}")
            .await,
        0.0
    );
}
