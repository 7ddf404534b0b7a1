//! The bridge's Redis subscription: one connection that follows this
//! node's interest (a channel is subscribed while it has local
//! subscribers), changes it in batches, dispatches what arrives to the hub,
//! and reconnects with jittered backoff, resubscribing everything in
//! batches.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::mpsc;

use super::{RedisBridge, SubCmd};

/// Channels per SUBSCRIBE/UNSUBSCRIBE command.
pub(super) const BATCH: usize = 500;
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// Full jitter: a random wait in [0, min(max, min × 2^attempt)).
pub(super) fn backoff(attempt: u32) -> Duration {
    let ceiling = BACKOFF_MIN
        .saturating_mul(1u32 << attempt.min(16))
        .min(BACKOFF_MAX);
    ceiling
        .mul_f64(rand::random::<f64>())
        .max(Duration::from_millis(10))
}

impl RedisBridge {
    /// Marks `channels` live on the current connection and wakes the
    /// subscribes waiting for them.
    pub(super) fn confirm(&self, channels: &[Arc<str>]) {
        let mut interest = self.interest.lock();
        for c in channels {
            if let Some(entry) = interest.get_mut(c) {
                entry.live = true;
                for w in entry.waiters.drain(..) {
                    let _ = w.send(());
                }
            }
        }
    }

    pub(super) fn connection_lost(&self) {
        let listening = self.pubsub_ok.swap(false, Ordering::AcqRel);
        // Whatever the command connection thinks, Redis may have restarted
        // empty: re-sync before reporting up again.
        let commanding = self.cmd_ok.swap(false, Ordering::AcqRel);
        if listening && commanding {
            self.metrics.bridge_outages.inc();
        }
        for entry in self.interest.lock().values_mut() {
            entry.live = false;
            // Subscribes waiting now are acked with local delivery.
            entry.waiters.clear();
        }
        self.refresh_up();
    }
}

/// Applies a batch of interest changes: subscribe what has local
/// subscribers, unsubscribe what has none.
async fn apply(
    bridge: &RedisBridge,
    sink: &mut redis::aio::PubSubSink,
    touched: Vec<Arc<str>>,
) -> redis::RedisResult<()> {
    let (add, remove): (Vec<Arc<str>>, Vec<Arc<str>>) = {
        let interest = bridge.interest.lock();
        touched.into_iter().partition(|c| interest.contains_key(c))
    };
    for chunk in add.chunks(BATCH) {
        let topics: Vec<String> = chunk.iter().map(|c| bridge.topic(c)).collect();
        sink.subscribe(&topics).await?;
        bridge.confirm(chunk);
    }
    for chunk in remove.chunks(BATCH) {
        let topics: Vec<String> = chunk.iter().map(|c| bridge.topic(c)).collect();
        sink.unsubscribe(&topics).await?;
    }
    Ok(())
}

pub(super) async fn run(bridge: Arc<RedisBridge>, mut cmds: mpsc::UnboundedReceiver<SubCmd>) {
    let mut attempt = 0u32;
    loop {
        let connected = tokio::time::timeout(
            Duration::from_secs(2),
            bridge.target.client.get_async_pubsub(),
        )
        .await;
        if let Ok(Ok(pubsub)) = connected {
            let (mut sink, mut stream) = pubsub.split();
            let all: Vec<Arc<str>> = bridge.interest.lock().keys().cloned().collect();
            let ready = async {
                sink.subscribe(bridge.control_topic()).await?;
                apply(&bridge, &mut sink, all).await
            };
            match tokio::time::timeout(Duration::from_secs(5), ready).await {
                Ok(Ok(())) => {
                    attempt = 0;
                    bridge.pubsub_ok.store(true, Ordering::Release);
                    bridge.refresh_up();
                    loop {
                        tokio::select! {
                            msg = stream.next() => match msg {
                                Some(m) => bridge.on_message(m.get_channel_name(), m.get_payload_bytes()),
                                None => break,
                            },
                            cmd = cmds.recv() => {
                                // `Resume` is Redis Cluster's only.
                                let Some(first) = cmd else { return };
                                let mut touched: Vec<Arc<str>> = Vec::new();
                                for cmd in std::iter::once(first).chain(std::iter::from_fn(|| cmds.try_recv().ok())) {
                                    if let SubCmd::Touch(c) = cmd {
                                        touched.push(c);
                                    }
                                }
                                if apply(&bridge, &mut sink, touched).await.is_err() {
                                    break;
                                }
                            }
                        }
                    }
                    tracing::warn!("Redis subscription lost; delivering locally until it is back");
                }
                _ => tracing::debug!("Redis subscription could not be restored"),
            }
        }
        bridge.connection_lost();
        // Interest changes while away are replayed from the map on reconnect.
        while cmds.try_recv().is_ok() {}
        attempt += 1;
        tokio::time::sleep(backoff(attempt)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_jittered_and_bounded() {
        for attempt in 0..40 {
            let d = backoff(attempt);
            assert!(d <= BACKOFF_MAX, "{d:?}");
        }
        let draws: std::collections::HashSet<_> =
            (0..20).map(|_| backoff(10).as_millis()).collect();
        assert!(draws.len() > 5, "full jitter spreads the waits");
    }
}
