//! One hook and its protection (§15): the cache, single flight, the
//! breaker, the pacing bucket and the in-flight cap, in that order, then
//! the signed HTTP call. Runs on the hooks' own runtime (`hooks/mod.rs`),
//! so a slow backend never holds an actix worker.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::header::CONTENT_TYPE;
use tokio::sync::{Semaphore, oneshot};

use super::Event;
use super::breaker::{Admit, Breaker};
use super::cache::Cache;
use super::wire::{self, Answer, Ask};
use crate::config::HookConfig;
use crate::limiter::TokenBucket;
use crate::metrics::HookMetrics;
use crate::metrics::hooks::outcome;
use crate::webhook::send::{BODY_LIMIT, client, redacted, unix_secs};
use crate::webhook::sign::signature;

/// `retryAfterMs` of a failed call when neither the breaker nor the bucket
/// says longer.
pub const FAILURE_RETRY: Duration = Duration::from_secs(1);

/// What a call came to, before `on_error`.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Answer(Answer),
    /// No answer (failed or not made); worth asking again after this.
    Failed {
        retry: Duration,
    },
}

/// Waiters for the answer of an identical call in flight. Bounded by the
/// callers: each is an operation its client already paid for, waiting at
/// most the leader's `timeout_ms`.
type Flights = HashMap<String, Vec<oneshot::Sender<Outcome>>>;

pub struct Hook {
    pub config: HookConfig,
    client: reqwest::Client,
    pacing: Mutex<TokenBucket>,
    slots: Arc<Semaphore>,
    breaker: Mutex<Breaker>,
    cache: Mutex<Cache>,
    flights: Mutex<Flights>,
    metrics: Arc<HookMetrics>,
}

impl std::fmt::Debug for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Hook({})", self.config.id)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Hook {
    pub fn new(config: HookConfig, metrics: Arc<HookMetrics>) -> Hook {
        let now = Instant::now();
        metrics.set_breaker_open(&config.id, false);
        Hook {
            client: client(config.timeout, None),
            pacing: Mutex::new(TokenBucket::new(
                f64::from(config.burst),
                config.rate_per_sec,
                now,
            )),
            slots: Arc::new(Semaphore::new(config.max_in_flight as usize)),
            breaker: Mutex::new(Breaker::new(config.breaker_failures, config.breaker_open)),
            cache: Mutex::new(Cache::new(config.cache, config.cache_max_entries)),
            flights: Mutex::new(HashMap::new()),
            metrics,
            config,
        }
    }

    fn count(&self, event: Event, outcome: &'static str) {
        self.metrics.call(&self.config.id, event.as_str(), outcome);
    }

    /// The decision for `ask`: from the cache, from an identical call in
    /// flight, or from a call made now.
    pub async fn decide(self: Arc<Self>, ask: Ask) -> Outcome {
        let event = ask.event;
        let key = ask.key();
        let cacheable = matches!(event, Event::Connect | Event::Subscribe);
        if cacheable && let Some(answer) = lock(&self.cache).get(&key, Instant::now()) {
            self.count(event, outcome::CACHED);
            return Outcome::Answer(answer);
        }
        let waiting = {
            let mut flights = lock(&self.flights);
            match flights.get_mut(&key) {
                Some(waiters) => {
                    let (tx, rx) = oneshot::channel();
                    waiters.push(tx);
                    Some(rx)
                }
                None => {
                    flights.insert(key.clone(), Vec::new());
                    None
                }
            }
        };
        if let Some(rx) = waiting {
            self.count(event, outcome::SHARED);
            return rx.await.unwrap_or(Outcome::Failed {
                retry: FAILURE_RETRY,
            });
        }
        let outcome = self.made(&ask).await;
        if cacheable
            && let Outcome::Answer(a @ (Answer::Result(_) | Answer::Error { .. })) = &outcome
        {
            lock(&self.cache).put(key.clone(), a.clone(), Instant::now());
        }
        let waiters = lock(&self.flights).remove(&key).unwrap_or_default();
        for w in waiters {
            let _ = w.send(outcome.clone());
        }
        outcome
    }

    /// A call not made: counted `shed`; a failure for the breaker unless
    /// the breaker itself refused it.
    fn shed(&self, event: Event, retry: Duration, breaker: bool) -> Outcome {
        self.count(event, outcome::SHED);
        let retry = if breaker {
            self.failed_breaker(Instant::now()).unwrap_or(retry)
        } else {
            retry
        };
        Outcome::Failed {
            retry: retry.max(Duration::from_millis(1)),
        }
    }

    /// Counts a failure; `Some(open_for)` when the breaker is open now.
    fn failed_breaker(&self, now: Instant) -> Option<Duration> {
        let open = lock(&self.breaker).failure(now);
        self.metrics.set_breaker_open(&self.config.id, open);
        open.then_some(self.config.breaker_open)
    }

    /// The breaker, a token and a slot within `timeout_ms`, then the call.
    async fn made(&self, ask: &Ask) -> Outcome {
        let event = ask.event;
        let start = Instant::now();
        let deadline = start + self.config.timeout;
        // A call waits for its token and slot at most half its time, so
        // the backend, once asked, has at least the other half to answer:
        // a call sent with its time nearly spent would cost the backend
        // work whose answer the broker no longer waits for (in a storm,
        // 3 % of the calls, each then asked again).
        let queued_until = start + self.config.timeout / 2;
        if let Admit::Refuse(wait) = lock(&self.breaker).admit(start) {
            return self.shed(event, wait, false);
        }
        // A token now, or reserved for when it comes if that is within
        // the wait: the backend never sees more than the bucket allows.
        let wait = {
            let mut bucket = lock(&self.pacing);
            match bucket.try_take(1.0, start) {
                Ok(()) => Duration::ZERO,
                Err(wait) if start + wait <= queued_until => {
                    bucket.force_take(1.0, start);
                    wait
                }
                Err(wait) => return self.shed(event, wait.max(FAILURE_RETRY), true),
            }
        };
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        let slot = tokio::time::timeout_at(queued_until.into(), self.slots.clone().acquire_owned());
        let Ok(Ok(_permit)) = slot.await else {
            return self.shed(event, FAILURE_RETRY, true);
        };
        let sent = Instant::now();
        let result = tokio::time::timeout_at(deadline.into(), self.post(ask, deadline - sent))
            .await
            .unwrap_or_else(|_| Err("timeout".into()));
        self.metrics.duration(
            &self.config.id,
            event.as_str(),
            sent.elapsed().as_secs_f64(),
        );
        match result {
            Ok(answer) => {
                lock(&self.breaker).success();
                self.metrics.set_breaker_open(&self.config.id, false);
                self.count(
                    event,
                    match answer {
                        Answer::Result(_) => outcome::ALLOWED,
                        Answer::Error { .. } => outcome::REFUSED,
                        Answer::Disconnect { .. } => outcome::DISCONNECTED,
                    },
                );
                Outcome::Answer(answer)
            }
            Err(why) => {
                tracing::info!(
                    hook = %self.config.id,
                    url = %redacted(&self.config.url),
                    event = event.as_str(),
                    %why,
                    "hook call failed"
                );
                self.count(event, outcome::FAILED);
                let retry = self.failed_breaker(Instant::now()).unwrap_or(FAILURE_RETRY);
                Outcome::Failed { retry }
            }
        }
    }

    /// One signed POST and its answer, read up to [`BODY_LIMIT`].
    async fn post(&self, ask: &Ask, timeout: Duration) -> Result<Answer, String> {
        let call_id = format!("hk_{:032x}", rand::random::<u128>());
        let body = wire::body(ask, &call_id, &self.config.id, crate::clock::unix_ms());
        let ts = unix_secs();
        let sig = signature(
            std::slice::from_ref(&self.config.secret),
            &call_id,
            ts,
            &body,
        );
        let mut response = self
            .client
            .post(self.config.url.clone())
            .timeout(timeout)
            .header(CONTENT_TYPE, "application/json")
            .header("webhook-id", &call_id)
            .header("webhook-timestamp", ts)
            .header("webhook-signature", sig)
            .body(body)
            .send()
            .await
            .map_err(|e| {
                if e.is_timeout() {
                    "timeout".to_string()
                } else {
                    format!("request: {e}")
                }
            })?;
        let status = response.status().as_u16();
        let mut read = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| format!("reading the answer: {e}"))?
        {
            read.extend_from_slice(&chunk);
            if read.len() > BODY_LIMIT {
                return Err(format!("the answer is over {BODY_LIMIT} bytes"));
            }
        }
        wire::parse(status, &read, ask.event)
    }
}
