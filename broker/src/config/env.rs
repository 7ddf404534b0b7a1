//! Settings from the environment, and where each value came from.
//!
//! Every key of the node-wide sections can be set as
//! `TIDEGATE_<SECTION>_<KEY>` (`TIDEGATE_CLUSTER_REDIS_URL`,
//! `TIDEGATE_NODE_TRUSTED_PROXIES`), and each API key as
//! `TIDEGATE_API_KEYS_<INDEX>_<KEY>` (`TIDEGATE_API_KEYS_0_KEY`): a secret
//! or a per-deployment value never has to be written into a file that is
//! shared between deployments. `TIDEGATE_JWT_SECRET` stays the documented
//! short name of `TIDEGATE_AUTH_JWT_SECRET`.
//!
//! The names are built from the keys the shipped `config.toml` lists (it
//! lists every one), so no other variable of the process is ever read and a
//! stray `TIDEGATE_*` variable cannot break a start. Plans and accounts
//! (tables named by the operator) come from the file only.

use std::collections::BTreeMap;
use std::fmt;

/// The sections whose keys the environment may set.
pub const ENV_SECTIONS: [&str; 9] = [
    "node",
    "auth",
    "socket",
    "handshake",
    "http",
    "history",
    "publish",
    "cluster",
    "grpc",
];

/// The short name of `TIDEGATE_AUTH_JWT_SECRET`, kept because it is the
/// name every earlier release documented.
pub const JWT_SECRET_ALIAS: &str = "TIDEGATE_JWT_SECRET";

/// The keys of one `[[api_keys]]` entry.
const API_KEY_FIELDS: [&str; 5] = ["key", "key_env", "account", "pub_channels", "sub_channels"];

/// Where a value in force came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Default,
    File,
    /// The variable's name.
    Env(String),
    /// A command-line flag (`--listen`, `--node-id`).
    Flag(&'static str),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::File => f.write_str("file"),
            Source::Env(var) => write!(f, "env {var}"),
            Source::Flag(flag) => write!(f, "flag {flag}"),
        }
    }
}

/// The source of every value that is not a default, by path
/// (`node.listen`, `api_keys[0].key`).
#[derive(Debug, Clone, Default)]
pub struct Sources(BTreeMap<String, Source>);

impl Sources {
    pub fn get(&self, path: &str) -> Source {
        self.0.get(path).cloned().unwrap_or(Source::Default)
    }

    pub(super) fn set(&mut self, path: String, source: Source) {
        self.0.insert(path, source);
    }

    /// Appends the variable to each problem with a value that came from the
    /// environment, so the operator knows where to look.
    pub(super) fn name_variables(&self, problems: &mut [String]) {
        for p in problems.iter_mut() {
            let var = self.0.iter().find_map(|(path, source)| match source {
                Source::Env(var)
                    if p.strip_prefix(path.as_str())
                        .is_some_and(|rest| rest.starts_with([':', '[', '.']))
                        && !p.contains(var.as_str()) =>
                {
                    Some(var)
                }
                _ => None,
            });
            if let Some(var) = var {
                p.push_str(&format!(" (from {var})"));
            }
        }
    }

    /// Records every key present in the file's node-wide sections.
    pub(super) fn from_file(root: &toml::Table) -> Sources {
        let mut sources = Sources::default();
        for section in ENV_SECTIONS {
            if let Some(toml::Value::Table(t)) = root.get(section) {
                for key in t.keys() {
                    sources.set(format!("{section}.{key}"), Source::File);
                }
            }
        }
        if let Some(toml::Value::Array(keys)) = root.get("api_keys") {
            for (i, entry) in keys.iter().enumerate() {
                if let toml::Value::Table(t) = entry {
                    for key in t.keys() {
                        sources.set(format!("api_keys[{i}].{key}"), Source::File);
                    }
                }
            }
        }
        sources
    }
}

/// A secret written as `<path>.<key>` or named as `<path>.<key>_env` (an
/// environment variable), at least `min` bytes: the value, or `None` with
/// a problem pushed (both given, the variable unset, too short, or neither
/// given when `required`; neither given and not required: `None` alone).
pub(super) fn secret_field(
    (path, key, required, min): (&str, &str, bool, usize),
    value: &Option<String>,
    var: &Option<String>,
    env: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<String>,
) -> Option<String> {
    let found = match (value, var) {
        (Some(v), None) => v.clone(),
        (None, Some(var)) => match env(var) {
            Some(v) => v,
            None => {
                problems.push(format!(
                    "{path}.{key}_env: environment variable {var} is not set"
                ));
                return None;
            }
        },
        (None, None) if !required => return None,
        _ => {
            let how = if required { "exactly" } else { "at most" };
            problems.push(format!("{path}: give {how} one of `{key}` and `{key}_env`"));
            return None;
        }
    };
    if found.len() < min {
        problems.push(format!("{path}.{key}: must be at least {min} bytes"));
        return None;
    }
    Some(found)
}

/// The variable that sets `section.key`.
pub fn var_name(section: &str, key: &str) -> String {
    format!("TIDEGATE_{}_{}", section, key).to_uppercase()
}

/// Writes every set variable into `root` (the parsed file), typed like the
/// same key of `defaults` (the shipped file), and records it in `sources`.
/// A value that does not parse as that type is a problem naming the
/// variable.
pub(super) fn overlay(
    root: &mut toml::Table,
    defaults: &toml::Table,
    env: &dyn Fn(&str) -> Option<String>,
    sources: &mut Sources,
    problems: &mut Vec<String>,
) {
    for section in ENV_SECTIONS {
        let Some(toml::Value::Table(keys)) = defaults.get(section) else {
            continue;
        };
        for (key, default) in keys {
            let var = var_name(section, key);
            let (var, raw) = match env(&var) {
                Some(v) => (var, v),
                None if section == "auth" && key == "jwt_secret" => match env(JWT_SECRET_ALIAS) {
                    Some(v) => (JWT_SECRET_ALIAS.to_owned(), v),
                    None => continue,
                },
                None => continue,
            };
            let path = format!("{section}.{key}");
            match typed(&raw, default) {
                Ok(value) => {
                    let table = root
                        .entry(section)
                        .or_insert_with(|| toml::Value::Table(Default::default()));
                    if let toml::Value::Table(t) = table {
                        t.insert(key.clone(), value);
                    }
                    sources.set(path, Source::Env(var));
                }
                Err(want) => problems.push(format!("{path}: {var} must be {want}, got {raw:?}")),
            }
        }
    }
    overlay_api_keys(root, env, sources, problems);
}

/// `TIDEGATE_API_KEYS_<i>_<KEY>` for every entry of the file and the ones
/// after it, until an index has no variable set.
fn overlay_api_keys(
    root: &mut toml::Table,
    env: &dyn Fn(&str) -> Option<String>,
    sources: &mut Sources,
    problems: &mut Vec<String>,
) {
    let in_file = match root.get("api_keys") {
        Some(toml::Value::Array(a)) => a.len(),
        _ => 0,
    };
    let mut set = Vec::new();
    for i in 0.. {
        let found: Vec<(&str, String, String)> = API_KEY_FIELDS
            .iter()
            .filter_map(|field| {
                let var = var_name(&format!("api_keys_{i}"), field);
                env(&var).map(|v| (*field, var, v))
            })
            .collect();
        if found.is_empty() && i >= in_file {
            break;
        }
        set.push(found);
    }
    if set.iter().all(Vec::is_empty) {
        return;
    }
    let entries = root
        .entry("api_keys")
        .or_insert_with(|| toml::Value::Array(Vec::new()));
    let toml::Value::Array(entries) = entries else {
        // Reported as a type error by the section parser.
        return;
    };
    for (i, found) in set.into_iter().enumerate() {
        if found.is_empty() {
            continue;
        }
        if entries.len() <= i {
            entries.resize_with(i + 1, || toml::Value::Table(Default::default()));
        }
        let toml::Value::Table(entry) = &mut entries[i] else {
            continue;
        };
        for (field, var, raw) in found {
            let value = if field.ends_with("_channels") {
                match typed(&raw, &toml::Value::Array(Vec::new())) {
                    Ok(v) => v,
                    Err(want) => {
                        problems.push(format!(
                            "api_keys[{i}].{field}: {var} must be {want}, got {raw:?}"
                        ));
                        continue;
                    }
                }
            } else {
                toml::Value::String(raw)
            };
            // A key from the environment replaces the file's way of giving
            // it, whichever that was.
            match field {
                "key" => {
                    entry.remove("key_env");
                }
                "key_env" => {
                    entry.remove("key");
                }
                _ => {}
            }
            entry.insert(field.to_owned(), value);
            sources.set(format!("api_keys[{i}].{field}"), Source::Env(var));
        }
    }
}

/// `raw` as a value of the type of `like`; on failure, what was expected.
fn typed(raw: &str, like: &toml::Value) -> Result<toml::Value, &'static str> {
    let raw = raw.trim();
    match like {
        toml::Value::String(_) => Ok(toml::Value::String(raw.to_owned())),
        // A rate written `5` in the shipped file may be `2.5` here; the
        // section parser says which keys take whole numbers only.
        toml::Value::Integer(_) => raw
            .parse()
            .map(toml::Value::Integer)
            .or_else(|_| raw.parse().map(toml::Value::Float))
            .map_err(|_| "a number"),
        toml::Value::Float(_) => raw.parse().map(toml::Value::Float).map_err(|_| "a number"),
        toml::Value::Boolean(_) => raw
            .parse()
            .map(toml::Value::Boolean)
            .map_err(|_| "true or false"),
        toml::Value::Array(_) if raw.starts_with('[') => {
            let doc: toml::Table = format!("v = {raw}")
                .parse()
                .map_err(|_| "a TOML array or a comma-separated list")?;
            doc.get("v").cloned().ok_or("a TOML array")
        }
        toml::Value::Array(_) => Ok(toml::Value::Array(
            raw.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| toml::Value::String(s.to_owned()))
                .collect(),
        )),
        _ => Ok(toml::Value::String(raw.to_owned())),
    }
}
