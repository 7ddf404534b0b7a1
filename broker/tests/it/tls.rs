//! TLS on both listeners (`[node]` and `[grpc]` `tls_cert_file` /
//! `tls_key_file`): real TLS clients of each protocol (reqwest, a
//! WebSocket over tokio-rustls, tonic) against certificates the test makes,
//! and a renewed certificate picked up on SIGHUP without a restart.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use tidegate::grpc::proto::broker_client::BrokerClient;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};

use crate::certs::{TempDir, TestCa};
use crate::common::{API_KEY, Broker, PATIENCE};
use crate::grpc::{authed, msg};

fn tls_config(cert: &std::path::Path, key: &std::path::Path) -> String {
    format!(
        "[node]\ntls_cert_file = {cert:?}\ntls_key_file = {key:?}\n\
         [grpc]\ntls_cert_file = {cert:?}\ntls_key_file = {key:?}\n"
    )
}

/// A TLS connection to `addr` verified with `client`'s roots, and the
/// leaf certificate the server presented.
pub async fn tls_to(
    addr: std::net::SocketAddr,
    client: Arc<rustls::ClientConfig>,
) -> (
    tokio_rustls::client::TlsStream<TcpStream>,
    CertificateDer<'static>,
) {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let tls = tokio::time::timeout(PATIENCE, TlsConnector::from(client).connect(name, tcp))
        .await
        .unwrap()
        .unwrap();
    let leaf = tls.get_ref().1.peer_certificates().unwrap()[0]
        .clone()
        .into_owned();
    (tls, leaf)
}

/// `wss://` with the token in the subprotocol: the welcome frame.
async fn welcome_over_tls(
    addr: std::net::SocketAddr,
    client: Arc<rustls::ClientConfig>,
    token: &str,
) -> (
    tokio_tungstenite::WebSocketStream<tokio_rustls::client::TlsStream<TcpStream>>,
    Value,
) {
    let (tls, _) = tls_to(addr, client).await;
    let mut req = format!("wss://localhost:{}/v1/ws", addr.port())
        .into_client_request()
        .unwrap();
    req.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        format!("tidegate.v1, bearer.{token}").parse().unwrap(),
    );
    let (mut ws, _) = tokio_tungstenite::client_async(req, tls).await.unwrap();
    let welcome = loop {
        match tokio::time::timeout(PATIENCE, ws.next()).await.unwrap() {
            Some(Ok(Message::Text(t))) => break serde_json::from_str::<Value>(&t).unwrap(),
            Some(Ok(_)) => continue,
            other => panic!("no welcome over TLS: {other:?}"),
        }
    };
    (ws, welcome)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_wss_and_grpc_over_tls_with_the_configured_certificate() {
    let dir = TempDir::new("tls");
    let ca = TestCa::new();
    let (cert, key) = ca.write_leaf(&dir.0, "node");
    let broker = Broker::start(&tls_config(&cert, &key));

    // HTTPS: the operations endpoints and a publish.
    let http = ca.http();
    let health = http
        .get(format!("https://localhost:{}/healthz", broker.addr.port()))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    let published = http
        .post(format!(
            "https://localhost:{}/v1/publish",
            broker.addr.port()
        ))
        .bearer_auth(API_KEY)
        .json(&json!({"channel": "doc:1", "data": {"over": "tls"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(published.status(), 200);
    // A plaintext request to the TLS port gets no HTTP answer.
    assert!(reqwest::get(broker.url("/healthz")).await.is_err());
    // A client that does not trust the CA refuses the certificate.
    let stranger = TestCa::new();
    let tcp = TcpStream::connect(broker.addr).await.unwrap();
    let refused = TlsConnector::from(stranger.client())
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await;
    assert!(refused.is_err(), "an unknown CA's client must not connect");

    // wss://: the handshake layers and the socket as on plaintext.
    let (_ws, welcome) = welcome_over_tls(broker.addr, ca.client(), &broker.token("acme")).await;
    assert_eq!(welcome["type"], "welcome", "{welcome}");
    assert_eq!(welcome["account"], "acme");

    // gRPC over TLS (HTTP/2 with ALPN h2), with tonic's own TLS client.
    let endpoint = Endpoint::from_shared(format!("https://localhost:{}", broker.grpc_addr.port()))
        .unwrap()
        .tls_config(
            ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(&ca.pem))
                .domain_name("localhost"),
        )
        .unwrap();
    let channel = tokio::time::timeout(PATIENCE, endpoint.connect())
        .await
        .unwrap()
        .unwrap();
    let reply = BrokerClient::new(channel)
        .publish(authed(msg("doc:1", "{\"via\":\"grpc\"}", "g1"), API_KEY))
        .await
        .unwrap()
        .into_inner();
    assert!(reply.seq > 0, "{reply:?}");
    // Plaintext HTTP/2 to the TLS port does not get through.
    let plain = Endpoint::from_shared(format!("http://{}", broker.grpc_addr))
        .unwrap()
        .connect_timeout(Duration::from_secs(2));
    let plain = match tokio::time::timeout(PATIENCE, plain.connect())
        .await
        .unwrap()
    {
        Ok(ch) => BrokerClient::new(ch)
            .publish(authed(msg("doc:1", "1", "p"), API_KEY))
            .await
            .is_ok(),
        Err(_) => false,
    };
    assert!(!plain, "a plaintext gRPC call reached a TLS listener");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_certificate_is_served_after_sighup_and_open_sockets_stay() {
    let dir = TempDir::new("tls-reload");
    let ca = TestCa::new();
    let (cert, key) = ca.write_leaf(&dir.0, "node");
    let pair = format!("tls_cert_file = {cert:?}\ntls_key_file = {key:?}\n");
    let empty = "tls_cert_file = \"\"\ntls_key_file = \"\"\n";
    // The shipped file with both listeners ([node], then [grpc]) on TLS.
    let config = crate::process::shipped(&[(empty, &pair), (empty, &pair)]);
    let p = crate::process::Proc::start(&config).await;
    let addr = p.addr();
    let (first, token) = (tls_to(addr, ca.client()).await.1, p.token("acme"));
    let (mut open, welcome) = welcome_over_tls(addr, ca.client(), &token).await;
    assert_eq!(welcome["type"], "welcome");

    // Renewed in place (write then rename, as certbot does), then SIGHUP.
    let (new_cert, new_key) = ca.write_leaf(&dir.0, "renewed");
    std::fs::rename(&new_key, &key).unwrap();
    std::fs::rename(&new_cert, &cert).unwrap();
    p.signal("-HUP");
    let deadline = Instant::now() + PATIENCE;
    loop {
        let (_, served) = tls_to(addr, ca.client()).await;
        if served != first {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the renewed certificate was never served"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The socket opened before the renewal is still served.
    use futures_util::SinkExt;
    open.send(Message::text(json!({"type":"budget","id":7}).to_string()))
        .await
        .unwrap();
    let answer = loop {
        match tokio::time::timeout(PATIENCE, open.next()).await.unwrap() {
            Some(Ok(Message::Text(t))) => {
                let v: Value = serde_json::from_str(&t).unwrap();
                if v["id"] == 7 {
                    break v;
                }
            }
            Some(Ok(_)) => continue,
            other => panic!("the open socket was dropped by the reload: {other:?}"),
        }
    };
    assert_eq!(answer["type"], "budget");
    let metrics = ca
        .http()
        .get(format!("{}/metrics", p.url()))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("tidegate_config_reloads_total{outcome=\"applied\"}"),
        "{metrics}"
    );
}
