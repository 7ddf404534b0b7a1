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

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use tokio::sync::mpsc;

use super::Webhooks;
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
    tx: mpsc::UnboundedSender<Op>,
    mut rx: mpsc::UnboundedReceiver<Op>,
) {
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
                    let delay = ep.config.load().pacing.vacated_delay;
                    let tx = tx.clone();
                    let due = Op::VacateDue {
                        channel: channel.clone(),
                        generation,
                        endpoint: Arc::downgrade(&ep),
                    };
                    tokio::spawn(async move {
                        tokio::time::sleep(delay).await;
                        let _ = tx.send(due);
                    });
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
