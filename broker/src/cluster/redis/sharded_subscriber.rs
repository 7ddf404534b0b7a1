//! The subscription on Redis Cluster: one cluster connection (RESP3) whose
//! pushes carry every shard's messages. A channel is `SSUBSCRIBE`d on the
//! shard owning its slot while it has local subscribers; the control topic
//! stays classic pub/sub (Redis Cluster forwards it to every shard). The
//! connection re-subscribes by itself after a reconnection or a `MOVED`;
//! this task still treats a lost shard connection as an outage (serve
//! alone, re-sync, re-subscribe), as the single-Redis subscriber does.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::future::try_join_all;
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{ProtocolVersion, PushInfo, PushKind, Value};
use tokio::sync::mpsc;

use super::subscriber::{BATCH, backoff};
use super::{COMMAND_TIMEOUT, Conn, RedisBridge, SubCmd};
use crate::cluster::Bridge;

/// Starts the cluster connection's tasks; the future ends once the bridge
/// is first up (as `Bridge::start` promises).
pub(super) fn start(bridge: Arc<RedisBridge>) -> Pin<Box<dyn Future<Output = ()>>> {
    let (push_tx, push_rx) = mpsc::unbounded_channel::<PushInfo>();
    let client = ClusterClientBuilder::new(vec![bridge.client.get_connection_info().clone()])
        .use_protocol(ProtocolVersion::RESP3)
        .push_sender(push_tx)
        .connection_timeout(COMMAND_TIMEOUT)
        .response_timeout(COMMAND_TIMEOUT)
        .retries(1)
        .build();
    match client {
        Ok(client) => {
            if let Some(rx) = bridge.cmds_rx.lock().take() {
                actix_rt::spawn(run(bridge.clone(), client, push_rx, rx));
            }
            actix_rt::spawn(bridge.clone().lease_loop());
        }
        Err(e) => tracing::error!(error = %e, "cannot set up the Redis Cluster connection"),
    }
    let this = bridge.clone();
    actix_rt::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(10));
        loop {
            tick.tick().await;
            this.local.sweep(std::time::Instant::now());
        }
    });
    Box::pin(async move {
        while !bridge.is_up() {
            bridge.first_up.notified().await;
        }
    })
}

/// `SSUBSCRIBE`s what has local subscribers and `SUNSUBSCRIBE`s what has
/// none, one command per channel (a command may not span slots), a batch
/// at a time concurrently.
async fn apply(
    bridge: &RedisBridge,
    conn: &ClusterConnection,
    touched: Vec<Arc<str>>,
) -> redis::RedisResult<()> {
    let (add, remove): (Vec<Arc<str>>, Vec<Arc<str>>) = {
        let interest = bridge.interest.lock();
        touched.into_iter().partition(|c| interest.contains_key(c))
    };
    for chunk in add.chunks(BATCH) {
        try_join_all(chunk.iter().map(|c| {
            let (mut conn, topic) = (conn.clone(), bridge.topic(c));
            async move { conn.ssubscribe(topic).await }
        }))
        .await?;
        bridge.confirm(chunk);
    }
    for chunk in remove.chunks(BATCH) {
        try_join_all(chunk.iter().map(|c| {
            let (mut conn, topic) = (conn.clone(), bridge.topic(c));
            async move { conn.sunsubscribe(topic).await }
        }))
        .await?;
    }
    Ok(())
}

/// The topic and payload of a pushed message, if it is one.
fn message(push: &PushInfo) -> Option<(&[u8], &[u8])> {
    if !matches!(push.kind, PushKind::Message | PushKind::SMessage) {
        return None;
    }
    match push.data.as_slice() {
        [Value::BulkString(topic), Value::BulkString(payload)] => Some((topic, payload)),
        _ => None,
    }
}

impl RedisBridge {
    /// A pushed message: a channel's topic loses its hash-tag braces before
    /// it goes the single-Redis way.
    fn on_push(&self, topic: &[u8], payload: &[u8]) {
        let Ok(topic) = std::str::from_utf8(topic) else {
            return;
        };
        let tagged = format!("{}ch:{{", self.prefix);
        match topic
            .strip_prefix(tagged.as_str())
            .and_then(|c| c.strip_suffix('}'))
        {
            Some(channel) => self.on_message(&format!("{}ch:{channel}", self.prefix), payload),
            None => self.on_message(topic, payload),
        }
    }
}

async fn connect(
    bridge: &RedisBridge,
    client: &redis::cluster::ClusterClient,
) -> ClusterConnection {
    let mut attempt = 0u32;
    loop {
        match tokio::time::timeout(Duration::from_secs(2), client.get_async_connection()).await {
            Ok(Ok(conn)) => return conn,
            Ok(Err(e)) => tracing::debug!(error = %e, "Redis Cluster not reachable yet"),
            Err(_) => tracing::debug!("Redis Cluster connection timed out"),
        }
        bridge.connection_lost();
        attempt += 1;
        tokio::time::sleep(backoff(attempt)).await;
    }
}

async fn run(
    bridge: Arc<RedisBridge>,
    client: redis::cluster::ClusterClient,
    mut pushes: mpsc::UnboundedReceiver<PushInfo>,
    mut cmds: mpsc::UnboundedReceiver<SubCmd>,
) {
    let conn = connect(&bridge, &client).await;
    let _ = bridge.conn.set(Conn::Cluster(conn.clone()));
    let mut attempt = 0u32;
    loop {
        let all: Vec<Arc<str>> = bridge.interest.lock().keys().cloned().collect();
        let ready = async {
            conn.clone().subscribe(bridge.control_topic()).await?;
            apply(&bridge, &conn, all).await
        };
        if let Ok(Ok(())) = tokio::time::timeout(Duration::from_secs(5), ready).await {
            attempt = 0;
            bridge.pubsub_ok.store(true, Ordering::Release);
            bridge.refresh_up();
            loop {
                tokio::select! {
                    push = pushes.recv() => match push {
                        Some(p) if p.kind == PushKind::Disconnection => break,
                        Some(p) => if let Some((topic, payload)) = message(&p) {
                            bridge.on_push(topic, payload);
                        },
                        None => return,
                    },
                    cmd = cmds.recv() => {
                        let Some(SubCmd::Touch(first)) = cmd else { return };
                        let mut touched = vec![first];
                        while let Ok(SubCmd::Touch(c)) = cmds.try_recv() {
                            touched.push(c);
                        }
                        if apply(&bridge, &conn, touched).await.is_err() {
                            break;
                        }
                    }
                }
            }
            tracing::warn!(
                "a Redis Cluster connection was lost; delivering locally until it is back"
            );
        } else {
            tracing::debug!("Redis Cluster subscriptions could not be restored");
        }
        bridge.connection_lost();
        // Interest changes while away are replayed from the map.
        while cmds.try_recv().is_ok() {}
        attempt += 1;
        tokio::time::sleep(backoff(attempt)).await;
    }
}
