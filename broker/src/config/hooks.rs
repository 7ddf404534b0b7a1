//! `[[hooks]]`: the backends the broker asks before it acts (§15).
//!
//! Each entry is validated on its own so `check-config` reports every
//! broken hook at once, and resolved into a [`HookConfig`] with its secret
//! read (from the file or the environment) and decoded as §9's are
//! ([`super::webhook_key`]), and its globs compiled.

use std::time::Duration;

use serde::Deserialize;

use super::webhooks::{check_id, check_key, check_pacing, check_url};
use crate::protocol::glob::Glob;

/// The events of §15, by their wire names.
pub const HOOK_EVENTS: [&str; 5] = ["connect", "subscribe", "publish", "refresh", "rpc"];

/// One `[[hooks]]` entry as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct HookEntry {
    pub id: String,
    pub url: String,
    pub events: Vec<String>,
    pub channels: Vec<String>,
    pub secret: Option<String>,
    pub secret_env: Option<String>,
    pub timeout_ms: u64,
    pub rate_per_sec: f64,
    pub burst: u32,
    pub max_in_flight: u32,
    pub on_error: OnError,
    pub cache_ms: u64,
    /// Cache entries kept per hook (oldest evicted past it): what bounds
    /// the cache, whatever `cache_ms` is.
    pub cache_max_entries: usize,
    pub headers: Vec<String>,
    pub allowed_origins: Vec<String>,
    pub dry_run: bool,
    pub breaker_failures: u32,
    pub breaker_open_ms: u64,
    pub refresh_lead_ms: u64,
}

impl Default for HookEntry {
    fn default() -> Self {
        HookEntry {
            id: String::new(),
            url: String::new(),
            events: Vec::new(),
            channels: vec!["*".into()],
            secret: None,
            secret_env: None,
            timeout_ms: 1000,
            rate_per_sec: 500.0,
            burst: 1000,
            max_in_flight: 64,
            on_error: OnError::Deny,
            cache_ms: 0,
            cache_max_entries: 100_000,
            headers: vec!["cookie".into(), "origin".into(), "user-agent".into()],
            allowed_origins: Vec::new(),
            dry_run: false,
            breaker_failures: 5,
            breaker_open_ms: 5000,
            refresh_lead_ms: 0,
        }
    }
}

/// The answer when the backend cannot give one (§15's Details).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnError {
    /// `hook_unavailable`, temporary.
    Deny,
    /// As if the hook had said `{}` (`connect`: as if no hook were set).
    Allow,
}

/// A validated hook.
#[derive(Debug, Clone)]
pub struct HookConfig {
    pub id: String,
    pub url: reqwest::Url,
    pub events: Vec<String>,
    pub channels: Vec<String>,
    globs: Vec<Glob>,
    /// The HMAC key (the decoded secret).
    pub secret: Vec<u8>,
    pub timeout: Duration,
    pub rate_per_sec: f64,
    pub burst: u32,
    pub max_in_flight: u32,
    pub on_error: OnError,
    pub cache: Duration,
    pub cache_max_entries: usize,
    /// Lower-case request header names passed to `connect`.
    pub headers: Vec<String>,
    pub allowed_origins: Vec<String>,
    pub dry_run: bool,
    pub breaker_failures: u32,
    pub breaker_open: Duration,
    /// `None`: 10 % of the remaining life, at least 1 s.
    pub refresh_lead: Option<Duration>,
}

impl HookConfig {
    pub fn wants(&self, event: &str) -> bool {
        self.events.iter().any(|e| e == event)
    }

    /// Whether this hook decides `channel` (subscribe and publish).
    pub fn covers(&self, channel: &str) -> bool {
        self.globs.iter().any(|g| g.matches(channel))
    }
}

impl PartialEq for HookConfig {
    fn eq(&self, o: &Self) -> bool {
        self.id == o.id
            && self.url == o.url
            && self.events == o.events
            && self.channels == o.channels
            && self.secret == o.secret
            && self.timeout == o.timeout
            && self.rate_per_sec == o.rate_per_sec
            && self.burst == o.burst
            && self.max_in_flight == o.max_in_flight
            && self.on_error == o.on_error
            && self.cache == o.cache
            && self.cache_max_entries == o.cache_max_entries
            && self.headers == o.headers
            && self.allowed_origins == o.allowed_origins
            && self.dry_run == o.dry_run
            && self.breaker_failures == o.breaker_failures
            && self.breaker_open == o.breaker_open
            && self.refresh_lead == o.refresh_lead
    }
}

/// Resolves the `hooks` value (an array of tables), reporting every
/// problem with its path.
pub(super) fn resolve(
    value: toml::Value,
    env: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<String>,
) -> Vec<HookConfig> {
    let mut out: Vec<HookConfig> = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    for (path, entry) in super::entries::<HookEntry>(value, "hooks", |e| &e.id, problems) {
        if !entry.id.is_empty() && seen.contains(&entry.id) {
            problems.push(format!("{path}.id: {:?} is used twice", entry.id));
            continue;
        }
        seen.push(entry.id.clone());
        if let Some(hook) = hook(entry, &path, env, problems) {
            out.push(hook);
        }
    }
    out
}

fn hook(
    entry: HookEntry,
    path: &str,
    env: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<String>,
) -> Option<HookConfig> {
    let before = problems.len();
    let mut need = |ok: bool, what: String| {
        if !ok {
            problems.push(format!("{path}.{what}"));
        }
    };
    check_id(&entry.id, &mut need);
    let url = check_url(&entry.url, &mut need);
    let secret = secret(&entry, env, &mut need);
    need(
        !entry.events.is_empty(),
        format!(
            "events: name at least one event (known: {})",
            HOOK_EVENTS.join(", ")
        ),
    );
    for e in &entry.events {
        need(
            HOOK_EVENTS.contains(&e.as_str()),
            format!(
                "events: unknown event {e:?} (known: {})",
                HOOK_EVENTS.join(", ")
            ),
        );
    }
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
    need(
        entry.cache_max_entries >= 1,
        "cache_max_entries: must be at least 1".into(),
    );
    need(
        entry.breaker_failures >= 1,
        "breaker_failures: must be at least 1".into(),
    );
    need(
        entry.breaker_open_ms >= 1,
        "breaker_open_ms: must be at least 1".into(),
    );
    let headers: Vec<String> = entry
        .headers
        .iter()
        .map(|h| h.to_ascii_lowercase())
        .collect();
    for h in &headers {
        need(
            h != "authorization",
            "headers: `authorization` is never passed to a hook (a token is checked by the broker itself)"
                .into(),
        );
        need(
            !h.is_empty()
                && h.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
            format!("headers: {h:?} is not a header name"),
        );
    }
    for o in &entry.allowed_origins {
        let ok = reqwest::Url::parse(o).is_ok_and(|u| u.host().is_some() && u.path() == "/")
            && !o.ends_with('/');
        need(
            ok,
            format!(
                "allowed_origins: {o:?} is not an origin (scheme://host[:port], as browsers send it)"
            ),
        );
    }
    if problems.len() > before {
        return None;
    }
    let ms = Duration::from_millis;
    Some(HookConfig {
        globs: entry.channels.iter().map(|c| Glob::new(c)).collect(),
        id: entry.id,
        url: url?,
        events: entry.events,
        channels: entry.channels,
        secret,
        timeout: ms(entry.timeout_ms),
        rate_per_sec: entry.rate_per_sec,
        burst: entry.burst,
        max_in_flight: entry.max_in_flight,
        on_error: entry.on_error,
        cache: ms(entry.cache_ms),
        cache_max_entries: entry.cache_max_entries,
        headers,
        allowed_origins: entry.allowed_origins,
        dry_run: entry.dry_run,
        breaker_failures: entry.breaker_failures,
        breaker_open: ms(entry.breaker_open_ms),
        refresh_lead: (entry.refresh_lead_ms > 0).then(|| ms(entry.refresh_lead_ms)),
    })
}

/// Exactly one of `secret` and `secret_env`, decoded and at least
/// [`MIN_SECRET_BYTES`] long.
fn secret(
    entry: &HookEntry,
    env: &dyn Fn(&str) -> Option<String>,
    need: &mut impl FnMut(bool, String),
) -> Vec<u8> {
    let text = match (&entry.secret, &entry.secret_env) {
        (Some(s), None) => s.clone(),
        (None, Some(var)) => match env(var) {
            Some(s) => s,
            None => {
                need(
                    false,
                    format!("secret_env: environment variable {var} is not set"),
                );
                return Vec::new();
            }
        },
        _ => {
            need(
                false,
                "secret: give exactly one of `secret` and `secret_env`".into(),
            );
            return Vec::new();
        }
    };
    check_key(&text, need).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    const SECRET: &str = "0123456789abcdef0123456789abcdef";

    fn problems(hooks: &str, env: &dyn Fn(&str) -> Option<String>) -> Vec<String> {
        let text = format!("{}\n{hooks}", crate::config::DEFAULT_TOML);
        match Config::from_toml(&text, env) {
            Ok(_) => Vec::new(),
            Err(e) => e.problems,
        }
    }

    fn one(body: &str) -> Vec<String> {
        problems(&format!("[[hooks]]\n{body}\n"), &|_| None)
    }

    #[test]
    fn a_valid_hook_resolves_with_its_defaults() {
        let text = format!(
            "{}\n[[hooks]]\nid = \"app\"\nurl = \"http://127.0.0.1:9000/h\"\nevents = [\"connect\", \"subscribe\"]\nchannels = [\"doc:*\"]\nsecret = \"{SECRET}\"\nheaders = [\"Cookie\"]\n",
            crate::config::DEFAULT_TOML
        );
        let config = Config::from_toml(&text, &|_| None).unwrap();
        let hook = &config.hooks[0];
        assert_eq!(hook.id, "app");
        assert!(hook.wants("connect") && !hook.wants("rpc"));
        assert!(hook.covers("doc:1") && !hook.covers("chat:1"));
        assert_eq!(hook.headers, ["cookie"]);
        assert_eq!(hook.timeout.as_millis(), 1000);
        assert_eq!(hook.refresh_lead, None);
        assert_eq!(hook.on_error, super::OnError::Deny);
    }

    #[test]
    fn each_mistake_is_named() {
        let base = format!("id = \"app\"\nurl = \"http://h/x\"\nsecret = \"{SECRET}\"\n");
        let p = one(&format!("{base}events = [\"conect\"]"));
        assert!(
            p.iter()
                .any(|p| p.contains("hooks[0] (\"app\").events: unknown event \"conect\"")),
            "{p:?}"
        );
        let p = one(&format!(
            "id = \"app\"\nurl = \"ftp://h/x\"\nsecret = \"{SECRET}\"\nevents = [\"rpc\"]"
        ));
        assert!(
            p.iter().any(|p| p.contains(".url: must be an http")),
            "{p:?}"
        );
        let p = one("id = \"app\"\nurl = \"http://h/x\"\nsecret = \"short\"\nevents = [\"rpc\"]");
        assert!(
            p.iter()
                .any(|p| p.contains(".secret: must be at least 24 bytes (this one has 5)")),
            "{p:?}"
        );
        let p =
            one("id = \"app\"\nurl = \"http://h/x\"\nsecret_env = \"NOPE\"\nevents = [\"rpc\"]");
        assert!(
            p.iter()
                .any(|p| p.contains(".secret_env: environment variable NOPE is not set")),
            "{p:?}"
        );
        let p = one(&format!(
            "{base}events = [\"connect\"]\nheaders = [\"cookie\", \"Authorization\"]"
        ));
        assert!(
            p.iter()
                .any(|p| p.contains(".headers: `authorization` is never passed")),
            "{p:?}"
        );
        let p = one(&format!("{base}events = [\"rpc\"]\non_error = \"maybe\""));
        assert!(p.iter().any(|p| p.contains("hooks[0].on_error")), "{p:?}");
        let p = one(&format!(
            "{base}events = [\"rpc\"]\nallowed_origins = [\"example.com\"]"
        ));
        assert!(
            p.iter()
                .any(|p| p.contains(".allowed_origins: \"example.com\"")),
            "{p:?}"
        );
    }

    #[test]
    fn a_duplicate_id_is_refused() {
        let entry = format!(
            "[[hooks]]\nid = \"app\"\nurl = \"http://h/x\"\nsecret = \"{SECRET}\"\nevents = [\"rpc\"]\n"
        );
        let p = problems(&format!("{entry}{entry}"), &|_| None);
        assert!(
            p.iter()
                .any(|p| p == "hooks[1] (\"app\").id: \"app\" is used twice"),
            "{p:?}"
        );
    }

    #[test]
    fn secret_env_is_read_and_whsec_decoded() {
        let env = |k: &str| {
            (k == "HOOK_SECRET").then(|| "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_string())
        };
        let text = format!(
            "{}\n[[hooks]]\nid = \"app\"\nurl = \"http://h/x\"\nsecret_env = \"HOOK_SECRET\"\nevents = [\"rpc\"]\n",
            crate::config::DEFAULT_TOML
        );
        let config = Config::from_toml(&text, &env).unwrap();
        assert_eq!(config.hooks[0].secret.len(), 24);
    }
}
