//! `[[webhooks]]`: the backends the broker notifies over HTTP (§9).
//!
//! Each entry is validated on its own so `check-config` reports every
//! broken endpoint at once, and resolved into a [`WebhookEndpoint`] with its
//! secrets read (from the file or the environment) and decoded, its globs
//! compiled, and its `ca_file` read.
//!
//! A secret is text as Standard Webhooks libraries take it: `whsec_`
//! followed by base64, whose decoded bytes are the HMAC key (what a
//! receiver's `new Webhook("whsec_...")` verifies with), or any other text,
//! whose UTF-8 bytes are the key (the libraries' "raw" format; earlier
//! releases took every secret this way).

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;

use crate::protocol::glob::Glob;

/// The events of §9, by their wire names.
pub const EVENT_TYPES: [&str; 6] = [
    "channel.occupied",
    "channel.vacated",
    "message.published",
    "limit.exceeded",
    "member.added",
    "member.removed",
];

/// The shortest secret accepted, in key bytes (a `whsec_` secret's decoded
/// bytes): HMAC-SHA256 with less is guessable. Standard Webhooks asks for
/// 24 to 64.
pub const MIN_SECRET_BYTES: usize = 24;

/// The prefix of a Standard Webhooks secret.
pub const WHSEC_PREFIX: &str = "whsec_";

/// The HMAC key a secret's text stands for: the base64-decoded bytes after
/// `whsec_`, or the text's own bytes.
pub fn webhook_key(secret: &str) -> Result<Vec<u8>, String> {
    match secret.strip_prefix(WHSEC_PREFIX) {
        Some(b64) => STANDARD
            .decode(b64)
            .map_err(|e| format!("is not `whsec_` and base64 ({e})")),
        None => Ok(secret.as_bytes().to_vec()),
    }
}

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
    /// https: a PEM bundle of the only roots that verify the receiver
    /// (default: the system's).
    pub ca_file: Option<String>,
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
            ca_file: None,
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
    /// HMAC keys (decoded secrets), newest first.
    pub secrets: Vec<Vec<u8>>,
    /// The roots an https receiver is verified with, as PEM (`ca_file`);
    /// `None`: the system's.
    pub ca_pem: Option<Vec<u8>>,
    pub events: Vec<String>,
    pub channels: Vec<String>,
    globs: Vec<Glob>,
    pub pacing: Pacing,
    /// A Pusher app's webhook (§16): its events in Pusher's format and
    /// names, for that app's channels only. `None`: §9's own.
    pub pusher: Option<PusherTarget>,
}

/// The app a Pusher-format endpoint belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PusherTarget {
    /// `X-Pusher-Key`.
    pub key: String,
    /// The hub's prefix of the app's channels (`pusher|{id}|`): what it
    /// covers, and what is cut off to give the Pusher name.
    pub prefix: String,
}

/// The Pusher name of a §9 event this front also sends (`channel.occupied`
/// is `channel_occupied`); others are named the same on both.
pub fn pusher_event_name(kind: &str) -> &str {
    match kind {
        "channel.occupied" => "channel_occupied",
        "channel.vacated" => "channel_vacated",
        "member.added" => "member_added",
        "member.removed" => "member_removed",
        other => other,
    }
}

impl WebhookEndpoint {
    /// Whether the endpoint takes `event` (§9's name; a Pusher app's
    /// endpoint lists Pusher's).
    pub fn wants(&self, event: &str) -> bool {
        let event = match self.pusher {
            Some(_) => pusher_event_name(event),
            None => event,
        };
        self.events.iter().any(|e| e == event)
    }

    /// Whether channel and message events of the hub channel `channel` go
    /// to this endpoint: §9's never see a Pusher app's, and an app's see
    /// only its own (apps are isolated, §16), matched by their Pusher name.
    pub fn covers(&self, channel: &str) -> bool {
        let name = match &self.pusher {
            None if crate::protocol::channel::is_pusher(channel) => return false,
            None => channel,
            Some(p) => match channel.strip_prefix(&p.prefix) {
                // A signed-in user's channel (§16's `#server-to-user-{id}`)
                // is the user's, not one of the app's channels.
                Some(name) if name.starts_with("#server-to-user-") => return false,
                Some(name) => name,
                None => return false,
            },
        };
        self.globs.iter().any(|g| g.matches(name))
    }

    /// The Pusher name of a hub channel this endpoint covers.
    pub fn pusher_name<'a>(&self, channel: &'a str) -> &'a str {
        self.pusher
            .as_ref()
            .and_then(|p| channel.strip_prefix(&p.prefix))
            .unwrap_or(channel)
    }

    /// Same receiver, same events: only [`Pacing`] may differ, so pending
    /// events stay queued across the reload.
    pub fn same_target(&self, other: &WebhookEndpoint) -> bool {
        self.id == other.id
            && self.url == other.url
            && self.secrets == other.secrets
            && self.ca_pem == other.ca_pem
            && self.events == other.events
            && self.channels == other.channels
            && self.pusher == other.pusher
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
    let mut out: Vec<WebhookEndpoint> = Vec::new();
    for (path, entry) in super::entries::<WebhookEntry>(value, "webhooks", |e| &e.id, problems) {
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
    let secrets = secrets(&entry, env, &mut |ok, what| {
        if !ok {
            problems.push(format!("{path}.{what}"));
        }
    });
    let ep = endpoint_with(entry, path, secrets, &EVENT_TYPES, problems);
    ep.filter(|_| problems.len() == before)
}

/// An outbound target's `id` (webhooks, hooks): 1-64 characters of
/// `[A-Za-z0-9_.-]`, a metric label and a log field.
pub(super) fn check_id(id: &str, need: &mut impl FnMut(bool, String)) {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    need(ok, "id: 1-64 characters of [A-Za-z0-9_.-]".into());
}

/// An outbound target's pacing (webhooks, hooks): `rate_per_sec`, `burst`,
/// `max_in_flight` and `timeout_ms`, each positive.
pub(super) fn check_pacing(
    (rate_per_sec, burst, max_in_flight, timeout_ms): (f64, u32, u32, u64),
    need: &mut impl FnMut(bool, String),
) {
    need(
        rate_per_sec > 0.0 && rate_per_sec.is_finite(),
        "rate_per_sec: must be a positive number".into(),
    );
    need(burst >= 1, "burst: must be at least 1".into());
    need(
        max_in_flight >= 1,
        "max_in_flight: must be at least 1".into(),
    );
    need(timeout_ms >= 1, "timeout_ms: must be at least 1".into());
}

/// An outbound target's `url` (webhooks, hooks): http or https, with a host.
pub(super) fn check_url(url: &str, need: &mut impl FnMut(bool, String)) -> Option<reqwest::Url> {
    match reqwest::Url::parse(url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => Some(u),
        Ok(_) => {
            need(
                false,
                "url: must be an http:// URL or an https:// one, with a host".into(),
            );
            None
        }
        Err(e) => {
            need(false, format!("url: {e}"));
            None
        }
    }
}

/// A signing secret as §9 reads it (`whsec_` decoded), at least
/// [`MIN_SECRET_BYTES`] long: the key, or `None` with the problem told.
pub(super) fn check_key(text: &str, need: &mut impl FnMut(bool, String)) -> Option<Vec<u8>> {
    match webhook_key(text) {
        Ok(key) => {
            need(
                key.len() >= MIN_SECRET_BYTES,
                format!(
                    "secret: must be at least {MIN_SECRET_BYTES} bytes (this one has {}{})",
                    key.len(),
                    if text.starts_with(WHSEC_PREFIX) {
                        " after decoding"
                    } else {
                        ""
                    }
                ),
            );
            Some(key)
        }
        Err(why) => {
            need(false, format!("secret: {why}"));
            None
        }
    }
}

/// An endpoint from its entry with its HMAC keys already read, its events
/// checked against `known` (§9's names, or another front's: the Pusher
/// apps' webhooks take Pusher's names and the app's secret).
pub(super) fn endpoint_with(
    entry: WebhookEntry,
    path: &str,
    secrets: Vec<Vec<u8>>,
    known: &[&str],
    problems: &mut Vec<String>,
) -> Option<WebhookEndpoint> {
    let before = problems.len();
    let mut need = |ok: bool, what: String| {
        if !ok {
            problems.push(format!("{path}.{what}"));
        }
    };
    check_id(&entry.id, &mut need);
    let url = check_url(&entry.url, &mut need);
    let ca_pem = entry
        .ca_file
        .as_deref()
        .and_then(|path| match ca(path, url.as_ref()) {
            Ok(pem) => Some(pem),
            Err(why) => {
                need(false, format!("ca_file: {why}"));
                None
            }
        });
    for e in &entry.events {
        need(
            known.contains(&e.as_str()),
            format!("events: unknown event {e:?} (known: {})", known.join(", ")),
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
    check_pacing(
        (
            entry.rate_per_sec,
            entry.burst,
            entry.max_in_flight,
            entry.timeout_ms,
        ),
        &mut need,
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
        ca_pem,
        pusher: None,
        events: entry.events,
        channels: entry.channels,
    })
}

/// `ca_file`'s PEM text, checked to hold certificates, for an https URL.
fn ca(path: &str, url: Option<&reqwest::Url>) -> Result<Vec<u8>, String> {
    if url.is_some_and(|u| u.scheme() != "https") {
        return Err("only used with an https:// URL".into());
    }
    let pem = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
    match reqwest::Certificate::from_pem_bundle(&pem) {
        Ok(certs) if !certs.is_empty() => Ok(pem),
        Ok(_) => Err(format!("{path}: no PEM certificate in it")),
        Err(e) => Err(format!("{path}: {e}")),
    }
}

/// Exactly one of `secret`, `secret_env`, `secrets`; each decoded
/// ([`webhook_key`]) and at least [`MIN_SECRET_BYTES`] long.
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
    let mut keys = Vec::new();
    for s in &list {
        keys.extend(check_key(s, need));
    }
    keys
}
