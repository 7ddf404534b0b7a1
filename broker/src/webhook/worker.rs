//! One endpoint: its queue, pacing bucket, in-flight cap, pause and
//! health, and the task that sends its events.
//!
//! Nothing here is shared between endpoints, which is the isolation §9
//! asks for: an endpoint that times out holds its own in-flight slots and
//! its own backoff, and every other endpoint's task never waits on it.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::cluster::Cluster;
use super::event::Event;
use super::health::{Health, Status};
use super::queue::Queue;
use super::send::{self, Outcome};
use crate::config::WebhookEndpoint;
use crate::limiter::TokenBucket;
use crate::metrics::webhooks::{WebhookMetrics, outcome};

/// One configured endpoint while it runs.
pub struct Endpoint {
    pub config: ArcSwap<WebhookEndpoint>,
    client: reqwest::Client,
    pub(super) state: Mutex<State>,
    pub(super) wake: Notify,
    pub(super) cancel: CancellationToken,
    pub(super) metrics: Arc<WebhookMetrics>,
    /// Cluster mode: the shared queue, and this node's appends to it.
    pub(super) cluster: Option<ClusterLink>,
    /// Channels this endpoint was told are occupied (and not yet vacated),
    /// so it gets each `channel.occupied` once and a `channel.vacated`
    /// only after it.
    pub announced: Mutex<HashSet<Arc<str>>>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Endpoint({})", self.config.load().id)
    }
}

pub(super) struct ClusterLink {
    pub shared: Arc<Cluster>,
    pub appends: tokio::sync::mpsc::Sender<Event>,
    pub appends_rx: Mutex<Option<tokio::sync::mpsc::Receiver<Event>>>,
    /// Something was appended: the owner may read.
    pub fed: Notify,
}

pub(super) struct State {
    /// Single node: every pending event. Cluster mode: the entries this
    /// node read from the stream while it owns the endpoint.
    pub queue: Queue,
    /// Cluster mode: attempts may start only while the owner lock is valid
    /// for longer than an attempt can take (`None`: not the owner).
    pub owner_until: Option<Instant>,
    /// Cluster mode: stream entries being attempted now.
    pub entries_in_flight: HashSet<Arc<str>>,
    pub bucket: TokenBucket,
    pub paused_until: Option<Instant>,
    pub in_flight: u32,
    pub health: Health,
    /// A 410 disabled the endpoint until its config changes.
    pub gone: bool,
}

impl State {
    /// Holds attempts back until at least `until` (a longer hold stands).
    fn hold_until(&mut self, until: Instant) {
        self.paused_until = Some(self.paused_until.map_or(until, |u| u.max(until)));
    }

    /// The receiver asked for a pause of `wait` (its own answer, or one
    /// another node recorded): hold attempts back that long, and count it
    /// against health so the kept event then goes out alone (`next_step`).
    pub(super) fn pause(&mut self, now: Instant, wait: Duration) {
        self.health.paused(now);
        self.hold_until(now + wait);
    }
}

/// What the worker does next.
enum Step {
    Send(Event),
    WaitUntil(Instant),
    Idle,
}

impl Endpoint {
    pub fn new(
        config: WebhookEndpoint,
        metrics: Arc<WebhookMetrics>,
        cluster: Option<Arc<Cluster>>,
    ) -> Arc<Endpoint> {
        let p = &config.pacing;
        let bucket = TokenBucket::new(f64::from(p.burst), p.rate_per_sec, Instant::now());
        metrics.set_queue(&config.id, 0);
        metrics.set_healthy(&config.id, true);
        let cluster = cluster.map(|shared| {
            let (tx, rx) = tokio::sync::mpsc::channel(p.queue_max.clamp(1, 100_000));
            ClusterLink {
                shared,
                appends: tx,
                appends_rx: Mutex::new(Some(rx)),
                fed: Notify::new(),
            }
        });
        Arc::new(Endpoint {
            cluster,
            client: send::client(p.timeout, config.ca_pem.as_deref()),
            config: ArcSwap::from_pointee(config),
            state: Mutex::new(State {
                queue: Queue::default(),
                owner_until: None,
                entries_in_flight: HashSet::new(),
                bucket,
                paused_until: None,
                in_flight: 0,
                health: Health::default(),
                gone: false,
            }),
            wake: Notify::new(),
            cancel: CancellationToken::new(),
            metrics,
            announced: Mutex::new(HashSet::new()),
        })
    }

    pub fn id(&self) -> String {
        self.config.load().id.clone()
    }

    /// Queues an event (never blocks: called from the broker's hot paths).
    pub fn enqueue(&self, event: Event) {
        let cfg = self.config.load();
        if let Some(link) = &self.cluster {
            if link.appends.try_send(event).is_err() {
                // Redis is too slow or away and the append buffer is full.
                self.metrics.count(&cfg.id, outcome::DROPPED, 1);
            }
            return;
        }
        let (dropped, len) = {
            let mut st = self.state.lock();
            let dropped = st.queue.push(event, cfg.pacing.queue_max);
            (dropped, st.queue.len())
        };
        self.after_drops(&cfg.id, dropped, len);
        self.wake.notify_one();
    }

    pub(super) fn after_drops(&self, id: &str, dropped: Vec<Event>, len: usize) {
        if self.cluster.is_none() {
            // In cluster mode the gauge is the stream's length.
            self.metrics.set_queue(id, len);
        }
        if dropped.is_empty() {
            return;
        }
        self.metrics
            .count(id, outcome::DROPPED, dropped.len() as u64);
        for e in dropped {
            tracing::warn!(target: "tidegate::webhook", endpoint = id, event = &*e.id, kind = e.kind, "queue full: oldest event dropped");
        }
    }

    /// Applies new pacing to the same receiver, keeping pending events. A
    /// changed entry also lifts a 410's disable.
    pub fn reconfigure(&self, config: WebhookEndpoint) {
        let p = config.pacing.clone();
        let id = config.id.clone();
        self.config.store(Arc::new(config));
        let (dropped, len) = {
            let mut st = self.state.lock();
            st.bucket
                .reconfigure(f64::from(p.burst), p.rate_per_sec, Instant::now());
            st.gone = false;
            // In cluster mode the stream is trimmed on its next append.
            let dropped = if self.cluster.is_none() {
                st.queue.shrink_to(p.queue_max)
            } else {
                Vec::new()
            };
            (dropped, st.queue.len())
        };
        self.after_drops(&id, dropped, len);
        self.metrics.set_healthy(&id, true);
        self.wake.notify_one();
    }

    /// Stops the worker; returns what was still pending on this node (in
    /// cluster mode nothing: the stream keeps the events).
    pub fn stop(&self) -> Vec<Event> {
        self.cancel.cancel();
        let local = self.state.lock().queue.take_all();
        if self.cluster.is_some() {
            Vec::new()
        } else {
            local
        }
    }

    /// Cluster mode: whether this node sends this endpoint's events now.
    pub fn is_owner(&self) -> bool {
        self.state.lock().owner_until.is_some()
    }

    pub fn pending(&self) -> usize {
        self.state.lock().queue.len()
    }

    pub fn status(&self) -> Status {
        let cfg = self.config.load();
        self.state.lock().health.status(Instant::now(), &cfg.pacing)
    }

    fn next_step(&self, now: Instant) -> Step {
        let cfg = self.config.load();
        let mut st = self.state.lock();
        if st.gone || st.queue.is_empty() {
            return Step::Idle;
        }
        if self.cluster.is_some() && st.owner_until.is_none_or(|u| u <= now + cfg.pacing.timeout) {
            return Step::Idle;
        }
        if let Some(until) = st.paused_until {
            if now < until {
                return Step::WaitUntil(until);
            }
            st.paused_until = None;
        }
        // An endpoint that has failed or asked for a pause since its last
        // success gets one attempt at a time: the event kept for retry goes
        // first and alone (so it reaches the receiver before anything newer,
        // as docs/webhooks.md promises), a receiver just out of its pause is
        // not met with a burst, and an unhealthy one gets a single probe.
        // The window reopens on the first delivery.
        let cap = match st.health.status(now, &cfg.pacing) {
            Status::Healthy => cfg.pacing.max_in_flight,
            Status::Failing | Status::Unhealthy => 1,
        };
        if st.in_flight >= cap {
            return Step::Idle;
        }
        if let Err(wait) = st.bucket.try_take(1.0, now) {
            return Step::WaitUntil(now + wait);
        }
        let Some(event) = st.queue.pop() else {
            return Step::Idle;
        };
        st.in_flight += 1;
        if let Some(entry) = &event.entry {
            st.entries_in_flight.insert(entry.clone());
        }
        if self.cluster.is_none() {
            self.metrics.set_queue(&cfg.id, st.queue.len());
        }
        Step::Send(event)
    }

    /// The endpoint's task: runs until the endpoint is removed.
    pub async fn run(self: Arc<Self>) {
        if let Some(link) = &self.cluster {
            if let Some(rx) = link.appends_rx.lock().take() {
                tokio::spawn(self.clone().append_loop(link.shared.clone(), rx));
            }
            tokio::spawn(self.clone().own_loop(link.shared.clone()));
        }
        loop {
            let step = self.next_step(Instant::now());
            let wait = match step {
                Step::Send(event) => {
                    tokio::spawn(self.clone().attempt(event));
                    continue;
                }
                Step::WaitUntil(t) => Some(t),
                Step::Idle => None,
            };
            let sleep = async {
                match wait {
                    Some(t) => tokio::time::sleep_until(t.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = self.cancel.cancelled() => return,
                _ = self.wake.notified() => {}
                _ = sleep => {}
            }
        }
    }

    async fn attempt(self: Arc<Self>, mut event: Event) {
        let cfg = self.config.load_full();
        event.attempts += 1;
        let result = tokio::select! {
            r = send::attempt(&self.client, &cfg, &event) => r,
            _ = self.cancel.cancelled() => return,
        };
        self.settle(&cfg, event, result);
        self.wake.notify_one();
    }

    /// Applies an attempt's outcome: count it, log it with the event id,
    /// and requeue, pause or back off as §9 says.
    fn settle(&self, cfg: &WebhookEndpoint, event: Event, result: Outcome) {
        let now = Instant::now();
        let id = cfg.id.as_str();
        let p = &cfg.pacing;
        let mut st = self.state.lock();
        st.in_flight = st.in_flight.saturating_sub(1);
        if let Some(entry) = &event.entry {
            st.entries_in_flight.remove(entry);
        }
        let was = st.health.status(now, p);
        let (label, requeue) = match &result {
            Outcome::Delivered(code) => {
                st.health.success();
                tracing::debug!(target: "tidegate::webhook", endpoint = id, event = &*event.id, kind = event.kind, status = code, attempts = event.attempts, "delivered");
                (outcome::DELIVERED, false)
            }
            Outcome::Pause(wait, code) => {
                st.pause(now, *wait);
                tracing::info!(target: "tidegate::webhook", endpoint = id, event = &*event.id, status = code, pause_ms = wait.as_millis() as u64, "receiver asked for a pause");
                (outcome::PAUSED, true)
            }
            Outcome::Retry(why) => {
                let wait = st.health.failure(now, p);
                st.hold_until(now + wait);
                tracing::info!(target: "tidegate::webhook", endpoint = id, event = &*event.id, attempts = event.attempts, error = %why, retry_in_ms = wait.as_millis() as u64, "attempt failed; will retry");
                (outcome::RETRY, true)
            }
            Outcome::Rejected(code) => {
                tracing::warn!(target: "tidegate::webhook", endpoint = id, event = &*event.id, kind = event.kind, status = code, "receiver rejected the event; not retried");
                (outcome::REJECTED, false)
            }
            Outcome::Gone => {
                st.gone = true;
                tracing::warn!(target: "tidegate::webhook", endpoint = id, event = &*event.id, "410 Gone: endpoint disabled until its config changes");
                (outcome::GONE, false)
            }
        };
        let status = st.health.status(now, p);
        if status != was {
            tracing::warn!(target: "tidegate::webhook", endpoint = id, from = was.as_str(), to = status.as_str(), "endpoint health changed");
        }
        let final_entry = (!requeue).then(|| event.entry.clone()).flatten();
        let pause = match &result {
            Outcome::Pause(wait, _) => Some(*wait),
            _ => None,
        };
        let dropped = match &self.cluster {
            None if requeue => st.queue.push_front(event, p.queue_max),
            // Cluster mode: a deposed owner leaves the entry pending for the
            // next one instead of retrying it.
            Some(_) if requeue && st.owner_until.is_some() => {
                st.queue.push_front(event, usize::MAX)
            }
            _ => Vec::new(),
        };
        let len = st.queue.len();
        let healthy = status != Status::Unhealthy && !st.gone;
        drop(st);
        self.metrics.count(id, label, 1);
        self.metrics.set_healthy(id, healthy);
        self.after_drops(id, dropped, len);
        if let Some(link) = &self.cluster {
            self.share_outcome(link.shared.clone(), id, final_entry, pause);
        }
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}
