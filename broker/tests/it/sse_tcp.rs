//! SSE streams that take their plain TCP connection whole
//! (`socket/sse/tcp.rs`), over real sockets: the close event arrives
//! before a clean end of the connection even with client bytes never
//! read, a pipelined request after the head does not disturb the stream,
//! a trickled head (a stream's, or one that only starts like it) is still
//! cut off by the head deadline and counted, and a keep-alive
//! connection's later stream request is still served (by the HTTP
//! service's body).

use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::bounds_keepalive::healthz;
use crate::common::{Broker, PATIENCE};
use crate::faults_slowloris::{trickle, unfinished};
use crate::sse_client::{Sse, open_on, open_pipelined};
use crate::sse_stream::publish;

fn path(broker: &Broker, channels: &str) -> String {
    format!("/v1/sse?token={}&{channels}", broker.token("acme"))
}

/// Reads the `retry:` and the welcome.
async fn welcome(s: &mut Sse) {
    assert!(s.next().await.unwrap().retry.is_some(), "retry first");
    assert!(s.event().await.is("welcome"));
}

#[actix_rt::test]
async fn a_pipelined_request_is_dropped_and_the_close_comes_before_a_clean_fin() {
    let mut broker = Broker::start("");
    // A request after the stream's head, and more bytes: a stream never
    // answers them, and must not reset the connection for them.
    let mut after = b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n".to_vec();
    after.extend(std::iter::repeat_n(b'x', 16 * 1024));
    let tcp = TcpStream::connect(broker.addr).await.unwrap();
    let mut s = open_pipelined(
        tcp,
        broker.addr,
        &path(&broker, "channel=doc:1"),
        &[],
        &after,
    )
    .await
    .expect("the stream opened");
    assert_eq!(
        s.header("content-type").as_deref(),
        Some("text/event-stream")
    );
    assert_eq!(s.header("transfer-encoding").as_deref(), Some("chunked"));
    welcome(&mut s).await;
    broker.wait_sockets(1).await;
    let seq = publish(&broker, "doc:1", 1).await;
    assert_eq!(
        s.message().await,
        json!({"channel":"doc:1","seq":seq,"data":{"n":1}})
    );
    s.s.write_all(b"still talking").await.unwrap();
    broker.begin_shutdown();
    let close = s.close().await;
    assert_eq!(close["code"], 1012, "{close}");
    // The body ended with its last chunk, then the server's FIN: no
    // answer to the pipelined request, no reset.
    let mut buf = [0u8; 1024];
    let read = tokio::time::timeout(PATIENCE, s.s.read(&mut buf))
        .await
        .expect("the server closes its side");
    assert!(matches!(read, Ok(0)), "{read:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickled_stream_head_is_cut_off_by_the_head_deadline() {
    let b = Broker::start("[handshake]\nrequest_timeout_ms = 1000\nip_max_unfinished = 4\n");
    let stream = format!(
        "GET {} HTTP/1.1\r\nHost: t\r\nAccept: text/event-stream\r\n\r\n",
        path(&b, "channel=doc:1")
    );
    // A head that starts as a stream's, then is another request's.
    let other =
        "GET /v1/sseq HTTP/1.1\r\nHost: t\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    let mut cut = Vec::new();
    for head in [stream.as_str(), other] {
        let s = TcpStream::connect(b.addr).await.unwrap();
        let pace = Duration::from_millis(50);
        cut.push(tokio::spawn(trickle(s, head.as_bytes().to_vec(), pace)));
    }
    for (t, head) in cut.into_iter().zip([stream.len(), other.len()]) {
        let (answer, sent) = t.await.unwrap();
        assert!(sent < head, "the whole head went out ({sent} bytes)");
        assert!(
            answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
            "{answer}"
        );
    }
    unfinished(&b, 0).await;
    assert_eq!(
        b.metric("tidegate_rejections_total{layer=\"handshake\",reason=\"request_timeout\"}")
            .await,
        2.0
    );
    assert_eq!(b.node.sockets.len(), 0, "no stream started");
}

#[actix_rt::test]
async fn a_keep_alive_connections_later_stream_is_served_too() {
    let broker = Broker::start("");
    let mut tcp = TcpStream::connect(broker.addr).await.unwrap();
    healthz(&mut tcp).await;
    let mut s = open_on(tcp, broker.addr, &path(&broker, "channel=doc:k"), &[])
        .await
        .expect("the stream opened");
    assert_eq!(s.header("cache-control").as_deref(), Some("no-cache"));
    welcome(&mut s).await;
    broker.wait_sockets(1).await;
    let seq = publish(&broker, "doc:k", 7).await;
    assert_eq!(
        s.message().await,
        json!({"channel":"doc:k","seq":seq,"data":{"n":7}})
    );
    drop(s);
    broker.wait_sockets(0).await;
}

#[actix_rt::test]
async fn streams_refused_on_a_taken_connection_answer_then_close() {
    let broker = Broker::start("");
    let tcp = TcpStream::connect(broker.addr).await.unwrap();
    let refused = open_on(tcp, broker.addr, "/v1/sse?channel=doc:1", &[])
        .await
        .err()
        .expect("no token");
    assert_eq!(
        (refused.0, refused.1["error"].as_str()),
        (401, Some("unauthorized"))
    );
}
