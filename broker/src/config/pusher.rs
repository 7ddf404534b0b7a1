//! `[[pusher.apps]]`: the Pusher Channels apps this node serves (§16).
//!
//! Each app is one Tidegate account (its plan's numbers are the app's), so
//! an app names an account that `[accounts]` defines, or gives `plan`, which
//! creates the account with that plan. Every problem is reported with its
//! path, like the rest of the file.

use std::collections::HashMap;

use serde::Deserialize;

use super::webhooks::{PusherTarget, WebhookEntry, endpoint_with};
use super::{AccountEntry, Source, Sources, WebhookEndpoint};

/// The shortest app secret accepted, in bytes: it keys every signature of
/// the app (subscriptions, sign-ins, the HTTP API, webhooks).
pub const MIN_PUSHER_SECRET_BYTES: usize = 16;

/// The shipped config's sample app's secret: accepted on a loopback
/// listener only, like the sample API key.
pub const SAMPLE_PUSHER_SECRET: &str = "tidegate-sample-pusher-secret";

/// Pusher's webhook events, by their wire names.
pub const PUSHER_EVENT_TYPES: [&str; 6] = [
    "channel_occupied",
    "channel_vacated",
    "member_added",
    "member_removed",
    "client_event",
    "cache_miss",
];

/// `[pusher]` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct PusherSection {
    apps: Vec<toml::Value>,
}

/// The longest `user_authentication_timeout_s`: an hour (Sockudo's
/// default); Pusher's own is 30 s.
const MAX_SIGNIN_TIMEOUT_S: u64 = 3600;

/// One `[[pusher.apps]]` entry as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
struct AppEntry {
    id: String,
    key: String,
    secret: Option<String>,
    secret_env: Option<String>,
    account: String,
    /// Creates `account` with this plan when `[accounts]` does not define it.
    plan: Option<String>,
    client_events: bool,
    user_max_connections: u32,
    activity_timeout_s: u64,
    pong_timeout_s: u64,
    user_authentication_timeout_s: u64,
    max_presence_members: u32,
    presence_diff_ms: u64,
    webhooks: Vec<toml::Value>,
}

impl Default for AppEntry {
    fn default() -> Self {
        AppEntry {
            id: String::new(),
            key: String::new(),
            secret: None,
            secret_env: None,
            account: String::new(),
            plan: None,
            client_events: false,
            user_max_connections: 0,
            activity_timeout_s: 120,
            pong_timeout_s: 30,
            user_authentication_timeout_s: 0,
            max_presence_members: 100,
            presence_diff_ms: 200,
            webhooks: Vec::new(),
        }
    }
}

/// A validated Pusher app.
#[derive(Debug, Clone, PartialEq)]
pub struct PusherApp {
    /// `app_id`: the HTTP API's `/apps/{id}/...`.
    pub id: String,
    /// The client's key: `ws /app/{key}`, and the HTTP API's `auth_key`.
    pub key: String,
    /// Signs and checks every signature of the app.
    pub secret: Vec<u8>,
    /// The Tidegate account the app is.
    pub account: String,
    /// `client-*` events on private and presence channels.
    pub client_events: bool,
    /// Connections per signed-in user; 0: no cap.
    pub user_max_connections: u32,
    /// Advertised in `connection_established`, in seconds.
    pub activity_timeout_s: u64,
    /// How long a `pusher:ping` waits for any answer before 4201.
    pub pong_timeout_s: u64,
    /// A connection not signed in (`pusher:signin`) this many seconds
    /// after it opened is closed 4009; 0: never (Pusher's "user
    /// authentication timeout", Sockudo's `user_authentication_timeout`;
    /// beyond §16's contract).
    pub user_authentication_timeout_s: u64,
    /// Users per presence channel.
    pub max_presence_members: u32,
    /// The presence join/leave window (§13's `diff_ms`).
    pub presence_diff_ms: u64,
    /// Webhooks in Pusher's format, signed with the app's secret.
    pub webhooks: Vec<WebhookEndpoint>,
}

/// Resolves the `pusher` value: every app, with its secret read and its
/// account checked against (or added to) `accounts`.
pub(super) fn resolve(
    value: toml::Value,
    env: &dyn Fn(&str) -> Option<String>,
    plans: &[&str],
    accounts: &mut HashMap<String, AccountEntry>,
    sources: &mut Sources,
    problems: &mut Vec<String>,
) -> Vec<PusherApp> {
    let Some(section) = super::section::<PusherSection>(value, "pusher", problems) else {
        return Vec::new();
    };
    let mut out: Vec<PusherApp> = Vec::new();
    for (i, value) in section.apps.into_iter().enumerate() {
        let path = format!("pusher.apps[{i}]");
        let Some(entry) = super::section::<AppEntry>(value, &path, problems) else {
            continue;
        };
        let Some(app) = app(entry, &path, env, plans, accounts, sources, problems) else {
            continue;
        };
        if out.iter().any(|o| o.id == app.id) {
            problems.push(format!("{path}.id: {:?} is used by another app", app.id));
            continue;
        }
        if out.iter().any(|o| o.key == app.key) {
            problems.push(format!("{path}.key: {:?} is used by another app", app.key));
            continue;
        }
        out.push(app);
    }
    out
}

fn app(
    entry: AppEntry,
    path: &str,
    env: &dyn Fn(&str) -> Option<String>,
    plans: &[&str],
    accounts: &mut HashMap<String, AccountEntry>,
    sources: &mut Sources,
    problems: &mut Vec<String>,
) -> Option<PusherApp> {
    let before = problems.len();
    let mut need = |ok: bool, what: String| {
        if !ok {
            problems.push(format!("{path}.{what}"));
        }
    };
    // Both appear in URLs and in the signed strings: no `/`, `:` or spaces.
    let word = |s: &str| {
        !s.is_empty()
            && s.len() <= 64
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
    };
    need(
        word(&entry.id),
        "id: 1-64 characters of [A-Za-z0-9_.-]".into(),
    );
    need(
        word(&entry.key),
        "key: 1-64 characters of [A-Za-z0-9_.-]".into(),
    );
    let secret = match (&entry.secret, &entry.secret_env) {
        (Some(s), None) => Some(s.clone()),
        (None, Some(var)) => {
            sources.set(format!("{path}.secret"), Source::Env(var.clone()));
            let v = env(var);
            need(
                v.is_some(),
                format!("secret_env: environment variable {var} is not set"),
            );
            v
        }
        _ => {
            need(
                false,
                "secret: give exactly one of `secret` and `secret_env`".into(),
            );
            None
        }
    };
    if let Some(s) = &secret {
        need(
            s.len() >= MIN_PUSHER_SECRET_BYTES,
            format!(
                "secret: must be at least {MIN_PUSHER_SECRET_BYTES} bytes (this one has {})",
                s.len()
            ),
        );
    }
    need(
        !entry.account.is_empty(),
        "account: name the Tidegate account this app is".into(),
    );
    match (accounts.get(&entry.account), &entry.plan) {
        (_, Some(plan)) if !plans.contains(&plan.as_str()) => need(
            false,
            format!("plan: plan {plan:?} is not defined under [plans]"),
        ),
        (Some(existing), Some(plan)) if existing.plan.as_ref().is_some_and(|p| p != plan) => need(
            false,
            format!(
                "plan: account {:?} already has plan {:?}",
                entry.account,
                existing.plan.as_deref().unwrap_or_default()
            ),
        ),
        (Some(_), _) => {}
        (None, Some(plan)) => {
            if !entry.account.is_empty() {
                accounts.insert(
                    entry.account.clone(),
                    AccountEntry {
                        plan: Some(plan.clone()),
                        overrides: toml::Table::new(),
                    },
                );
            }
        }
        (None, None) => need(
            false,
            format!(
                "account: {:?} is not defined under [accounts]; define it or give `plan`",
                entry.account
            ),
        ),
    }
    need(
        entry.activity_timeout_s >= 1,
        "activity_timeout_s: must be at least 1 (pusher-js takes 0 as none)".into(),
    );
    need(
        entry.pong_timeout_s >= 1,
        "pong_timeout_s: must be at least 1".into(),
    );
    need(
        entry.user_authentication_timeout_s <= MAX_SIGNIN_TIMEOUT_S,
        format!(
            "user_authentication_timeout_s: at most {MAX_SIGNIN_TIMEOUT_S} (0: connections need not sign in)"
        ),
    );
    need(
        entry.max_presence_members >= 1,
        "max_presence_members: must be at least 1".into(),
    );
    need(
        entry.presence_diff_ms >= 1,
        "presence_diff_ms: must be at least 1".into(),
    );
    let key = secret.unwrap_or_default().into_bytes();
    let mut webhooks = Vec::new();
    for (i, value) in entry.webhooks.into_iter().enumerate() {
        let path = format!("{path}.webhooks[{i}]");
        let toml::Value::Table(table) = value else {
            problems.push(format!("{path}: must be a table"));
            continue;
        };
        // The app's secret signs (X-Pusher-Signature) and the app names it.
        for own in ["id", "secret", "secret_env", "secrets"] {
            if table.contains_key(own) {
                problems.push(format!(
                    "{path}.{own}: not taken here (the app's secret signs)"
                ));
            }
        }
        let all_events = !table.contains_key("events");
        let Some(mut hook) =
            super::section::<WebhookEntry>(toml::Value::Table(table), &path, problems)
        else {
            continue;
        };
        if all_events {
            hook.events = PUSHER_EVENT_TYPES.map(String::from).to_vec();
        }
        hook.id = format!("pusher.{}.{i}", entry.id);
        if let Some(ep) = endpoint_with(
            hook,
            &path,
            vec![key.clone()],
            &PUSHER_EVENT_TYPES,
            problems,
        ) {
            let prefix = format!("{}{}|", crate::protocol::channel::PUSHER_PREFIX, entry.id);
            let mut ep = ep;
            ep.pusher = Some(PusherTarget {
                key: entry.key.clone(),
                prefix,
            });
            webhooks.push(ep);
        }
    }
    (problems.len() == before).then_some(PusherApp {
        id: entry.id,
        key: entry.key,
        secret: key,
        account: entry.account,
        client_events: entry.client_events,
        user_max_connections: entry.user_max_connections,
        activity_timeout_s: entry.activity_timeout_s,
        pong_timeout_s: entry.pong_timeout_s,
        user_authentication_timeout_s: entry.user_authentication_timeout_s,
        max_presence_members: entry.max_presence_members,
        presence_diff_ms: entry.presence_diff_ms,
        webhooks,
    })
}

/// Off loopback the sample app (its secret is in the repository) is
/// dropped with a warning rather than served, from the embedded default
/// and from a file alike.
pub(super) fn retire_sample_app(
    exposed: Option<String>,
    apps: &mut Vec<PusherApp>,
    warnings: &mut Vec<String>,
) {
    let Some(why) = exposed else {
        return;
    };
    let before = apps.len();
    apps.retain(|a| a.secret != SAMPLE_PUSHER_SECRET.as_bytes());
    if apps.len() < before {
        warnings.push(format!(
            "pusher.apps: the sample app is not served where {why}; configure an app of yours with secret_env"
        ));
    }
}
