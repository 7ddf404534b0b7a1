//! The subscription on Redis Cluster: one cluster connection (RESP3) whose
//! pushes carry every shard's messages. A channel is `SSUBSCRIBE`d on the
//! shard owning its slot while it has local subscribers; the control topic
//! stays classic pub/sub (Redis Cluster forwards it to every shard). The
//! connection re-subscribes by itself after a reconnection or a topology
//! change. A lost shard connection is an outage of that shard only: every
//! subscription is asserted again, and the channels whose shard does not
//! answer are marked down (`slots.rs`) and served alone until the slot
//! recovery (`slot_recovery.rs`) has re-synced and re-subscribed them; the
//! other shards' channels never stop.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::future::join_all;
use redis::cluster_async::ClusterConnection;
use redis::{ProtocolVersion, PushInfo, PushKind, Value};
use tokio::sync::mpsc;

use super::subscriber::{BATCH, backoff};
use super::{COMMAND_TIMEOUT, Conn, RedisBridge, SubCmd};
use crate::cluster::Bridge;

/// The bounds (ms) of the cluster client's wait before its own retry.
const RETRY_WAIT_MS: (u64, u64) = (10, 100);

/// Starts the cluster connection's tasks; the future ends once the bridge
/// is first up (as `Bridge::start` promises).
pub(super) fn start(bridge: Arc<RedisBridge>) -> Pin<Box<dyn Future<Output = ()>>> {
    actix_rt::spawn(connections(bridge.clone()));
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

/// Makes the cluster clients (seeded with every node the configured one
/// names), then starts the subscription task and the loops that use them.
async fn connections(bridge: Arc<RedisBridge>) {
    let seeds = bridge.target.cluster_seeds().await;
    let builder = || {
        bridge
            .target
            .cluster_builder(seeds.clone())
            .use_protocol(ProtocolVersion::RESP3)
            .connection_timeout(COMMAND_TIMEOUT)
            .response_timeout(COMMAND_TIMEOUT)
            .retries(1)
            // The crate waits at least 1.28 s before its retry (of a
            // `TRYAGAIN`, say), past the response timeout: a command
            // whose keys a migration had split would always time out and
            // be taken for an outage. Retry within tens of ms; what is
            // left is tried again by `invoke_following`.
            .min_retry_wait(RETRY_WAIT_MS.0)
            .max_retry_wait(RETRY_WAIT_MS.1)
    };
    // Two connections: pushes arrive only on the subscribing one. Redis
    // sends an unasked `sunsubscribe` when a slot moves away, and the
    // client takes it for the reply of the oldest command in flight on
    // that shard's link; on a link that carries no commands but the
    // subscriptions themselves, no script can get a wrong reply.
    let (push_tx, push_rx) = mpsc::unbounded_channel::<PushInfo>();
    let clients = builder()
        .push_sender(push_tx)
        .build()
        .and_then(|subscriber| Ok((subscriber, builder().build()?)));
    match clients {
        Ok((subscriber, commands)) => {
            if let Some(rx) = bridge.cmds_rx.lock().take() {
                actix_rt::spawn(run(bridge.clone(), subscriber, commands, push_rx, rx));
            }
            actix_rt::spawn(bridge.clone().lease_loop());
            actix_rt::spawn(bridge.clone().recovery_loop());
            actix_rt::spawn(bridge.clone().counts_loop());
            actix_rt::spawn(bridge.clone().history_loop());
        }
        Err(e) => tracing::error!(error = %e, "cannot set up the Redis Cluster connection"),
    }
}

/// `SSUBSCRIBE`s what has local subscribers and `SUNSUBSCRIBE`s what has
/// none, one command per channel (a command may not span slots), a batch
/// at a time concurrently. A channel whose shard fails marks its slot down
/// (the slot recovery subscribes it once the shard is back); one on a slot
/// already down waits for that recovery.
async fn apply(bridge: &RedisBridge, conn: &ClusterConnection, touched: Vec<Arc<str>>) {
    let (add, remove): (Vec<Arc<str>>, Vec<Arc<str>>) = {
        let interest = bridge.interest.lock();
        touched
            .into_iter()
            .filter(|c| !bridge.down.is_down(&bridge.topic(c)))
            .partition(|c| interest.contains_key(c))
    };
    for chunk in add.chunks(BATCH) {
        let done = join_all(chunk.iter().map(|c| {
            let (mut conn, topic) = (conn.clone(), bridge.topic(c));
            async move {
                match conn.ssubscribe(&topic).await {
                    Ok(()) => Some(c.clone()),
                    Err(e) => {
                        bridge.failed_at(&topic, &e);
                        None
                    }
                }
            }
        }))
        .await;
        let live: Vec<Arc<str>> = done.into_iter().flatten().collect();
        bridge.confirm(&live);
    }
    for chunk in remove.chunks(BATCH) {
        join_all(chunk.iter().map(|c| {
            let (mut conn, topic) = (conn.clone(), bridge.topic(c));
            async move {
                if let Err(e) = conn.sunsubscribe(&topic).await {
                    bridge.failed_at(&topic, &e);
                }
            }
        }))
        .await;
    }
}

/// The control topic (classic pub/sub, routed by its own slot).
async fn control(bridge: &RedisBridge, conn: &ClusterConnection) -> redis::RedisResult<()> {
    let topic = bridge.control_topic();
    if bridge.down.is_down(&topic) {
        return Ok(());
    }
    conn.clone().subscribe(&topic).await
}

/// After a shard connection dropped: asserts every subscription again, so
/// those of the failed shard find it down (and those elsewhere stay).
async fn reassert(bridge: Arc<RedisBridge>, conn: ClusterConnection) {
    if let Err(e) = control(&bridge, &conn).await {
        bridge.failed_at(&bridge.control_topic(), &e);
    }
    let all: Vec<Arc<str>> = bridge.interest.lock().keys().cloned().collect();
    apply(&bridge, &conn, all).await;
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
    /// The channel of a hash-tagged topic (`{prefix}ch:{doc:1}`).
    pub(super) fn tagged_channel<'a>(&self, topic: &'a str) -> Option<&'a str> {
        topic
            .strip_prefix(self.prefix.as_str())?
            .strip_prefix("ch:{")?
            .strip_suffix('}')
    }

    /// A pushed message: a channel's topic loses its hash-tag braces before
    /// it goes the single-Redis way.
    fn on_push(&self, topic: &[u8], payload: &[u8]) {
        let Ok(topic) = std::str::from_utf8(topic) else {
            return;
        };
        match self.tagged_channel(topic) {
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
    subscriber: redis::cluster::ClusterClient,
    commands: redis::cluster::ClusterClient,
    mut pushes: mpsc::UnboundedReceiver<PushInfo>,
    mut cmds: mpsc::UnboundedReceiver<SubCmd>,
) {
    let conn = connect(&bridge, &subscriber).await;
    let _ = bridge.pubsub.set(conn.clone());
    bridge
        .conn
        .set(Conn::Cluster(connect(&bridge, &commands).await));
    // The first subscriptions; later losses are per shard (`reassert`).
    let mut attempt = 0u32;
    loop {
        let all: Vec<Arc<str>> = bridge.interest.lock().keys().cloned().collect();
        let ready = async {
            control(&bridge, &conn).await?;
            apply(&bridge, &conn, all).await;
            Ok::<(), redis::RedisError>(())
        };
        if let Ok(Ok(())) = tokio::time::timeout(Duration::from_secs(5), ready).await {
            break;
        }
        tracing::debug!("Redis Cluster subscriptions could not be set up");
        bridge.connection_lost();
        // Interest changes while away are replayed from the map.
        while cmds.try_recv().is_ok() {}
        attempt += 1;
        tokio::time::sleep(backoff(attempt)).await;
    }
    bridge.pubsub_ok.store(true, Ordering::Release);
    bridge.refresh_up();
    loop {
        tokio::select! {
            push = pushes.recv() => match push {
                Some(p) if p.kind == PushKind::SUnsubscribe => {
                    // A slot moved: every channel of it comes at once.
                    let mut dropped: Vec<Arc<str>> = bridge.dropped(&p).into_iter().collect();
                    let mut next = None;
                    while let Ok(q) = pushes.try_recv() {
                        if q.kind != PushKind::SUnsubscribe {
                            next = Some(q);
                            break;
                        }
                        dropped.extend(bridge.dropped(&q));
                    }
                    if !dropped.is_empty() {
                        bridge.follow_moved(&conn, dropped).await;
                    }
                    if let Some(q) = next {
                        dispatch(&bridge, &conn, q);
                    }
                }
                Some(p) => dispatch(&bridge, &conn, p),
                None => return,
            },
            cmd = cmds.recv() => {
                let Some(first) = cmd else { return };
                let mut touched = Vec::new();
                let mut resumed = Vec::new();
                for cmd in std::iter::once(first).chain(std::iter::from_fn(|| cmds.try_recv().ok())) {
                    match cmd {
                        SubCmd::Touch(c) => touched.push(c),
                        SubCmd::Resume(slot, channels) => resumed.push((slot, channels)),
                    }
                }
                apply(&bridge, &conn, touched).await;
                for (slot, channels) in resumed {
                    let live = bridge.resubscribe(&conn, channels).await;
                    bridge.retouch(slot, &live);
                }
            }
        }
    }
}

/// A push other than a dropped subscription: a message, or a lost shard
/// connection.
fn dispatch(bridge: &Arc<RedisBridge>, conn: &ClusterConnection, push: PushInfo) {
    if push.kind == PushKind::Disconnection {
        tracing::warn!("a Redis Cluster shard connection was lost");
        actix_rt::spawn(reassert(bridge.clone(), conn.clone()));
    } else if let Some((topic, payload)) = message(&push) {
        bridge.on_push(topic, payload);
    }
}
