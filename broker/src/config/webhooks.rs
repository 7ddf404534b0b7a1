//! `[[webhooks]]`: the backends the broker notifies over HTTP (§9).
//!
//! Each entry is validated on its own so `check-config` reports every
//! broken endpoint at once, and resolved into a [`WebhookEndpoint`] with its
//! secrets read (from the file or the environment) and its globs compiled.

use std::time::Duration;

use serde::Deserialize;

use crate::protocol::glob::Glob;

/// The events of §9, by their wire names.
pub const EVENT_TYPES: [&str; 4] = [
    "channel.occupied",
    "channel.vacated",
    "message.published",
    "limit.exceeded",
];

/// The shortest secret accepted: HMAC-SHA256 with less is guessable.
pub const MIN_SECRET_BYTES: usize = 24;

/// One `[[webhooks]]` entry as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct WebhookEntry {
    pub id: String,
    pub url: String,
    pub secret: Option<String>,
    pub secret_env: Option<String>,
    /// `[new, old]` during a rotation: every request is signed with each.
    pub secrets: Option<Vec<String>>,
    pub events: Vec<String>,
    pub channels: Vec<String>,
    pub rate_per_sec: f64,
    pub burst: u32,
    pub max_in_flight: u32,
    pub timeout_ms: u64,
    pub queue_max: usize,
    pub vacated_delay_ms: u64,
    /// First retry delay; doubles per consecutive failure (§9: 1 s).
    pub backoff_base_ms: u64,
    /// Longest retry delay (§9: 5 min).
    pub backoff_max_ms: u64,
    /// Failing this long without a success makes the endpoint `unhealthy`
    /// (§9: 10 min).
    pub unhealthy_after_ms: u64,
    /// An unhealthy endpoint is probed this often (§9: once a minute).
    pub probe_interval_ms: u64,
}

impl Default for WebhookEntry {
    fn default() -> Self {
        WebhookEntry {
            id: String::new(),
            url: String::new(),
            secret: None,
            secret_env: None,
            secrets: None,
            events: EVENT_TYPES.iter().map(|s| (*s).to_owned()).collect(),
            channels: vec!["*".into()],
            rate_per_sec: 20.0,
            burst: 20,
            max_in_flight: 4,
            timeout_ms: 5000,
            queue_max: 10_000,
            vacated_delay_ms: 5000,
            backoff_base_ms: 1000,
            backoff_max_ms: 300_000,
            unhealthy_after_ms: 600_000,
            probe_interval_ms: 60_000,
        }
    }
}

/// How fast and how much an endpoint is sent: what a reload may change
/// while keeping the endpoint's pending events.
#[derive(Debug, Clone, PartialEq)]
pub struct Pacing {
    pub rate_per_sec: f64,
    pub burst: u32,
    pub max_in_flight: u32,
    pub timeout: Duration,
    pub queue_max: usize,
    pub vacated_delay: Duration,
    pub backoff_base: Duration,
    pub backoff_max: Duration,
    pub unhealthy_after: Duration,
    pub probe_interval: Duration,
}

/// A validated endpoint.
#[derive(Debug, Clone)]
pub struct WebhookEndpoint {
    pub id: String,
    pub url: reqwest::Url,
    /// Raw secret bytes, newest first.
    pub secrets: Vec<Vec<u8>>,
    pub events: Vec<String>,
    pub channels: Vec<String>,
    globs: Vec<Glob>,
    pub pacing: Pacing,
}

impl WebhookEndpoint {
    pub fn wants(&self, event: &str) -> bool {
        self.events.iter().any(|e| e == event)
    }

    /// Whether channel and message events of `channel` go to this endpoint.
    pub fn covers(&self, channel: &str) -> bool {
        self.globs.iter().any(|g| g.matches(channel))
    }

    /// Same receiver, same events: only [`Pacing`] may differ, so pending
    /// events stay queued across the reload.
    pub fn same_target(&self, other: &WebhookEndpoint) -> bool {
        self.id == other.id
            && self.url == other.url
            && self.secrets == other.secrets
            && self.events == other.events
            && self.channels == other.channels
    }
}

impl PartialEq for WebhookEndpoint {
    fn eq(&self, other: &Self) -> bool {
        self.same_target(other) && self.pacing == other.pacing
    }
}

/// Resolves the `webhooks` value (an array of tables), reporting every
/// problem with its path.
pub(super) fn resolve(
    value: toml::Value,
    env: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<String>,
) -> Vec<WebhookEndpoint> {
    let entries = match value {
        toml::Value::Table(t) if t.is_empty() => return Vec::new(),
        toml::Value::Array(a) => a,
        _ => {
            problems.push("webhooks: must be an array of tables ([[webhooks]])".into());
            return Vec::new();
        }
    };
    let mut out: Vec<WebhookEndpoint> = Vec::new();
    for (i, value) in entries.into_iter().enumerate() {
        let path = format!("webhooks[{i}]");
        let Some(entry) = super::section::<WebhookEntry>(value, &path, problems) else {
            continue;
        };
        let path = if entry.id.is_empty() {
            path
        } else {
            format!("{path} ({:?})", entry.id)
        };
        if let Some(ep) = endpoint(entry, &path, env, problems) {
            if out.iter().any(|o| o.id == ep.id) {
                problems.push(format!("{path}.id: {:?} is used twice", ep.id));
                continue;
            }
            out.push(ep);
        }
    }
    out
}

fn endpoint(
    entry: WebhookEntry,
    path: &str,
    env: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<String>,
) -> Option<WebhookEndpoint> {
    let before = problems.len();
    let mut need = |ok: bool, what: String| {
        if !ok {
            problems.push(format!("{path}.{what}"));
        }
    };
    let id_ok = !entry.id.is_empty()
        && entry.id.len() <= 64
        && entry
            .id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    need(id_ok, "id: 1-64 characters of [A-Za-z0-9_.-]".into());
    let url = match reqwest::Url::parse(&entry.url) {
        Ok(u) if u.scheme() == "http" && u.host().is_some() => Some(u),
        Ok(u) if u.scheme() == "https" => {
            need(
                false,
                "url: https is not built into this broker yet; terminate TLS in a local proxy and give its http:// address".into(),
            );
            Some(u)
        }
        Ok(_) => {
            need(false, "url: must be an http:// URL with a host".into());
            None
        }
        Err(e) => {
            need(false, format!("url: {e}"));
            None
        }
    };
    let secrets = secrets(&entry, env, &mut need);
    for e in &entry.events {
        need(
            EVENT_TYPES.contains(&e.as_str()),
            format!(
                "events: unknown event {e:?} (known: {})",
                EVENT_TYPES.join(", ")
            ),
        );
    }
    need(
        !entry.events.is_empty(),
        "events: name at least one event".into(),
    );
    need(
        !entry.channels.is_empty(),
        "channels: give at least one glob (\"*\" for all)".into(),
    );
    need(
        entry.rate_per_sec > 0.0 && entry.rate_per_sec.is_finite(),
        "rate_per_sec: must be a positive number".into(),
    );
    need(entry.burst >= 1, "burst: must be at least 1".into());
    need(
        entry.max_in_flight >= 1,
        "max_in_flight: must be at least 1".into(),
    );
    need(
        entry.timeout_ms >= 1,
        "timeout_ms: must be at least 1".into(),
    );
    need(entry.queue_max >= 1, "queue_max: must be at least 1".into());
    need(
        entry.backoff_base_ms >= 1 && entry.backoff_max_ms >= entry.backoff_base_ms,
        "backoff_base_ms: must be at least 1 and at most backoff_max_ms".into(),
    );
    need(
        entry.probe_interval_ms >= 1,
        "probe_interval_ms: must be at least 1".into(),
    );
    if problems.len() > before {
        return None;
    }
    let ms = Duration::from_millis;
    Some(WebhookEndpoint {
        globs: entry.channels.iter().map(|c| Glob::new(c)).collect(),
        pacing: Pacing {
            rate_per_sec: entry.rate_per_sec,
            burst: entry.burst,
            max_in_flight: entry.max_in_flight,
            timeout: ms(entry.timeout_ms),
            queue_max: entry.queue_max,
            vacated_delay: ms(entry.vacated_delay_ms),
            backoff_base: ms(entry.backoff_base_ms),
            backoff_max: ms(entry.backoff_max_ms),
            unhealthy_after: ms(entry.unhealthy_after_ms),
            probe_interval: ms(entry.probe_interval_ms),
        },
        id: entry.id,
        url: url?,
        secrets,
        events: entry.events,
        channels: entry.channels,
    })
}

/// Exactly one of `secret`, `secret_env`, `secrets`; each at least
/// [`MIN_SECRET_BYTES`] long.
fn secrets(
    entry: &WebhookEntry,
    env: &dyn Fn(&str) -> Option<String>,
    need: &mut impl FnMut(bool, String),
) -> Vec<Vec<u8>> {
    let list: Vec<String> = match (&entry.secret, &entry.secret_env, &entry.secrets) {
        (Some(s), None, None) => vec![s.clone()],
        (None, Some(var), None) => match env(var) {
            Some(s) => vec![s],
            None => {
                need(
                    false,
                    format!("secret_env: environment variable {var} is not set"),
                );
                Vec::new()
            }
        },
        (None, None, Some(list)) => {
            need(
                !list.is_empty() && list.len() <= 2,
                "secrets: give one or two secrets ([new, old])".into(),
            );
            list.clone()
        }
        _ => {
            need(
                false,
                "secret: give exactly one of `secret`, `secret_env` and `secrets`".into(),
            );
            Vec::new()
        }
    };
    for s in &list {
        need(
            s.len() >= MIN_SECRET_BYTES,
            format!(
                "secret: must be at least {MIN_SECRET_BYTES} bytes (this one has {})",
                s.len()
            ),
        );
    }
    list.into_iter().map(String::into_bytes).collect()
}
