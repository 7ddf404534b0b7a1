//! `tidegate check-config`'s listing: every node-wide value in force, where
//! it came from, and secrets masked so the output can be pasted into a
//! ticket.

use super::{Config, SAMPLE_API_KEY, SAMPLE_JWT_SECRET, Source};

/// Values printed as `********`: they sign tokens or control messages,
/// name buckets, or let a caller publish.
const SECRETS: [&str; 3] = [
    "auth.jwt_secret",
    "auth.fingerprint_secret",
    "cluster.secret",
];
/// Lists of secrets, printed as one `********` per entry.
const SECRET_LISTS: [&str; 1] = ["cluster.accept_secrets"];

impl Config {
    /// Each node-wide section as a table (the names the environment uses).
    pub(super) fn node_wide_tables(&self) -> Vec<(&'static str, toml::Table)> {
        let tables = [
            ("node", toml::Value::try_from(&self.node)),
            ("auth", toml::Value::try_from(&self.auth)),
            ("socket", toml::Value::try_from(&self.socket)),
            ("handshake", toml::Value::try_from(&self.handshake)),
            ("http", toml::Value::try_from(&self.http)),
            ("history", toml::Value::try_from(&self.history)),
            ("publish", toml::Value::try_from(&self.publish)),
            ("cluster", toml::Value::try_from(&self.cluster)),
            ("grpc", toml::Value::try_from(&self.grpc)),
        ];
        tables
            .into_iter()
            .filter_map(|(name, t)| match t {
                Ok(toml::Value::Table(t)) => Some((name, t)),
                _ => None,
            })
            .collect()
    }

    /// One line per value of the node-wide sections and the API keys:
    /// `path = value (source)`.
    pub fn report(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for (name, table) in self.node_wide_tables() {
            for (key, value) in table {
                let path = format!("{name}.{key}");
                let shown = if SECRETS.contains(&path.as_str()) {
                    match value.as_str().unwrap_or_default() {
                        "" => "\"\" (none)".to_owned(),
                        secret => masked(secret),
                    }
                } else if SECRET_LISTS.contains(&path.as_str()) {
                    let n = value.as_array().map_or(0, Vec::len);
                    format!("[{}]", vec!["\"********\""; n].join(", "))
                } else if path == "cluster.redis_url" {
                    format!(
                        "{:?}",
                        mask_url_password(value.as_str().unwrap_or_default())
                    )
                } else {
                    value.to_string()
                };
                lines.push(line(&path, &shown, &self.sources.get(&path)));
            }
            if name == "auth" {
                lines.extend(self.key_lines());
            }
        }
        for (i, k) in self.api_keys.iter().enumerate() {
            let at = |field: &str| format!("api_keys[{i}].{field}");
            lines.push(line(
                &at("key"),
                "\"********\"",
                &self.sources.get(&at("key")),
            ));
            lines.push(line(
                &at("account"),
                &format!("{:?}", k.account),
                &self.sources.get(&at("account")),
            ));
            lines.push(line(
                &at("pub_channels"),
                &toml::Value::try_from(&k.pub_channels)
                    .map(|v| v.to_string())
                    .unwrap_or_default(),
                &self.sources.get(&at("pub_channels")),
            ));
            lines.push(line(
                &at("sub_channels"),
                &toml::Value::try_from(&k.sub_channels)
                    .map(|v| v.to_string())
                    .unwrap_or_default(),
                &self.sources.get(&at("sub_channels")),
            ));
        }
        lines
    }

    /// One line per `[[auth.keys]]` entry, its secret masked.
    fn key_lines(&self) -> Vec<String> {
        self.auth
            .keys
            .iter()
            .enumerate()
            .map(|(i, k)| {
                let material = match (&k.secret, &k.secret_env, &k.public_key_file) {
                    (Some(s), _, _) => format!("secret = {}", masked(s)),
                    (None, Some(var), _) => format!("secret_env = {var:?}"),
                    (None, None, Some(file)) => format!("public_key_file = {:?}", file.display()),
                    (None, None, None) => "no key".to_owned(),
                };
                let shown = format!("{{ kid = {:?}, alg = {:?}, {material} }}", k.kid, k.alg);
                line(&format!("auth.keys[{i}]"), &shown, &Source::File)
            })
            .collect()
    }
}

/// A secret as `"********"`, saying only whether it is one of the public
/// samples.
fn masked(secret: &str) -> String {
    if secret == SAMPLE_JWT_SECRET || secret == SAMPLE_API_KEY {
        "\"********\" (the public sample)".to_owned()
    } else {
        format!("\"********\" ({} bytes)", secret.len())
    }
}

fn line(path: &str, value: &str, source: &Source) -> String {
    format!("{path} = {value}  ({source})")
}

/// `redis://user:secret@host/` → `redis://user:********@host/`.
pub fn mask_url_password(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    let rest = &url[scheme_end..];
    let Some(at) = rest.rfind('@') else {
        return url.to_owned();
    };
    let userinfo = &rest[..at];
    let masked = match userinfo.find(':') {
        Some(colon) => format!("{}:********", &userinfo[..colon]),
        None => "********".to_owned(),
    };
    format!("{}{masked}{}", &url[..scheme_end], &rest[at..])
}

#[cfg(test)]
mod tests {
    use super::mask_url_password;

    #[test]
    fn redis_passwords_are_masked() {
        assert_eq!(
            mask_url_password("redis://:hunter2@db:6379/0"),
            "redis://:********@db:6379/0"
        );
        assert_eq!(
            mask_url_password("rediss://app:p@ss@db/"),
            "rediss://app:********@db/"
        );
        assert_eq!(
            mask_url_password("redis://127.0.0.1:6379/"),
            "redis://127.0.0.1:6379/"
        );
    }
}
