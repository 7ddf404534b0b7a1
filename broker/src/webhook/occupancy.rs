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
//! Presence members (§13) take the same path: a subject is a channel
//! (`channel.occupied`/`vacated`) or a user in a presence channel
//! (`member.added`/`removed`, keyed `"<channel> <user>"`: a channel name
//! holds no space), entered when the user's first connection on this node
//! joins and left with its last.
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

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};

use tokio::sync::{mpsc, oneshot};

use super::Webhooks;
use super::cluster::{Cluster, OCCUPANCY_RENEW_EVERY};
use super::event::{Event, MEMBER_ADDED, MEMBER_REMOVED, OCCUPIED, VACATED};
use super::worker::Endpoint;
use crate::config::{WebhookEndpoint, pusher_event_name};

/// What is occupied or vacated: a channel, or a user in a channel.
#[derive(Debug, Clone)]
pub struct Subject {
    /// The bookkeeping key: the channel, or `"<channel> <user>"`.
    key: Arc<str>,
    /// What the endpoints' channel globs match.
    channel: Arc<str>,
    user: Option<Arc<str>>,
}

impl Subject {
    pub fn channel(channel: Arc<str>) -> Subject {
        Subject {
            key: channel.clone(),
            channel,
            user: None,
        }
    }

    pub fn member(channel: Arc<str>, user: Arc<str>) -> Subject {
        Subject {
            key: format!("{channel} {user}").into(),
            channel,
            user: Some(user),
        }
    }

    /// The event sent when it becomes occupied, and when vacated.
    fn kinds(&self) -> (&'static str, &'static str) {
        match self.user {
            None => (OCCUPIED, VACATED),
            Some(_) => (MEMBER_ADDED, MEMBER_REMOVED),
        }
    }

    fn event(&self, kind: &'static str) -> Event {
        match &self.user {
            None => Event::channel(kind, &self.channel),
            Some(user) => Event::member(kind, &self.channel, user),
        }
    }

    /// The event `cfg`'s endpoint gets: §9's, built once in `shared` for
    /// every §9 endpoint, or for a Pusher app's endpoint Pusher's
    /// (`{"name","channel"}`, `user_id` for a member) under the channel's
    /// Pusher name.
    fn event_for(
        &self,
        cfg: &WebhookEndpoint,
        kind: &'static str,
        shared: &mut Option<Event>,
    ) -> Event {
        if cfg.pusher.is_none() {
            return shared.get_or_insert_with(|| self.event(kind)).clone();
        }
        let mut fields = serde_json::json!({
            "name": pusher_event_name(kind),
            "channel": cfg.pusher_name(&self.channel),
        });
        if let Some(user) = &self.user {
            fields["user_id"] = serde_json::json!(&**user);
        }
        Event::pusher(kind, &fields)
    }
}

/// One step for the occupancy task.
pub enum Op {
    /// The subject's first subscriber on this node arrived (`true`) or its
    /// last one left (`false`).
    Local(Subject, bool),
    /// An endpoint's vacated delay for the subject at generation `gen` ran
    /// out.
    VacateDue {
        subject: Subject,
        generation: u64,
        endpoint: Weak<Endpoint>,
    },
    /// Renew the Redis state of every subject this node holds (cluster
    /// mode; sent every [`OCCUPANCY_RENEW_EVERY`] and by
    /// `Webhooks::renew_occupancy`); answers how many were renewed once
    /// done.
    Renew(Option<oneshot::Sender<usize>>),
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
    // Bounded by the subjects with a vacate in waiting.
    let mut pending: HashMap<Arc<str>, Pending> = HashMap::new();
    let mut generation = 0u64;
    while let Some(op) = rx.recv().await {
        let Some(webhooks) = webhooks.upgrade() else {
            return;
        };
        match op {
            Op::Local(subject, true) => {
                pending.remove(&subject.key);
                let (added, removed) = subject.kinds();
                let mut event = None;
                for ep in webhooks.endpoints_for(&subject.channel) {
                    let cfg = ep.config.load();
                    let tracks = cfg.wants(added) || cfg.wants(removed);
                    if tracks && ep.announced.lock().insert(subject.key.clone()) && cfg.wants(added)
                    {
                        ep.enqueue(subject.event_for(&cfg, added, &mut event));
                    }
                }
            }
            Op::Local(subject, false) => {
                generation += 1;
                let mut timers = 0;
                for ep in webhooks.endpoints_for(&subject.channel) {
                    if !ep.announced.lock().contains(&subject.key) {
                        continue;
                    }
                    timers += 1;
                    vacate_after_delay(&tx, &subject, generation, &ep);
                }
                if timers > 0 {
                    pending.insert(subject.key.clone(), Pending { generation, timers });
                } else {
                    pending.remove(&subject.key);
                }
            }
            Op::VacateDue {
                subject,
                generation,
                endpoint,
            } => {
                let Some(p) = pending
                    .get_mut(&subject.key)
                    .filter(|p| p.generation == generation)
                else {
                    // A resubscribe (or a later vacate) superseded it.
                    continue;
                };
                p.timers -= 1;
                if p.timers == 0 {
                    pending.remove(&subject.key);
                }
                let Some(ep) = endpoint.upgrade() else {
                    continue;
                };
                let removed = subject.kinds().1;
                let cfg = ep.config.load();
                if ep.announced.lock().remove(&subject.key) && cfg.wants(removed) {
                    ep.enqueue(subject.event_for(&cfg, removed, &mut None));
                }
            }
            // Nothing in Redis to renew on one node.
            Op::Renew(done) => {
                if let Some(done) = done {
                    let _ = done.send(0);
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
    subject: &Subject,
    generation: u64,
    ep: &Arc<Endpoint>,
) {
    let delay = ep.config.load().pacing.vacated_delay;
    let tx = tx.clone();
    let due = Op::VacateDue {
        subject: subject.clone(),
        generation,
        endpoint: Arc::downgrade(ep),
    };
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        let _ = tx.send(due);
    });
}

fn tracking(webhooks: &Webhooks, subject: &Subject) -> Vec<Arc<Endpoint>> {
    let (added, removed) = subject.kinds();
    webhooks
        .endpoints_for(&subject.channel)
        .into_iter()
        .filter(|e| {
            let c = e.config.load();
            c.wants(added) || c.wants(removed)
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
    // The subjects this node holds, whose Redis state it keeps renewing.
    // Bounded by this node's occupied subjects: channels with a local
    // subscriber and present users, each held by a subscription its
    // connection pays for.
    let mut held: HashSet<Arc<str>> = HashSet::new();
    let renewals = tx.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(OCCUPANCY_RENEW_EVERY);
        tick.tick().await;
        loop {
            tick.tick().await;
            // Fails once the loop below has ended.
            if renewals.send(Op::Renew(None)).is_err() {
                return;
            }
        }
    });
    while let Some(op) = rx.recv().await {
        let Some(webhooks) = webhooks.upgrade() else {
            return;
        };
        match op {
            Op::Renew(done) => {
                // Off this task: renewing many subjects takes a while, and
                // joins and leaves must not wait for it. A subject left
                // meanwhile may get a day more, which only delays its
                // state's expiry.
                let subjects: Vec<Arc<str>> = held.iter().cloned().collect();
                let cluster = cluster.clone();
                tokio::spawn(async move {
                    let renewed = match cluster.renew(&subjects).await {
                        Ok(n) => n,
                        Err(e) => {
                            tracing::warn!(target: "tidegate::webhook", error = %e, "cannot renew occupancy in Redis");
                            0
                        }
                    };
                    if let Some(done) = done {
                        let _ = done.send(renewed);
                    }
                });
            }
            Op::Local(subject, true) => {
                held.insert(subject.key.clone());
                let eps = tracking(&webhooks, &subject);
                let ids: Vec<String> = eps.iter().map(|e| e.id()).collect();
                let added = subject.kinds().0;
                match cluster.join(&subject.key, &ids).await {
                    Ok(told) => {
                        let mut event = None;
                        for ep in eps.iter().filter(|e| told.contains(&e.id())) {
                            let cfg = ep.config.load();
                            if cfg.wants(added) {
                                ep.enqueue(subject.event_for(&cfg, added, &mut event));
                            }
                        }
                    }
                    Err(e) => {
                        tracing::warn!(target: "tidegate::webhook", subject = %subject.key, error = %e, "cannot record occupancy in Redis")
                    }
                }
            }
            Op::Local(subject, false) => {
                held.remove(&subject.key);
                match cluster.leave(&subject.key).await {
                    Ok(0) => {}
                    Ok(generation) => {
                        for ep in tracking(&webhooks, &subject) {
                            vacate_after_delay(&tx, &subject, generation, &ep);
                        }
                    }
                    Err(e) => {
                        tracing::warn!(target: "tidegate::webhook", subject = %subject.key, error = %e, "cannot record occupancy in Redis")
                    }
                }
            }
            Op::VacateDue {
                subject,
                generation,
                endpoint,
            } => {
                let Some(ep) = endpoint.upgrade() else {
                    continue;
                };
                let removed = subject.kinds().1;
                let cfg = ep.config.load_full();
                match cluster.vacate(&subject.key, generation, &ep.id()).await {
                    Ok(true) if cfg.wants(removed) => {
                        ep.enqueue(subject.event_for(&cfg, removed, &mut None));
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(target: "tidegate::webhook", subject = %subject.key, error = %e, "cannot record occupancy in Redis")
                    }
                }
            }
        }
    }
}
