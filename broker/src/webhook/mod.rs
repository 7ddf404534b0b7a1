//! Outbound webhooks (§9): the broker notifies backends over HTTP.
//!
//! - [`Webhooks`] (here): the node's entry point. The broker's hot paths
//!   call [`Webhooks::published`], [`Webhooks::limit_exceeded`] and the
//!   hub's occupancy hook; each only pushes onto the matching endpoints'
//!   queues. A reload adds, changes and removes endpoints in place.
//! - `worker.rs`: one endpoint's queue, pacing bucket, in-flight cap,
//!   pause, backoff and health, and its task; `queue.rs`, `health.rs`.
//! - `send.rs`: one HTTP attempt and what its answer means; `sign.rs`:
//!   the Standard Webhooks signature; `event.rs`: the events and bodies.
//! - `occupancy.rs`: `channel.occupied` / `channel.vacated`.
//! - `runtime.rs`: the thread all of it runs on, away from the actix
//!   workers.

pub mod cluster;
pub mod event;
pub mod health;
pub mod occupancy;
mod ownership;
pub mod queue;
pub mod runtime;
mod scripts;
pub mod send;
pub mod sign;
pub mod worker;

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use tokio::sync::mpsc;

pub use crate::metrics::WebhookMetrics;
pub use event::Event;
pub use health::Status;
pub use worker::Endpoint;

use crate::config::{Config, WebhookEndpoint};
use crate::metrics::webhooks::outcome;

/// `limit.exceeded` is sent at most once per account, reason and minute.
const LIMIT_WINDOW_SECS: u64 = 60;

/// Every endpoint a config names: `[[webhooks]]` and each Pusher app's.
pub fn configured(config: &Config) -> Vec<WebhookEndpoint> {
    let apps = config.pusher_apps.iter().flat_map(|a| a.webhooks.iter());
    config.webhooks.iter().chain(apps).cloned().collect()
}

/// The node's webhooks.
pub struct Webhooks {
    endpoints: ArcSwap<Vec<Arc<Endpoint>>>,
    metrics: Arc<WebhookMetrics>,
    /// Started with the first endpoint; a node without webhooks has no
    /// extra thread.
    runtime: OnceLock<runtime::Runtime>,
    /// Cluster mode: the shared queues (set with the runtime).
    cluster: OnceLock<Arc<cluster::Cluster>>,
    /// What the shared queues are made from (cluster mode only).
    cluster_config: Option<cluster::Params>,
    occupancy: OnceLock<mpsc::UnboundedSender<occupancy::Op>>,
    /// (account, reason) → the minute its last `limit.exceeded` was sent.
    limits_sent: Mutex<HashMap<(Box<str>, &'static str), u64>>,
    /// Serialises reloads.
    reload: Mutex<()>,
    me: std::sync::Weak<Webhooks>,
}

impl std::fmt::Debug for Webhooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Webhooks({} endpoints)", self.endpoints.load().len())
    }
}

impl Webhooks {
    /// `redis`: in cluster mode, the bridge's command connection, which
    /// the shared queues use.
    pub fn new(
        config: &Config,
        metrics: Arc<WebhookMetrics>,
        redis: Option<crate::cluster::redis::Shared>,
    ) -> Arc<Webhooks> {
        let cluster_config = redis.map(|link| cluster::Params::new(config, link));
        let webhooks = Arc::new_cyclic(|me| Webhooks {
            endpoints: ArcSwap::from_pointee(Vec::new()),
            metrics,
            runtime: OnceLock::new(),
            cluster: OnceLock::new(),
            cluster_config,
            occupancy: OnceLock::new(),
            limits_sent: Mutex::new(HashMap::new()),
            reload: Mutex::new(()),
            me: me.clone(),
        });
        webhooks.apply(&configured(config));
        webhooks
    }

    /// The webhooks' runtime, once the first endpoint started it.
    pub fn runtime_handle(&self) -> Option<tokio::runtime::Handle> {
        self.runtime.get().map(|r| r.handle().clone())
    }

    fn runtime(&self) -> &runtime::Runtime {
        self.runtime.get_or_init(|| {
            let rt = runtime::Runtime::start().expect("starting the webhook thread");
            if let Some(config) = &self.cluster_config {
                let c = cluster::Cluster::new(config);
                rt.handle().spawn(c.clone().preload());
                rt.handle().spawn(c.clone().lease_loop());
                let _ = self.cluster.set(c);
            }
            let (tx, rx) = mpsc::unbounded_channel();
            rt.handle().spawn(occupancy::run(
                self.me.clone(),
                self.cluster.get().cloned(),
                tx.clone(),
                rx,
            ));
            let _ = self.occupancy.set(tx);
            rt
        })
    }

    /// Renews the Redis state of the channels and members this node holds
    /// now, as the occupancy task does every
    /// [`cluster::OCCUPANCY_RENEW_EVERY`]; how many had state to renew (0
    /// on one node, or before any endpoint started the webhooks).
    pub async fn renew_occupancy(&self) -> usize {
        let Some(tx) = self.occupancy.get() else {
            return 0;
        };
        let (done, answer) = tokio::sync::oneshot::channel();
        if tx.send(occupancy::Op::Renew(Some(done))).is_err() {
            return 0;
        }
        answer.await.unwrap_or(0)
    }

    /// Applies a (validated) config: new endpoints start, removed ones stop
    /// (their pending events are counted as discarded), an endpoint whose
    /// receiver, secrets, events and channels are unchanged keeps its queue
    /// and gets the new pacing; any other change starts it afresh.
    pub fn apply(&self, config: &[WebhookEndpoint]) {
        let _serial = self.reload.lock();
        let old = self.endpoints.load_full();
        let mut next = Vec::with_capacity(config.len());
        for cfg in config {
            match old.iter().find(|e| e.config.load().id == cfg.id) {
                Some(ep) if ep.config.load().same_target(cfg) => {
                    if **ep.config.load() != *cfg {
                        ep.reconfigure(cfg.clone());
                        tracing::info!(target: "tidegate::webhook", endpoint = %cfg.id, "endpoint pacing changed; pending events kept");
                    }
                    next.push(ep.clone());
                }
                found => {
                    if let Some(ep) = found {
                        self.retire(ep, "changed");
                    }
                    let handle = self.runtime().handle().clone();
                    let ep = Endpoint::new(
                        cfg.clone(),
                        self.metrics.clone(),
                        self.cluster.get().cloned(),
                    );
                    handle.spawn(ep.clone().run());
                    tracing::info!(target: "tidegate::webhook", endpoint = %cfg.id, url = %send::redacted(&cfg.url), "endpoint started");
                    next.push(ep);
                }
            }
        }
        for ep in old.iter() {
            let id = ep.config.load().id.clone();
            if !config.iter().any(|c| c.id == id) {
                self.retire(ep, "removed");
                self.metrics.forget(&id);
            }
        }
        self.endpoints.store(Arc::new(next));
    }

    fn retire(&self, ep: &Endpoint, why: &'static str) {
        let id = ep.id();
        let pending = ep.stop();
        if !pending.is_empty() {
            self.metrics
                .count(&id, outcome::DISCARDED, pending.len() as u64);
        }
        tracing::info!(target: "tidegate::webhook", endpoint = %id, discarded = pending.len(), why, "endpoint stopped");
    }

    pub fn endpoints(&self) -> Arc<Vec<Arc<Endpoint>>> {
        self.endpoints.load_full()
    }

    /// Endpoints whose channel globs cover `channel`.
    pub fn endpoints_for(&self, channel: &str) -> Vec<Arc<Endpoint>> {
        self.endpoints
            .load()
            .iter()
            .filter(|e| e.config.load().covers(channel))
            .cloned()
            .collect()
    }

    /// `message.published`: called once per message by the node that
    /// assigned its `seq`. Costs one pointer load when no endpoint
    /// is configured.
    pub fn published(&self, channel: &str, seq: u64, data: &str, key: Option<&str>) {
        let endpoints = self.endpoints.load();
        if endpoints.is_empty() {
            return;
        }
        let mut event = None;
        for ep in endpoints.iter() {
            let cfg = ep.config.load();
            if cfg.wants(event::PUBLISHED) && cfg.covers(channel) {
                let e = event.get_or_insert_with(|| Event::published(channel, seq, data, key));
                ep.enqueue(e.clone());
            }
        }
    }

    /// The hub's occupancy hook: called under the channel's lock when its
    /// first local subscriber arrives or its last one leaves.
    pub fn occupancy_changed(&self, channel: &Arc<str>, occupied: bool) {
        if self.endpoints.load().is_empty() {
            return;
        }
        if let Some(tx) = self.occupancy.get() {
            let subject = occupancy::Subject::channel(channel.clone());
            let _ = tx.send(occupancy::Op::Local(subject, occupied));
        }
    }

    /// Presence (§13): `user`'s first connection in `channel` on this node
    /// joined (`true`) or its last one here left (`false`). The occupancy
    /// task turns these into `member.added` / `member.removed`, once for
    /// the cluster, the removal after `vacated_delay_ms`.
    pub fn member_changed(&self, channel: &str, user: &Arc<str>, present: bool) {
        if self.endpoints.load().is_empty() {
            return;
        }
        if let Some(tx) = self.occupancy.get() {
            let subject = occupancy::Subject::member(channel.into(), user.clone());
            let _ = tx.send(occupancy::Op::Local(subject, present));
        }
    }

    /// An event of a Pusher app's channel that is not an occupancy change
    /// (`client_event`, `cache_miss`: §16), for the app's endpoints that
    /// list it; `channel` is the hub's name, `fields` the event's object.
    /// `fields` is called only when an endpoint takes the event.
    pub fn pusher_event(
        &self,
        channel: &str,
        kind: &'static str,
        fields: impl FnOnce() -> serde_json::Value,
    ) {
        let mut fields = Some(fields);
        let mut event = None;
        for ep in self.endpoints.load().iter() {
            let cfg = ep.config.load();
            if cfg.pusher.is_some() && cfg.wants(kind) && cfg.covers(channel) {
                let e = event.get_or_insert_with(|| {
                    let f = fields.take().map(|f| f()).unwrap_or_default();
                    Event::pusher(kind, &f)
                });
                ep.enqueue(e.clone());
            }
        }
    }

    /// `limit.exceeded` for `account`, at most once per account, reason and
    /// minute on this node. `close` is the close code its sockets got.
    pub fn limit_exceeded(&self, account: &str, reason: &'static str, close: Option<u16>) {
        let endpoints = self.endpoints.load();
        if !endpoints
            .iter()
            .any(|e| e.config.load().wants(event::LIMIT_EXCEEDED))
        {
            return;
        }
        let minute = send::unix_secs() / LIMIT_WINDOW_SECS;
        {
            let mut sent = self.limits_sent.lock();
            if sent.len() > 10_000 {
                sent.retain(|_, m| *m == minute);
            }
            let last = sent.insert((account.into(), reason), minute);
            if last == Some(minute) {
                return;
            }
        }
        let event = Event::limit_exceeded(account, reason, close);
        let send = move |endpoints: &[Arc<Endpoint>]| {
            for ep in endpoints {
                if ep.config.load().wants(event::LIMIT_EXCEEDED) {
                    ep.enqueue(event.clone());
                }
            }
        };
        match (self.cluster.get(), self.runtime.get()) {
            (Some(c), Some(rt)) => {
                // Once per account, reason and minute across the cluster.
                let (c, account) = (c.clone(), account.to_owned());
                let endpoints = endpoints.clone();
                rt.handle().spawn(async move {
                    match c.limit_once(&account, reason, minute).await {
                        Ok(true) => send(&endpoints),
                        Ok(false) => {}
                        Err(e) => {
                            tracing::warn!(target: "tidegate::webhook", error = %e, "cannot deduplicate limit.exceeded in Redis; sending it");
                            send(&endpoints);
                        }
                    }
                });
            }
            _ => send(&endpoints),
        }
    }
}
