//! `config.toml`: loading, validation that reports every problem, and the
//! resolution of a connection's limits from its plan and account.
//!
//! The repo's commented `config.toml` is compiled in and is the default
//! when no file is given, so the documented file and the behaviour of a
//! bare `tidegate serve` cannot drift apart.

mod admin;
mod auth;
mod cluster;
mod env;
mod flags;
mod grpc;
mod hooks;
mod limits;
mod namespaces;
mod plans;
mod pusher;
mod redis_cluster;
mod report;
mod secret;
mod sections;
mod tables;
mod validate;
mod webhooks;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, LazyLock};

use dashmap::DashMap;
use flags::{grpc_exposed, retire_sample_key};
use tables::{entries, section};
use validate::{exposed, sample_secret_problems, tls_pair_problems, validate_node};

pub use admin::{AdminKeys, AdminSection, LogFormat, LogSection, MIN_ADMIN_KEY_BYTES};
pub use auth::{KEY_ALGORITHMS, KeyEntry, KeySource, MIN_JWT_SECRET_BYTES, VerifyKey};
pub use env::{JWT_SECRET_ALIAS, Source, Sources, var_name};
pub use grpc::GrpcSection;
pub use hooks::{HOOK_EVENTS, HookConfig, HookEntry, OnError};
pub use limits::{Costs, LimitName, Limits, Op, Rule, TrackBy};
pub use namespaces::{
    Conflation, Delivery, DeliveryClasses, NamespaceSection, PresenceRule, presence_rule,
};
pub use pusher::{MIN_PUSHER_SECRET_BYTES, PUSHER_EVENT_TYPES, PusherApp, SAMPLE_PUSHER_SECRET};
pub use secret::{ClusterSecrets, Secret};
pub use sections::{
    ApiKey, AuthSection, ClusterMode, ClusterSection, HandshakeSection, HistorySection,
    HttpSection, NodeSection, ProxyRange, PublishSection, SAMPLE_API_KEY, SAMPLE_JWT_SECRET,
    SocketSection,
};
pub use webhooks::{
    EVENT_TYPES, MIN_SECRET_BYTES, Pacing, PusherTarget, WHSEC_PREFIX, WebhookEndpoint,
    WebhookEntry, pusher_event_name, webhook_key,
};

/// The shipped `config.toml`, also the embedded default. The crate keeps
/// its own copy (`broker/config.toml`) so it can be packaged and installed
/// on its own; a test keeps it equal to the repo root's.
pub const DEFAULT_TOML: &str = include_str!("../../config.toml");

/// The shipped file as a table: the keys the environment may set, and the
/// type each takes.
static DEFAULT_TABLE: LazyLock<toml::Table> = LazyLock::new(|| {
    DEFAULT_TOML
        .parse()
        .expect("the shipped config.toml is TOML")
});

/// Every problem found in a config file, not just the first.
#[derive(Debug, thiserror::Error)]
#[error("{} problem(s) in the config:\n  - {}", problems.len(), problems.join("\n  - "))]
pub struct ConfigError {
    pub problems: Vec<String>,
}

/// An account's entry: an optional plan and overrides of any plan key.
#[derive(Debug, Clone)]
struct AccountEntry {
    plan: Option<String>,
    overrides: toml::Table,
}

/// A validated configuration.
#[derive(Debug)]
pub struct Config {
    pub node: NodeSection,
    pub auth: AuthSection,
    /// The keys tokens are verified with: `auth.jwt_secret` (when set),
    /// then `[[auth.keys]]`; `auth.jwks_file`'s are read where the keys
    /// are built (`auth.rs`).
    pub jwt_keys: Vec<VerifyKey>,
    /// Keys the API keys' bucket names (`http/keys.rs`).
    pub fingerprint_key: Secret,
    /// Sign and verify the nodes' control messages (`[cluster] secret`).
    pub cluster_secrets: ClusterSecrets,
    pub api_keys: Vec<ResolvedApiKey>,
    pub socket: SocketSection,
    pub handshake: HandshakeSection,
    pub http: HttpSection,
    pub history: HistorySection,
    /// `[publish]`: idempotency keys (§17).
    pub publish: PublishSection,
    pub cluster: ClusterSection,
    pub grpc: GrpcSection,
    pub admin: AdminKeys,
    pub log: LogSection,
    /// `[[webhooks]]` (§9), in file order.
    pub webhooks: Vec<WebhookEndpoint>,
    /// `[[hooks]]` (§15), in file order (the first that covers an event
    /// decides it).
    pub hooks: Vec<HookConfig>,
    /// `[namespaces.NAME]`: delivery classes (§11).
    pub namespaces: HashMap<String, NamespaceSection>,
    /// `[[pusher.apps]]` (§16), in file order.
    pub pusher_apps: Vec<Arc<PusherApp>>,
    plan_tables: HashMap<String, toml::Table>,
    plans: HashMap<String, Arc<Limits>>,
    accounts: HashMap<String, AccountEntry>,
    resolved: DashMap<(String, String), Arc<Limits>>,
    /// Where each value that is not a default came from (`check-config`).
    pub sources: Sources,
    /// Built from the embedded default rather than an operator's file.
    embedded: bool,
    /// What was adjusted rather than refused; logged at start.
    pub warnings: Vec<String>,
}

/// An API key with its secret read (from the file or the environment).
#[derive(Debug, Clone)]
pub struct ResolvedApiKey {
    pub key: String,
    pub account: String,
    pub pub_channels: Vec<String>,
    /// What the key may `Subscribe` to over gRPC (none when absent).
    pub sub_channels: Vec<String>,
}

/// Why a plan could not be resolved for a connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown plan {0:?}")]
pub struct UnknownPlan(pub String);

const SECTIONS: [&str; 18] = [
    "node",
    "grpc",
    "auth",
    "api_keys",
    "socket",
    "handshake",
    "http",
    "history",
    "publish",
    "cluster",
    "namespaces",
    "plans",
    "accounts",
    "admin",
    "log",
    "webhooks",
    "hooks",
    "pusher",
];

impl Config {
    /// The embedded default (`config.toml` at the repo root), without the
    /// environment.
    pub fn embedded() -> Config {
        Config::from_toml(DEFAULT_TOML, &|_| None).expect("the shipped config.toml is valid")
    }

    /// The embedded default with the process environment over it: what
    /// `tidegate serve` runs without `--config`.
    pub fn embedded_with_env() -> Result<Config, ConfigError> {
        Config::parse(DEFAULT_TOML, &|k| std::env::var(k).ok(), false)
    }

    /// Reads and validates a file, with the process environment over it.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            problems: vec![format!("{}: {e}", path.display())],
        })?;
        Config::from_toml(&text, &|k| std::env::var(k).ok())
    }

    /// Parses and validates `text` (a file's contents); `env` looks up
    /// environment variables (injected so tests do not touch the process
    /// environment).
    pub fn from_toml(
        text: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        Config::parse(text, env, true)
    }

    /// `from_file`: whether `text` is an operator's file (its values are
    /// reported as coming from the file) or the embedded default.
    fn parse(
        text: &str,
        env: &dyn Fn(&str) -> Option<String>,
        from_file: bool,
    ) -> Result<Config, ConfigError> {
        let mut problems = Vec::new();
        let mut root: toml::Table = match text.parse() {
            Ok(t) => t,
            Err(e) => {
                return Err(ConfigError {
                    problems: vec![format!("not valid TOML: {e}")],
                });
            }
        };
        let mut sources = if from_file {
            Sources::from_file(&root)
        } else {
            Sources::default()
        };
        env::overlay(&mut root, &DEFAULT_TABLE, env, &mut sources, &mut problems);
        for key in root.keys() {
            if !SECTIONS.contains(&key.as_str()) {
                problems.push(format!("{key}: unknown key"));
            }
        }
        let mut take = |name: &str| {
            root.remove(name)
                .unwrap_or(toml::Value::Table(Default::default()))
        };

        let node: NodeSection = section(take("node"), "node", &mut problems).unwrap_or_default();
        let auth: AuthSection = section(take("auth"), "auth", &mut problems).unwrap_or_default();
        let socket: SocketSection =
            section(take("socket"), "socket", &mut problems).unwrap_or_default();
        let handshake: HandshakeSection =
            section(take("handshake"), "handshake", &mut problems).unwrap_or_default();
        let http: HttpSection = section(take("http"), "http", &mut problems).unwrap_or_default();
        let history: HistorySection =
            section(take("history"), "history", &mut problems).unwrap_or_default();
        let publish: PublishSection =
            section(take("publish"), "publish", &mut problems).unwrap_or_default();
        publish.problems(&mut problems);
        let cluster: ClusterSection =
            section(take("cluster"), "cluster", &mut problems).unwrap_or_default();
        let grpc: GrpcSection = section(take("grpc"), "grpc", &mut problems).unwrap_or_default();
        let admin_section: AdminSection =
            section(take("admin"), "admin", &mut problems).unwrap_or_default();
        let log: LogSection = section(take("log"), "log", &mut problems).unwrap_or_default();
        let namespaces: HashMap<String, NamespaceSection> =
            section(take("namespaces"), "namespaces", &mut problems).unwrap_or_default();
        problems.extend(namespaces::problems(&namespaces));
        let raw_keys = match take("api_keys") {
            toml::Value::Table(t) if t.is_empty() => toml::Value::Array(Vec::new()),
            other => other,
        };
        let api_keys: Vec<ApiKey> =
            section(raw_keys, "api_keys", &mut problems).unwrap_or_default();

        let webhooks = webhooks::resolve(take("webhooks"), env, &mut problems);
        let hooks = hooks::resolve(take("hooks"), env, &mut problems);

        // Plans: each validated on its own so every broken plan is reported.
        let mut plan_tables = HashMap::new();
        let mut plans = HashMap::new();
        match take("plans") {
            toml::Value::Table(t) => {
                for (name, value) in t {
                    let path = format!("plans.{name}");
                    let toml::Value::Table(table) = value else {
                        problems.push(format!("{path}: must be a table"));
                        continue;
                    };
                    if let Some(limits) = limits_from(&table, &path, &mut problems) {
                        plans.insert(name.clone(), Arc::new(limits));
                    }
                    plan_tables.insert(name, table);
                }
            }
            _ => problems.push("plans: must be a table of plans".into()),
        }
        if !plan_tables.contains_key(&auth.default_plan) {
            problems.push(format!(
                "auth.default_plan: plan {:?} is not defined under [plans]",
                auth.default_plan
            ));
        }

        // Accounts: a plan name plus overrides of any plan key.
        let mut accounts = HashMap::new();
        match take("accounts") {
            toml::Value::Table(t) => {
                for (name, value) in t {
                    let path = format!("accounts.{name}");
                    let toml::Value::Table(mut table) = value else {
                        problems.push(format!("{path}: must be a table"));
                        continue;
                    };
                    let plan = match table.remove("plan") {
                        None => None,
                        Some(toml::Value::String(p)) => Some(p),
                        Some(_) => {
                            problems.push(format!("{path}.plan: must be a plan name"));
                            None
                        }
                    };
                    if let Some(p) = &plan
                        && !plan_tables.contains_key(p)
                    {
                        problems.push(format!(
                            "{path}.plan: plan {p:?} is not defined under [plans]"
                        ));
                    }
                    // The overrides must make valid limits over every plan the
                    // account can be given (a token's `plan` claim picks one).
                    for (plan_name, base) in &plan_tables {
                        if plan.as_ref().is_some_and(|p| p != plan_name) {
                            continue;
                        }
                        let merged = merge(base.clone(), &table);
                        limits_from(&merged, &path, &mut problems);
                    }
                    accounts.insert(
                        name,
                        AccountEntry {
                            plan,
                            overrides: table,
                        },
                    );
                }
            }
            _ => problems.push("accounts: must be a table of accounts".into()),
        }
        let plan_names: Vec<&str> = plan_tables.keys().map(String::as_str).collect();
        let mut pusher_apps = pusher::resolve(
            take("pusher"),
            env,
            &plan_names,
            &mut accounts,
            &mut sources,
            &mut problems,
        );
        sources.name_variables(&mut problems);
        problems.sort();
        problems.dedup();

        let mut resolved_keys = Vec::new();
        for (i, k) in api_keys.iter().enumerate() {
            let path = format!("api_keys[{i}]");
            let key = match (&k.key, &k.key_env) {
                (Some(key), None) => Some(key.clone()),
                (None, Some(var)) => {
                    sources.set(format!("{path}.key"), Source::Env(var.clone()));
                    let v = env(var);
                    if v.is_none() {
                        problems.push(format!(
                            "{path}.key_env: environment variable {var} is not set"
                        ));
                    }
                    v
                }
                _ => {
                    problems.push(format!("{path}: give exactly one of `key` and `key_env`"));
                    None
                }
            };
            if let Some(key) = key {
                if key.len() < 16 {
                    problems.push(format!("{path}: an API key must be at least 16 characters"));
                }
                resolved_keys.push(ResolvedApiKey {
                    key,
                    account: k.account.clone(),
                    pub_channels: k.pub_channels.clone(),
                    sub_channels: k.sub_channels.clone(),
                });
            }
        }

        let admin = admin_section.resolve(env, &mut problems);
        validate_node(
            &node,
            &socket,
            &handshake,
            &history,
            &cluster,
            &http,
            &mut problems,
        );
        let jwt_keys = auth::resolve_keys(&auth, env, &mut problems);
        let cluster_secrets = cluster::secrets(&cluster, &mut problems);
        let fingerprint_key = auth::fingerprint_key(&auth, &cluster_secrets, &mut problems);
        let mut warnings = Vec::new();
        if !from_file {
            retire_sample_key(exposed(&node), &mut resolved_keys, &mut warnings);
            retire_sample_key(grpc_exposed(grpc.listen), &mut resolved_keys, &mut warnings);
        }
        // From a file too: the sample app is the shipped file's, which
        // operators (and tests) copy with other changes.
        pusher::retire_sample_app(exposed(&node), &mut pusher_apps, &mut warnings);
        if history.size == 0 && !pusher_apps.is_empty() {
            warnings.push("history.size is 0: the cache- channels of pusher.apps have no last event to replay (every subscriber gets pusher:cache_miss)".into());
        }
        plans::sse_cap_warnings(&plans, &mut warnings);
        problems.extend(sample_secret_problems(&node, &jwt_keys, &resolved_keys));
        grpc.problems(&resolved_keys, &mut problems);
        redis_cluster::problems(&cluster, &mut problems);
        cluster::redis_problems(&cluster, &mut problems);

        if !problems.is_empty() {
            return Err(ConfigError { problems });
        }
        Ok(Config {
            node,
            auth,
            jwt_keys,
            fingerprint_key,
            cluster_secrets,
            api_keys: resolved_keys,
            socket,
            handshake,
            http,
            history,
            publish,
            cluster,
            grpc,
            admin,
            log,
            webhooks,
            hooks,
            namespaces,
            pusher_apps: pusher_apps.into_iter().map(Arc::new).collect(),
            plan_tables,
            plans,
            accounts,
            resolved: DashMap::new(),
            sources,
            embedded: !from_file,
            warnings,
        })
    }
}

fn limits_from(table: &toml::Table, path: &str, problems: &mut Vec<String>) -> Option<Limits> {
    let limits: Limits = section(toml::Value::Table(table.clone()), path, problems)?;
    let found = limits.problems(path);
    let ok = found.is_empty();
    problems.extend(found);
    ok.then_some(limits)
}

/// `over` merged onto `base`: tables merge key by key, anything else
/// (numbers, arrays such as `rules`) replaces.
fn merge(mut base: toml::Table, over: &toml::Table) -> toml::Table {
    for (k, v) in over {
        match (base.get_mut(k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => {
                let merged = merge(std::mem::take(b), o);
                *b = merged;
            }
            _ => {
                base.insert(k.clone(), v.clone());
            }
        }
    }
    base
}

#[cfg(test)]
mod tests;
