//! https webhook receivers (rustls, verified with the endpoint's
//! `ca_file`) and Standard Webhooks secrets (`whsec_<base64>`: the key is
//! the decoded bytes). The SDK's tree has the `standardwebhooks` npm
//! package verify a real delivery too (client-sdk-ts/test/integration/
//! webhooks.test.ts).

use std::sync::Arc;

use base64::Engine;
use serde_json::json;
use tidegate::webhook::sign;

use crate::certs::{TempDir, TestCa};
use crate::common::Broker;
use crate::receiver::{Receiver, Reply};
use crate::webhooks::metric_at_least;

/// An https receiver with a certificate from `ca`.
fn https_receiver(ca: &TestCa, dir: &TempDir) -> Receiver {
    let (cert, key) = ca.write_leaf(&dir.0, "receiver");
    let store = tidegate::tls::CertStore::load(&cert, &key).unwrap();
    let tls = tidegate::tls::server_config(Arc::new(store), &[]);
    Receiver::start_tls(|_| Reply::ok(), tls)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_receiver_gets_deliveries_signed_with_the_decoded_whsec_key() {
    let dir = TempDir::new("webhooks-tls");
    let ca = TestCa::new();
    let mut rx = https_receiver(&ca, &dir);
    assert!(rx.url.starts_with("https://"));
    let key = b"the-decoded-key-of-a-whsec-secret!!";
    let secret = format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(key)
    );
    let b = Broker::start(&format!(
        "[[webhooks]]\nid = \"tls\"\nurl = \"{}\"\nca_file = {:?}\nsecret = \"{secret}\"\nevents = [\"message.published\"]\n",
        rx.url,
        ca.write(&dir.0)
    ));
    assert_eq!(b.publish_http("doc:1", json!({"n": 1})).await.status(), 200);
    let got = rx.next().await;
    assert_eq!(got.body["data"]["channel"], "doc:1");
    assert!(
        sign::verify(key, &got.signature, &got.id, got.timestamp, &got.raw),
        "signed with the decoded bytes"
    );
    assert!(
        !sign::verify(
            secret.as_bytes(),
            &got.signature,
            &got.id,
            got.timestamp,
            &got.raw
        ),
        "not with the secret's text"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_receiver_the_endpoint_does_not_trust_gets_nothing() {
    let dir = TempDir::new("webhooks-untrusted");
    let mut rx = https_receiver(&TestCa::new(), &dir);
    let other = TempDir::new("webhooks-other-ca");
    let b = Broker::start(&format!(
        "[[webhooks]]\nid = \"untrusted\"\nurl = \"{}\"\nca_file = {:?}\nsecret = \"{}\"\nevents = [\"message.published\"]\nbackoff_base_ms = 50\nbackoff_max_ms = 100\n",
        rx.url,
        TestCa::new().write(&other.0),
        crate::webhooks::SECRET,
    ));
    assert_eq!(b.publish_http("doc:1", json!({"n": 1})).await.status(), 200);
    metric_at_least(
        &b,
        "tidegate_webhook_deliveries_total{endpoint=\"untrusted\",outcome=\"retry\"}",
        2.0,
    )
    .await;
    assert!(
        rx.drain().is_empty(),
        "a request got through an untrusted TLS connection"
    );
}
