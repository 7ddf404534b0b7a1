//! `[admin]` (§10): the operator's admin key and the optional read-only
//! viewer key, each given in the file or named by an environment variable,
//! and `[log]`: how the node writes its log lines.

use serde::Deserialize;

/// Admin and viewer keys must be at least this long (§10).
pub const MIN_ADMIN_KEY_BYTES: usize = 16;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct AdminSection {
    pub key: Option<String>,
    pub key_env: Option<String>,
    pub viewer_key: Option<String>,
    pub viewer_key_env: Option<String>,
}

/// The keys `[admin]` resolved to. Without an admin key every admin route
/// answers 404.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AdminKeys {
    pub admin: Option<String>,
    pub viewer: Option<String>,
}

/// How log lines are written; `--log-format` / `TIDEGATE_LOG_FORMAT`
/// override the file.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!("log format {other:?}: use \"text\" or \"json\"")),
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct LogSection {
    pub format: LogFormat,
}

/// One key from `key` or `key_env` (not both), at least 16 bytes.
fn one_key(
    path: &str,
    key: &Option<String>,
    var: &Option<String>,
    env: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<String>,
) -> Option<String> {
    let field = ("admin", path, false, MIN_ADMIN_KEY_BYTES);
    super::env::secret_field(field, key, var, env, problems)
}

impl AdminSection {
    pub fn resolve(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
        problems: &mut Vec<String>,
    ) -> AdminKeys {
        let admin = one_key("key", &self.key, &self.key_env, env, problems);
        let viewer = one_key(
            "viewer_key",
            &self.viewer_key,
            &self.viewer_key_env,
            env,
            problems,
        );
        if viewer.is_some() && admin.is_none() {
            problems.push("admin.viewer_key: needs an admin key (`key` or `key_env`)".into());
        }
        if viewer.is_some() && viewer == admin {
            problems.push("admin.viewer_key: must differ from the admin key".into());
        }
        AdminKeys { admin, viewer }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(toml: &str, env: &dyn Fn(&str) -> Option<String>) -> (AdminKeys, Vec<String>) {
        let section: AdminSection = toml::from_str(toml).unwrap();
        let mut problems = Vec::new();
        (section.resolve(env, &mut problems), problems)
    }

    #[test]
    fn keys_come_from_the_file_or_the_environment_and_are_long_enough() {
        let none = |_: &str| None;
        assert_eq!(resolve("", &none), (AdminKeys::default(), vec![]));
        let (keys, problems) = resolve("key = \"0123456789abcdef\"", &none);
        assert_eq!(keys.admin.as_deref(), Some("0123456789abcdef"));
        assert!(problems.is_empty());
        let env = |v: &str| (v == "ADM").then(|| "from-the-environment".to_string());
        let (keys, _) = resolve("key_env = \"ADM\"", &env);
        assert_eq!(keys.admin.as_deref(), Some("from-the-environment"));
        let (_, problems) = resolve("key = \"short\"", &none);
        assert_eq!(problems, vec!["admin.key: must be at least 16 bytes"]);
        let (_, problems) = resolve("key_env = \"MISSING\"", &none);
        assert_eq!(
            problems,
            vec!["admin.key_env: environment variable MISSING is not set"]
        );
        let (_, problems) = resolve("viewer_key = \"0123456789abcdef\"", &none);
        assert_eq!(
            problems,
            vec!["admin.viewer_key: needs an admin key (`key` or `key_env`)"]
        );
    }

    #[test]
    fn log_format_parses() {
        assert_eq!("json".parse(), Ok(LogFormat::Json));
        assert!("xml".parse::<LogFormat>().is_err());
    }
}
