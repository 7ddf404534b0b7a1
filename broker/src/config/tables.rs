//! Reading a section of `config.toml` into its type while telling every
//! problem with its path (unknown keys, type errors), instead of stopping
//! at the first: one section, or each table of an array of tables.

use serde::de::DeserializeOwned;

/// The tables of an array-of-tables section (`[[hooks]]`, `[[webhooks]]`),
/// each deserialized, with the path its problems are told under
/// (`name[i] ("id")` once its id is known). An empty table (the section's
/// default) is no entry.
pub(super) fn entries<T: DeserializeOwned>(
    value: toml::Value,
    name: &str,
    id: impl Fn(&T) -> &str,
    problems: &mut Vec<String>,
) -> Vec<(String, T)> {
    let tables = match value {
        toml::Value::Table(t) if t.is_empty() => return Vec::new(),
        toml::Value::Array(a) => a,
        _ => {
            problems.push(format!("{name}: must be an array of tables ([[{name}]])"));
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    for (i, value) in tables.into_iter().enumerate() {
        let path = format!("{name}[{i}]");
        let Some(entry) = section::<T>(value, &path, problems) else {
            continue;
        };
        let path = match id(&entry) {
            "" => path,
            id => format!("{path} ({id:?})"),
        };
        out.push((path, entry));
    }
    out
}

/// Deserializes one section, recording unknown keys (with their full path)
/// and the first type error (with its path) instead of stopping.
pub(super) fn section<T: DeserializeOwned>(
    value: toml::Value,
    path: &str,
    problems: &mut Vec<String>,
) -> Option<T> {
    let mut unknown = Vec::new();
    let mut track = serde_path_to_error::Track::new();
    let de = serde_path_to_error::Deserializer::new(value, &mut track);
    let result = serde_ignored::deserialize(de, |p| unknown.push(p.to_string()));
    for u in unknown {
        problems.push(format!("{path}.{u}: unknown key"));
    }
    match result {
        Ok(v) => Some(v),
        Err(e) => {
            let at = track.path().to_string();
            let at = if at == "." {
                String::new()
            } else {
                format!(".{at}")
            };
            // toml's message repeats the key ("\nin `key`"): the path says it.
            let e = e.to_string();
            let e = e.split("\nin `").next().unwrap_or_default().trim_end();
            problems.push(format!("{path}{at}: {e}"));
            None
        }
    }
}
