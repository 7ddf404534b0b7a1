//! `channel.occupied` / `channel.vacated` (§9) from the hub's transitions
//! (a channel's first local subscriber, its last one gone).
//!
//! Transitions are sent, in the order the hub's channel lock made them,
//! into one queue and applied by one task, so they are never reordered.
//! Each endpoint remembers which channels it was told are occupied: it
//! gets `channel.occupied` once, and `channel.vacated` only after it and
//! only if the channel stayed empty for its `vacated_delay_ms` (every
//! transition bumps the channel's generation; a vacate whose generation is
//! no longer current was cancelled by a resubscribe). A
//! subscribe/unsubscribe race therefore produces no event at all, never an
//! occupied/vacated flap.
//!
//! In cluster mode the same bookkeeping lives in Redis, one hash per
//! channel (`{prefix}occ:{<channel>}`), changed only by scripts: `JOIN`
//! marks this node as having subscribers, bumps the generation and marks
//! the endpoints not yet told (the first node to join tells them, once);
//! `LEAVE` unmarks this node and, if no node with a live lease still has
//! subscribers, returns the generation its vacate timers carry; `VACATE`
//! tells an endpoint only if the generation is unchanged (no node joined
//! or left since) and it was told occupied. Every node applies its own
//! transitions in order, and the scripts serialise the nodes, so the
//! cluster sends each occupied and vacated once.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use tokio::sync::mpsc;

use super::Webhooks;
use super::cluster::Cluster;
use super::event::{Event, OCCUPIED, VACATED};
use super::worker::Endpoint;

/// One step for the occupancy task.
pub enum Op {
    /// The channel's first subscriber on this node arrived (`true`) or its
    /// last one left (`false`).
    Local(Arc<str>, bool),
    /// An endpoint's vacated delay for `channel` at generation `gen` ran out.
    VacateDue {
        channel: Arc<str>,
        generation: u64,
        endpoint: Weak<Endpoint>,
    },
}

/// A vacate in waiting: its generation and timers still running.
struct Pending {
    generation: u64,
    timers: usize,
}

/// Applies transitions in order until the webhooks are dropped.
pub async fn run(
    webhooks: Weak<Webhooks>,
    cluster: Option<Arc<Cluster>>,
    tx: mpsc::UnboundedSender<Op>,
    mut rx: mpsc::UnboundedReceiver<Op>,
) {
    if let Some(cluster) = cluster {
        return run_clustered(webhooks, cluster, tx, rx).await;
    }
    let mut pending: HashMap<Arc<str>, Pending> = HashMap::new();
    let mut generation = 0u64;
    while let Some(op) = rx.recv().await {
        let Some(webhooks) = webhooks.upgrade() else {
            return;
        };
        match op {
            Op::Local(channel, true) => {
                pending.remove(&channel);
                let mut event = None;
                for ep in webhooks.endpoints_for(&channel) {
                    let cfg = ep.config.load();
                    let tracks = cfg.wants(OCCUPIED) || cfg.wants(VACATED);
                    if tracks && ep.announced.lock().insert(channel.clone()) && cfg.wants(OCCUPIED)
                    {
                        ep.enqueue(
                            event
                                .get_or_insert_with(|| Event::channel(OCCUPIED, &channel))
                                .clone(),
                        );
                    }
                }
            }
            Op::Local(channel, false) => {
                generation += 1;
                let mut timers = 0;
                for ep in webhooks.endpoints_for(&channel) {
                    if !ep.announced.lock().contains(&channel) {
                        continue;
                    }
                    timers += 1;
                    vacate_after_delay(&tx, &channel, generation, &ep);
                }
                if timers > 0 {
                    pending.insert(channel, Pending { generation, timers });
                } else {
                    pending.remove(&channel);
                }
            }
            Op::VacateDue {
                channel,
                generation,
                endpoint,
            } => {
                let Some(p) = pending
                    .get_mut(&channel)
                    .filter(|p| p.generation == generation)
                else {
                    // A resubscribe (or a later vacate) superseded it.
                    continue;
                };
                p.timers -= 1;
                if p.timers == 0 {
                    pending.remove(&channel);
                }
                let Some(ep) = endpoint.upgrade() else {
                    continue;
                };
                if ep.announced.lock().remove(&channel) && ep.config.load().wants(VACATED) {
                    ep.enqueue(Event::channel(VACATED, &channel));
                }
            }
        }
    }
}

/// Endpoints covering `channel` that follow its occupancy.
/// Sends `VacateDue` for `ep` once its `vacated_delay` has passed since
/// the last leave; the generation tells a later join apart.
fn vacate_after_delay(
    tx: &mpsc::UnboundedSender<Op>,
    channel: &Arc<str>,
    generation: u64,
    ep: &Arc<Endpoint>,
) {
    let delay = ep.config.load().pacing.vacated_delay;
    let tx = tx.clone();
    let due = Op::VacateDue {
        channel: channel.clone(),
        generation,
        endpoint: Arc::downgrade(ep),
    };
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        let _ = tx.send(due);
    });
}

fn tracking(webhooks: &Webhooks, channel: &str) -> Vec<Arc<Endpoint>> {
    webhooks
        .endpoints_for(channel)
        .into_iter()
        .filter(|e| {
            let c = e.config.load();
            c.wants(OCCUPIED) || c.wants(VACATED)
        })
        .collect()
}

/// The cluster-mode loop: the same steps, decided by Redis scripts.
async fn run_clustered(
    webhooks: Weak<Webhooks>,
    cluster: Arc<Cluster>,
    tx: mpsc::UnboundedSender<Op>,
    mut rx: mpsc::UnboundedReceiver<Op>,
) {
    while let Some(op) = rx.recv().await {
        let Some(webhooks) = webhooks.upgrade() else {
            return;
        };
        match op {
            Op::Local(channel, true) => {
                let eps = tracking(&webhooks, &channel);
                let ids: Vec<String> = eps.iter().map(|e| e.id()).collect();
                match cluster.join(&channel, &ids).await {
                    Ok(told) => {
                        let mut event = None;
                        for ep in eps.iter().filter(|e| told.contains(&e.id())) {
                            if ep.config.load().wants(OCCUPIED) {
                                let e =
                                    event.get_or_insert_with(|| Event::channel(OCCUPIED, &channel));
                                ep.enqueue(e.clone());
                            }
                        }
                    }
                    Err(e) => {
                        tracing::warn!(target: "tidegate::webhook", channel = %channel, error = %e, "cannot record occupancy in Redis")
                    }
                }
            }
            Op::Local(channel, false) => match cluster.leave(&channel).await {
                Ok(0) => {}
                Ok(generation) => {
                    for ep in tracking(&webhooks, &channel) {
                        vacate_after_delay(&tx, &channel, generation, &ep);
                    }
                }
                Err(e) => {
                    tracing::warn!(target: "tidegate::webhook", channel = %channel, error = %e, "cannot record occupancy in Redis")
                }
            },
            Op::VacateDue {
                channel,
                generation,
                endpoint,
            } => {
                let Some(ep) = endpoint.upgrade() else {
                    continue;
                };
                match cluster.vacate(&channel, generation, &ep.id()).await {
                    Ok(true) if ep.config.load().wants(VACATED) => {
                        ep.enqueue(Event::channel(VACATED, &channel));
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(target: "tidegate::webhook", channel = %channel, error = %e, "cannot record occupancy in Redis")
                    }
                }
            }
        }
    }
}
