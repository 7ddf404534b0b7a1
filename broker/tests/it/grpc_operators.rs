//! §10 on open gRPC streams: an operator's ban of the stream's account or
//! address ends an open `Subscribe` or `PublishStream` with
//! `PERMISSION_DENIED` `banned` (the remaining time in `retry-after-ms`), a
//! disconnect of the account with `ABORTED` `disconnected`; other accounts'
//! streams keep going.

use serde_json::json;
use tidegate::grpc::proto::subscribe_event::Event;
use tidegate::grpc::proto::{
    PublishReply, PublishRequest, SubscribeEvent, broker_client::BrokerClient,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::{Code, Status, Streaming};

use crate::admin::{admin_config, ban, disconnect};
use crate::common::{API_KEY, Broker, PATIENCE};
use crate::grpc::{authed, connect, md, msg, reason, subscribe_req};
use crate::grpc_subscribe::{next, next_message};

/// A key of another account, to show its stream is left alone.
const OTHER_KEY: &str = "other-account-key-0123456789";

fn config() -> String {
    format!(
        "{}[[api_keys]]\nkey = \"{API_KEY}\"\naccount = \"acme\"\npub_channels = [\"*\"]\nsub_channels = [\"*\"]\n\
         [[api_keys]]\nkey = \"{OTHER_KEY}\"\naccount = \"globex\"\npub_channels = [\"*\"]\nsub_channels = [\"*\"]\n",
        admin_config()
    )
}

async fn open(c: &mut BrokerClient<Channel>, key: &str) -> Streaming<SubscribeEvent> {
    let mut s = c
        .subscribe(authed(subscribe_req(&[("doc:d", None)]), key))
        .await
        .unwrap()
        .into_inner();
    assert!(matches!(next(&mut s).await, Ok(Some(Event::Ack(_)))));
    s
}

/// The status the stream ends with, skipping messages before it.
async fn ended(s: &mut Streaming<SubscribeEvent>) -> Status {
    loop {
        match next(s).await {
            Ok(Some(Event::Message(_))) => {}
            Ok(other) => panic!("expected the end, got {other:?}"),
            Err(status) => return status,
        }
    }
}

/// The other account's stream still gets what is published.
async fn still_live(c: &mut BrokerClient<Channel>, s: &mut Streaming<SubscribeEvent>) {
    let seq = c
        .publish(authed(msg("doc:d", "1", "after"), OTHER_KEY))
        .await
        .unwrap()
        .into_inner()
        .seq;
    assert_eq!(next_message(s).await.seq, seq);
}

#[tokio::test]
async fn a_ban_of_the_account_ends_its_open_subscribe_with_permission_denied() {
    let b = Broker::start(&config());
    let mut c = connect(&b).await;
    let mut banned = open(&mut c, API_KEY).await;
    let mut other = open(&mut c, OTHER_KEY).await;

    let answer = ban(&b, json!({"account": "acme", "ttlMs": 60_000})).await;
    assert_eq!(answer["closed"], 1, "{answer}");
    let s = ended(&mut banned).await;
    assert_eq!(s.code(), Code::PermissionDenied, "{s:?}");
    assert_eq!(reason(&s), "banned");
    let ms = md(s.metadata(), "retry-after-ms");
    assert!(ms > 0 && ms <= 60_000, "{ms}");

    let again = c
        .subscribe(authed(subscribe_req(&[("doc:d", None)]), API_KEY))
        .await
        .unwrap_err();
    assert_eq!(again.code(), Code::PermissionDenied);
    still_live(&mut c, &mut other).await;
}

#[tokio::test]
async fn a_ban_of_the_address_ends_every_account_streaming_from_it() {
    let b = Broker::start(&config());
    let mut c = connect(&b).await;
    let mut first = open(&mut c, API_KEY).await;
    let mut second = open(&mut c, OTHER_KEY).await;

    let answer = ban(&b, json!({"ip": "127.0.0.1", "ttlMs": 60_000})).await;
    assert_eq!(answer["closed"], 2, "{answer}");
    for s in [&mut first, &mut second] {
        let s = ended(s).await;
        assert_eq!(s.code(), Code::PermissionDenied, "{s:?}");
        assert_eq!(reason(&s), "banned");
    }
}

#[tokio::test]
async fn a_disconnect_of_the_account_ends_its_stream_with_aborted_and_allows_a_new_one() {
    let b = Broker::start(&config());
    let mut c = connect(&b).await;
    let mut cut = open(&mut c, API_KEY).await;
    let mut other = open(&mut c, OTHER_KEY).await;

    let answer = disconnect(&b, json!({"account": "acme"})).await;
    assert_eq!(answer["closed"], 1, "{answer}");
    let s = ended(&mut cut).await;
    assert_eq!(s.code(), Code::Aborted, "{s:?}");
    assert_eq!(reason(&s), "disconnected");

    // Not a ban: the account may subscribe again at once.
    let mut back = open(&mut c, API_KEY).await;
    let seq = c
        .publish(authed(msg("doc:d", "2", "back"), API_KEY))
        .await
        .unwrap()
        .into_inner()
        .seq;
    assert_eq!(next_message(&mut back).await.seq, seq);
    assert_eq!(next_message(&mut other).await.seq, seq);
    // The stream left the hub: only the two live streams remain registered.
    assert_eq!(b.node.grpc_streams.len(), 2);
}

/// An open `PublishStream` of `key`: its sender and its replies.
struct Publisher {
    tx: mpsc::Sender<PublishRequest>,
    replies: Streaming<PublishReply>,
}

impl Publisher {
    async fn open(c: &mut BrokerClient<Channel>, key: &str) -> Publisher {
        let (tx, rx) = mpsc::channel(4);
        let replies = c
            .publish_stream(authed(ReceiverStream::new(rx), key))
            .await
            .unwrap()
            .into_inner();
        let mut p = Publisher { tx, replies };
        p.publish("first").await;
        p
    }

    /// Sends one message and returns its reply (accepted, with a `seq`).
    async fn publish(&mut self, id: &str) -> u64 {
        self.tx.send(msg("doc:d", "1", id)).await.unwrap();
        let r = tokio::time::timeout(PATIENCE, self.replies.message())
            .await
            .unwrap()
            .unwrap()
            .expect("a reply");
        assert_eq!((r.id.as_str(), r.error), (id, None));
        r.seq
    }

    /// The status the stream ends with (no reply may come before it).
    async fn ended(&mut self) -> Status {
        match tokio::time::timeout(PATIENCE, self.replies.message())
            .await
            .unwrap()
        {
            Err(s) => s,
            Ok(other) => panic!("expected the end, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_ban_of_the_account_ends_its_open_publish_stream_with_permission_denied() {
    let b = Broker::start(&config());
    let mut c = connect(&b).await;
    let mut banned = Publisher::open(&mut c, API_KEY).await;
    let mut other = Publisher::open(&mut c, OTHER_KEY).await;

    let answer = ban(&b, json!({"account": "acme", "ttlMs": 60_000})).await;
    assert_eq!(answer["closed"], 1, "{answer}");
    let s = banned.ended().await;
    assert_eq!(s.code(), Code::PermissionDenied, "{s:?}");
    assert_eq!(reason(&s), "banned");
    let ms = md(s.metadata(), "retry-after-ms");
    assert!(ms > 0 && ms <= 60_000, "{ms}");
    // Finished like any call: the units it spent and the key's balance.
    assert_eq!(md(s.metadata(), "tidegate-cost"), 1);
    assert!(s.metadata().get("ratelimit-remaining").is_some(), "{s:?}");
    assert_eq!(
        b.metric("tidegate_rejections_total{layer=\"grpc\",reason=\"banned\"}")
            .await,
        1.0
    );

    let again = c
        .publish_stream(authed(
            tokio_stream::iter([msg("doc:d", "1", "x")]),
            API_KEY,
        ))
        .await
        .unwrap_err();
    assert_eq!(again.code(), Code::PermissionDenied);
    other.publish("after").await;
    assert_eq!(b.node.grpc_streams.len(), 1);
}

#[tokio::test]
async fn a_disconnect_of_the_account_ends_its_publish_stream_with_aborted_and_allows_a_new_one() {
    let b = Broker::start(&config());
    let mut c = connect(&b).await;
    let mut cut = Publisher::open(&mut c, API_KEY).await;
    let mut other = Publisher::open(&mut c, OTHER_KEY).await;

    let answer = disconnect(&b, json!({"account": "acme"})).await;
    assert_eq!(answer["closed"], 1, "{answer}");
    let s = cut.ended().await;
    assert_eq!(s.code(), Code::Aborted, "{s:?}");
    assert_eq!(reason(&s), "disconnected");
    assert_eq!(b.node.grpc_streams.len(), 1);

    // Not a ban: the account may publish on a new stream at once.
    let mut back = Publisher::open(&mut c, API_KEY).await;
    back.publish("again").await;
    other.publish("after").await;
}
