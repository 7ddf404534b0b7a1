//! Backend hooks (§15): the application decides who connects, subscribes,
//! publishes, keeps a hook-given session, and answers `rpc` frames; the
//! ladder protects the backend.
//!
//! Front-neutral: a front picks the hook for an event
//! ([`Hooks::hook_for`]), builds an [`Ask`] from what it knows of the
//! client ([`Client`]), and turns the [`Decision`] into its own words. The
//! calls run on the hooks' own thread and runtime; the front only awaits
//! the answer, so a slow backend never holds an actix worker.
//!
//! Per hook (`hook.rs`): the cache (`cache.rs`), single flight, the
//! breaker (`breaker.rs`), the pacing bucket and the in-flight cap. Caches
//! and single flight are per node.

mod breaker;
mod cache;
mod hook;
mod http;
pub mod order;
pub mod wire;

use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use arc_swap::ArcSwap;
use serde_json::{Map, Value};

pub use hook::{Hook, Outcome};
pub use http::HttpRefusal;
pub use wire::{Answer, Ask, Client};

use crate::config::{HookConfig, OnError};
use crate::metrics::HookMetrics;
use crate::webhook::runtime::Runtime;

/// The events of §15.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Event {
    Connect,
    Subscribe,
    Publish,
    Refresh,
    Rpc,
}

impl Event {
    pub const fn as_str(self) -> &'static str {
        match self {
            Event::Connect => "connect",
            Event::Subscribe => "subscribe",
            Event::Publish => "publish",
            Event::Refresh => "refresh",
            Event::Rpc => "rpc",
        }
    }
}

/// What a front acts on: the answer, or `on_error`'s.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// The hook's `result` (`{}` for a failure under `allow`, then
    /// `failed_open`: for `connect`, as if no hook were configured).
    Allowed {
        result: Map<String, Value>,
        failed_open: bool,
    },
    /// The hook's `error`: the client gets its code.
    Refused {
        code: String,
        message: String,
        retry_after_ms: Option<u64>,
    },
    /// Close the connection with this code (a handshake: 403 `forbidden`).
    Disconnect { code: u16, reason: String },
    /// No answer and `on_error = "deny"`: `hook_unavailable`, temporary.
    Unavailable { retry_after: Duration },
}

impl Decision {
    fn new(outcome: Outcome, on_error: OnError) -> Decision {
        match outcome {
            Outcome::Answer(Answer::Result(result)) => Decision::Allowed {
                result,
                failed_open: false,
            },
            Outcome::Answer(Answer::Error {
                code,
                message,
                retry_after_ms,
            }) => Decision::Refused {
                code,
                message,
                retry_after_ms,
            },
            Outcome::Answer(Answer::Disconnect { code, reason }) => {
                Decision::Disconnect { code, reason }
            }
            Outcome::Failed { retry } => match on_error {
                OnError::Deny => Decision::Unavailable { retry_after: retry },
                OnError::Allow => Decision::Allowed {
                    result: Map::new(),
                    failed_open: true,
                },
            },
        }
    }

    /// A publish result's `{"data":..}`: the message to publish instead.
    pub fn replaced_data(&self) -> Option<Box<serde_json::value::RawValue>> {
        let Decision::Allowed { result, .. } = self else {
            return None;
        };
        serde_json::value::to_raw_value(result.get("data")?).ok()
    }

    /// Whether it lets the operation through (dry-run comparisons).
    pub fn allows(&self) -> bool {
        matches!(self, Decision::Allowed { .. })
    }
}

/// Who decides an operation on a channel (§15).
#[derive(Debug, Clone)]
pub enum ChannelHook {
    /// No hook covers it: the token's globs.
    Token,
    /// A dry-run hook: asked and compared, the token enforced.
    Shadow(Arc<Hook>),
    /// The hook, in place of the token's globs.
    Deciding(Arc<Hook>),
}

/// The node's hooks, swapped whole on a reload (a hook whose config did
/// not change keeps its state: bucket, breaker, cache).
pub struct Hooks {
    hooks: ArcSwap<Vec<Arc<Hook>>>,
    /// Started on first use: a node without hooks has no hooks thread.
    runtime: OnceLock<Option<Runtime>>,
    metrics: Arc<HookMetrics>,
}

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Hooks({})", self.hooks.load().len())
    }
}

impl Hooks {
    pub fn new(configs: &[HookConfig], metrics: Arc<HookMetrics>) -> Hooks {
        let hooks = Hooks {
            hooks: ArcSwap::from_pointee(Vec::new()),
            runtime: OnceLock::new(),
            metrics,
        };
        hooks.apply(configs);
        hooks
    }

    /// A reloaded `[[hooks]]`.
    pub fn apply(&self, configs: &[HookConfig]) {
        let old = self.hooks.load();
        let next: Vec<Arc<Hook>> = configs
            .iter()
            .map(|c| {
                old.iter()
                    .find(|h| h.config == *c)
                    .cloned()
                    .unwrap_or_else(|| Arc::new(Hook::new(c.clone(), self.metrics.clone())))
            })
            .collect();
        self.hooks.store(Arc::new(next));
    }

    /// The hook deciding `event` (on `channel`, for subscribe and
    /// publish): the first listing it (and covering the channel).
    pub fn hook_for(&self, event: Event, channel: Option<&str>) -> Option<Arc<Hook>> {
        let needs_channel = matches!(event, Event::Subscribe | Event::Publish);
        self.hooks
            .load()
            .iter()
            .find(|h| {
                h.config.wants(event.as_str())
                    && (!needs_channel || channel.is_some_and(|c| h.config.covers(c)))
            })
            .cloned()
    }

    /// The hook for `event` on `channel` (subscribe, publish), split by
    /// whether it decides or only shadows the token (dry run).
    pub fn for_channel(&self, event: Event, channel: &str) -> ChannelHook {
        if !self.any() {
            return ChannelHook::Token;
        }
        match self.hook_for(event, Some(channel)) {
            None => ChannelHook::Token,
            Some(h) if h.config.dry_run => ChannelHook::Shadow(h),
            Some(h) => ChannelHook::Deciding(h),
        }
    }

    /// Whether any hook is configured (so fronts skip the work otherwise).
    pub fn any(&self) -> bool {
        !self.hooks.load().is_empty()
    }

    fn handle(&self) -> Option<tokio::runtime::Handle> {
        self.runtime
            .get_or_init(|| match Runtime::start_named("tidegate-hooks") {
                Ok(rt) => Some(rt),
                Err(e) => {
                    tracing::error!(error = %e, "the hooks runtime did not start");
                    None
                }
            })
            .as_ref()
            .map(|rt| rt.handle().clone())
    }

    /// Asks `hook`: the call runs on the hooks' runtime whatever happens
    /// to the returned future (identical callers share its answer).
    pub fn ask(&self, hook: &Arc<Hook>, ask: Ask) -> impl Future<Output = Decision> + 'static {
        let on_error = hook.config.on_error;
        let task = self.handle().map(|h| h.spawn(hook.clone().decide(ask)));
        async move {
            let outcome = match task {
                Some(task) => task.await.unwrap_or(Outcome::Failed {
                    retry: hook::FAILURE_RETRY,
                }),
                None => Outcome::Failed {
                    retry: hook::FAILURE_RETRY,
                },
            };
            Decision::new(outcome, on_error)
        }
    }

    /// A dry-run hook (§15): asks in the background and counts a
    /// disagreement with the token's decision; the token's is enforced by
    /// the caller at once. A failure is not compared.
    pub fn shadow(&self, hook: &Arc<Hook>, ask: Ask, token_allows: bool) {
        let event = ask.event;
        let (metrics, id) = (self.metrics.clone(), hook.config.id.clone());
        let Some(h) = self.handle() else {
            return;
        };
        let decided = hook.clone().decide(ask);
        h.spawn(async move {
            let hook_allows = match decided.await {
                Outcome::Answer(Answer::Result(_)) => true,
                Outcome::Answer(_) => false,
                Outcome::Failed { .. } => return,
            };
            if hook_allows != token_allows {
                tracing::info!(
                    hook = %id,
                    event = event.as_str(),
                    hook_allows,
                    token_allows,
                    "dry-run hook disagrees with the token"
                );
                metrics.disagreement(&id, event.as_str());
            }
        });
    }

    pub fn metrics(&self) -> &HookMetrics {
        &self.metrics
    }
}

/// The refresh lead for a hook-given expiry `life` away: `refresh_lead_ms`,
/// or 10 % of the remaining life, at least 1 s (§15).
pub fn refresh_lead(config: &HookConfig, life: Duration) -> Duration {
    config
        .refresh_lead
        .unwrap_or_else(|| (life / 10).max(Duration::from_secs(1)))
}
