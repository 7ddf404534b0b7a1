//! How presence hears Redis (its commands go over the bridge's command
//! connection, [`crate::cluster::redis::Shared`]: one Redis through a
//! reconnecting manager, or a Redis Cluster connection that sends each
//! script to the shard owning its channel's slot, following `MOVED`).
//! The events topic is classic pub/sub on either: on Redis Cluster a
//! `PUBLISH` (from the join and leave scripts, whatever shard runs them)
//! is forwarded to every shard, and the node's subscription sits on the
//! shard owning the topic's own slot, on a RESP3 cluster connection of
//! its own that carries nothing else.
//!
//! That subscription is presence's own rather than a topic on the
//! bridge's subscription connection: riding the bridge's would make the
//! bridge (a layer below) subscribe and route a topic of presence's and
//! tell presence each time its subscription is lost (presence then
//! reads partially and rewrites its members at the next renewal), in
//! both of its subscribers (one Redis's pub/sub loop, and Redis Cluster's
//! push loop with its per-slot outages). One connection (one per shard)
//! is what that would save.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use redis::cluster_async::ClusterConnection;
use redis::{ProtocolVersion, PushInfo, PushKind, Value};
use tokio::sync::mpsc;

use super::{COMMAND_TIMEOUT, RedisPresence};

/// A pause between attempts to reach the events topic again.
const RETRY: Duration = Duration::from_millis(200);

/// Follows the other nodes' joins and leaves on one Redis; a lost
/// subscription is an outage until the next renewal succeeds.
pub(super) async fn events_single(p: Arc<RedisPresence>) {
    loop {
        let connected =
            tokio::time::timeout(COMMAND_TIMEOUT * 2, p.target.client.get_async_pubsub()).await;
        if let Ok(Ok(mut pubsub)) = connected
            && pubsub.subscribe(p.topic()).await.is_ok()
        {
            let mut stream = pubsub.on_message();
            while let Some(msg) = stream.next().await {
                p.on_event(msg.get_payload_bytes());
            }
        }
        p.set_up(false);
        tokio::time::sleep(RETRY).await;
    }
}

/// The same on Redis Cluster: the subscription is (re)made after every
/// lost shard connection, since the topic's shard may be the one lost.
/// Events missed meanwhile are made up by the re-reads (`renew.rs`).
pub(super) async fn events_cluster(p: Arc<RedisPresence>) {
    // Unbounded, but drained by this task only: pushes are the events
    // topic's messages and the connection's own notices.
    let (tx, mut rx) = mpsc::unbounded_channel::<PushInfo>();
    let seeds = p.target.cluster_seeds().await;
    let client = match p
        .target
        .cluster_builder(seeds)
        .use_protocol(ProtocolVersion::RESP3)
        .connection_timeout(COMMAND_TIMEOUT)
        .response_timeout(COMMAND_TIMEOUT)
        .retries(1)
        .push_sender(tx)
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "presence: cannot set up the Redis Cluster subscription");
            return;
        }
    };
    let conn = loop {
        match tokio::time::timeout(COMMAND_TIMEOUT * 2, client.get_async_connection()).await {
            Ok(Ok(c)) => break c,
            _ => tokio::time::sleep(RETRY).await,
        }
    };
    subscribe(&p, &conn).await;
    while let Some(push) = rx.recv().await {
        match push.kind {
            PushKind::Disconnection => subscribe(&p, &conn).await,
            PushKind::Message => {
                if let [Value::BulkString(_), Value::BulkString(payload)] = push.data.as_slice() {
                    p.on_event(payload);
                }
            }
            _ => {}
        }
    }
}

/// Subscribes to the events topic, trying until its shard answers.
async fn subscribe(p: &RedisPresence, conn: &ClusterConnection) {
    loop {
        let done = tokio::time::timeout(COMMAND_TIMEOUT, conn.clone().subscribe(p.topic())).await;
        if matches!(done, Ok(Ok(()))) {
            return;
        }
        // Not an outage of presence (the scripts may still run on their
        // shards): reads stay whole and the re-reads bring the news.
        tokio::time::sleep(RETRY).await;
    }
}
