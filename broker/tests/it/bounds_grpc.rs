//! Issue 26, the gRPC listener: a connection cap, a per-address cap and a
//! handshake deadline, so silent connections cannot hold the node's
//! descriptors; refused messages are charged.

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use crate::common::{API_KEY, Broker, PATIENCE};
use crate::grpc::{authed, connect, msg};

/// Waits for the server to end `s`; how many bytes it sent first.
async fn closed(s: &mut TcpStream) -> usize {
    let mut buf = [0u8; 256];
    let mut n = 0;
    loop {
        match tokio::time::timeout(PATIENCE, s.read(&mut buf))
            .await
            .expect("the silent connection was never closed")
        {
            Ok(0) | Err(_) => return n,
            Ok(k) => n += k,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_grpc_connections_are_closed_and_the_cap_refuses_one_past_it() {
    let b = Broker::start(
        "[grpc]\nhandshake_timeout_ms = 2000\nmax_connections = 201\nip_max_connections = 1000\n",
    );
    // 200 connections that never send the HTTP/2 preface.
    let mut silent = Vec::new();
    for _ in 0..200 {
        silent.push(TcpStream::connect(b.grpc_addr).await.unwrap());
    }
    // A real client takes the last place and works.
    let mut client = connect(&b).await;
    let reply = client
        .publish(authed(msg("doc:1", "1", "a"), API_KEY))
        .await
        .expect("the legit client publishes");
    assert_eq!(reply.into_inner().id, "a");
    // One past the cap is closed at the accept.
    let mut extra = TcpStream::connect(b.grpc_addr).await.unwrap();
    assert_eq!(closed(&mut extra).await, 0);
    assert_eq!(
        b.metric("tidegate_rejections_total{layer=\"grpc\",reason=\"too_many_connections\"}")
            .await,
        1.0
    );
    // Every silent connection is closed (past the handshake deadline),
    // never answered.
    for s in &mut silent {
        assert_eq!(closed(s).await, 0);
    }
    assert_eq!(
        b.metric("tidegate_rejections_total{layer=\"grpc\",reason=\"handshake_timeout\"}")
            .await,
        200.0
    );
    // The places are given back: the client still works, and new ones connect.
    client
        .publish(authed(msg("doc:1", "2", "b"), API_KEY))
        .await
        .expect("still publishing");
    let mut again = connect(&b).await;
    again
        .publish(authed(msg("doc:1", "3", "c"), API_KEY))
        .await
        .expect("a new client publishes");
}

#[tokio::test]
async fn grpc_connections_from_one_address_are_capped() {
    let b = Broker::start("[grpc]\nip_max_connections = 2\n");
    let _a = TcpStream::connect(b.grpc_addr).await.unwrap();
    let _b = TcpStream::connect(b.grpc_addr).await.unwrap();
    let mut third = TcpStream::connect(b.grpc_addr).await.unwrap();
    assert_eq!(closed(&mut third).await, 0);
    assert_eq!(
        b.metric("tidegate_rejections_total{layer=\"grpc\",reason=\"ip_too_many_connections\"}")
            .await,
        1.0
    );
}

#[tokio::test]
async fn refused_grpc_messages_are_charged_to_the_key() {
    // A bucket of 3: three refused messages empty it.
    let b = Broker::start(
        "[plans.free]\naccount_burst = 3\naccount_messages_per_sec = 0.001\naccount_sample_every = 1\n",
    );
    let mut client = connect(&b).await;
    for i in 0..3 {
        let refused = client
            .publish(authed(msg("doc:1", "{not json", &i.to_string()), API_KEY))
            .await
            .unwrap_err();
        assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    }
    let limited = client
        .publish(authed(msg("doc:1", "1", "ok"), API_KEY))
        .await
        .unwrap_err();
    assert_eq!(
        limited.code(),
        tonic::Code::ResourceExhausted,
        "{limited:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_connection_with_no_call_open_is_closed_when_idle() {
    use tidegate::grpc::proto::subscribe_event::Event;
    let b = Broker::start("[grpc]\nidle_timeout_ms = 300\n");
    // A: a Subscribe stream stays open, with nothing flowing.
    let mut a = connect(&b).await;
    let mut events = a
        .subscribe(authed(
            crate::grpc::subscribe_req(&[("doc:idle", None)]),
            API_KEY,
        ))
        .await
        .unwrap()
        .into_inner();
    match crate::grpc_subscribe::next(&mut events).await.unwrap() {
        Some(Event::Ack(_)) => {}
        other => panic!("{other:?}"),
    }
    // B: one call, then nothing: its connection is closed as idle.
    let mut idle = connect(&b).await;
    idle.publish(authed(msg("doc:1", "1", "x"), API_KEY))
        .await
        .unwrap();
    let series = "tidegate_rejections_total{layer=\"grpc\",reason=\"idle_timeout\"}";
    let deadline = std::time::Instant::now() + PATIENCE;
    while b.metric(series).await < 1.0 {
        assert!(std::time::Instant::now() < deadline, "never closed as idle");
        tokio::task::yield_now().await;
    }
    assert_eq!(
        b.metric(series).await,
        1.0,
        "only the connection with no call"
    );
    // A's stream, open all along, still delivers.
    b.publish_http("doc:idle", serde_json::json!(7)).await;
    let m = crate::grpc_subscribe::next_message(&mut events).await;
    assert_eq!(m.data_json, "7");
    // B's client connects again for its next call.
    let again = idle.publish(authed(msg("doc:1", "2", "y"), API_KEY)).await;
    let again = match again {
        Err(s) if s.code() == tonic::Code::Unavailable => {
            idle.publish(authed(msg("doc:1", "2", "y"), API_KEY)).await
        }
        other => other,
    };
    assert!(again.is_ok(), "{again:?}");
}
