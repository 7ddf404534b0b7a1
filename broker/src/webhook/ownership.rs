//! An endpoint's cluster-mode loops (see `cluster.rs`): appending this
//! node's events to the shared stream, and taking, keeping or losing the
//! endpoint's ownership while feeding the worker from the stream.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::cluster::Cluster;
use super::event::Event;
use super::worker::Endpoint;
use crate::metrics::webhooks::outcome;

/// How often an idle owner looks for events other nodes appended.
const POLL: Duration = Duration::from_millis(100);
/// How long a loop waits after a Redis error.
const RETRY: Duration = Duration::from_millis(500);

impl Endpoint {
    /// Appends this node's events to the stream in order. An event is
    /// accepted once appended; while Redis is away they wait here, up to
    /// the buffer's size (then `enqueue` counts drops).
    pub(super) async fn append_loop(
        self: Arc<Self>,
        shared: Arc<Cluster>,
        mut rx: mpsc::Receiver<Event>,
    ) {
        loop {
            let event = tokio::select! {
                _ = self.cancel.cancelled() => return,
                e = rx.recv() => match e { Some(e) => e, None => return },
            };
            loop {
                let cfg = self.config.load_full();
                match shared.enqueue(&cfg.id, &event, cfg.pacing.queue_max).await {
                    Ok(dropped) => {
                        if dropped > 0 {
                            self.metrics.count(&cfg.id, outcome::DROPPED, dropped);
                            tracing::warn!(target: "tidegate::webhook", endpoint = %cfg.id, dropped, "queue full: oldest events dropped");
                        }
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(target: "tidegate::webhook", endpoint = %cfg.id, event = &*event.id, error = %e, "cannot append to the webhook stream; retrying");
                        tokio::select! {
                            _ = self.cancel.cancelled() => return,
                            _ = tokio::time::sleep(RETRY) => {}
                        }
                    }
                }
            }
            if let Some(link) = &self.cluster {
                link.fed.notify_one();
            }
        }
    }

    /// Keeps trying to own the endpoint; while it does, keeps the worker's
    /// local queue fed from the stream.
    pub(super) async fn own_loop(self: Arc<Self>, shared: Arc<Cluster>) {
        let mut owner = false;
        let mut next_renew = Instant::now();
        loop {
            let cfg = self.config.load_full();
            let id = cfg.id.as_str();
            let now = Instant::now();
            if now >= next_renew {
                next_renew = now + (shared.lease / 3).max(Duration::from_millis(50));
                let ttl = shared.lease + cfg.pacing.timeout;
                match shared.own(id, ttl).await {
                    Ok(state) if state > 0 => {
                        if !owner || state == 2 {
                            owner = self.take_over(&shared, id).await;
                        }
                        if owner {
                            self.state.lock().owner_until = Some(now + ttl);
                            self.wake.notify_one();
                        }
                    }
                    other => {
                        if let Err(e) = other {
                            tracing::warn!(target: "tidegate::webhook", endpoint = id, error = %e, "cannot reach Redis for the webhook owner lock");
                        }
                        if owner {
                            self.step_down(id);
                            owner = false;
                        }
                    }
                }
                if let Ok(len) = shared.queue_len(id).await {
                    self.metrics.set_queue(id, len);
                }
            }
            let mut fed = false;
            if owner {
                fed = self
                    .refill(&shared, id, cfg.pacing.max_in_flight as usize)
                    .await;
            }
            if fed {
                continue;
            }
            let wait = next_renew.min(Instant::now() + POLL);
            let Some(link) = &self.cluster else { return };
            tokio::select! {
                _ = self.cancel.cancelled() => return,
                _ = link.fed.notified() => {}
                _ = tokio::time::sleep_until(wait.into()) => {}
            }
        }
    }

    /// Newly owner: take every pending entry over, honour a pause another
    /// node recorded, and queue what this consumer has pending (except
    /// what is still in flight here).
    async fn take_over(&self, shared: &Cluster, id: &str) -> bool {
        let result = async {
            shared.claim(id).await?;
            let pause = shared.pause_left(id).await?;
            let mut pending = Vec::new();
            loop {
                // Pending entries come back in id order; read past the last.
                let start = pending
                    .last()
                    .and_then(|e: &Event| e.entry.as_deref())
                    .unwrap_or("0")
                    .to_owned();
                let batch = shared.read(id, 500, &start).await?;
                let done = batch.len() < 500;
                pending.extend(batch);
                if done {
                    break;
                }
            }
            redis::RedisResult::Ok((pause, pending))
        }
        .await;
        match result {
            Ok((pause, pending)) => {
                let n = pending.len();
                let mut st = self.state.lock();
                st.queue.take_all();
                for e in pending {
                    if !e
                        .entry
                        .as_ref()
                        .is_some_and(|x| st.entries_in_flight.contains(x))
                    {
                        st.queue.push(e, usize::MAX);
                    }
                }
                if !pause.is_zero() {
                    // The receiver's pause, as the node it answered recorded
                    // it; after it the oldest entry goes out alone, as on
                    // that node (worker.rs, `next_step`).
                    st.pause(Instant::now(), pause);
                }
                drop(st);
                tracing::info!(target: "tidegate::webhook", endpoint = id, member = %shared.member, pending = n, "owning this endpoint");
                true
            }
            Err(e) => {
                tracing::warn!(target: "tidegate::webhook", endpoint = id, error = %e, "taking over the endpoint failed");
                false
            }
        }
    }

    /// Lost the lock (or Redis): stop starting attempts and forget the
    /// local copies; the entries stay pending for the next owner.
    fn step_down(&self, id: &str) {
        let mut st = self.state.lock();
        st.owner_until = None;
        st.queue.take_all();
        tracing::info!(target: "tidegate::webhook", endpoint = id, "no longer owning this endpoint");
    }

    /// Reads new entries while the local queue is short; whether any came.
    async fn refill(&self, shared: &Cluster, id: &str, in_flight: usize) -> bool {
        let want = (in_flight * 2).max(8);
        let have = self.state.lock().queue.len();
        if have >= want {
            return false;
        }
        match shared.read(id, want - have, ">").await {
            Ok(batch) if !batch.is_empty() => {
                let mut st = self.state.lock();
                if st.owner_until.is_none() {
                    // Deposed meanwhile: the entries stay pending in Redis.
                    return false;
                }
                for e in batch {
                    st.queue.push(e, usize::MAX);
                }
                drop(st);
                self.wake.notify_one();
                true
            }
            Ok(_) => false,
            Err(e) => {
                tracing::warn!(target: "tidegate::webhook", endpoint = id, error = %e, "cannot read the webhook stream");
                false
            }
        }
    }

    /// Records a final outcome (acknowledge the entry) or a pause in Redis.
    pub(super) fn share_outcome(
        &self,
        shared: Arc<Cluster>,
        id: &str,
        final_entry: Option<Arc<str>>,
        pause: Option<Duration>,
    ) {
        let id = id.to_owned();
        tokio::spawn(async move {
            if let Some(entry) = final_entry
                && let Err(e) = shared.ack(&id, &entry).await
            {
                // Not acknowledged: a later owner may send it again, which
                // at least once allows; the receiver dedups by webhook-id.
                tracing::warn!(target: "tidegate::webhook", endpoint = %id, entry = %entry, error = %e, "cannot acknowledge a final webhook entry");
            }
            if let Some(wait) = pause
                && let Err(e) = shared.pause(&id, wait).await
            {
                tracing::warn!(target: "tidegate::webhook", endpoint = %id, error = %e, "cannot share the receiver's pause");
            }
        });
    }
}
