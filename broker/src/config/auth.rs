//! `[auth]`'s verification keys and the API-key fingerprint key.
//!
//! A token is checked with `jwt_secret` (HS256, no key id: the single-secret
//! config of every earlier release), the `[[auth.keys]]` entries (each with
//! a `kid`: HS secrets, or RS/PS/ES/EdDSA public keys in PEM files) and the
//! keys of `jwks_file`. The files are read where the keys are built
//! (`auth.rs`), so a reload (SIGHUP) reads them again; here every entry is
//! checked for what can be known without them, and HS secrets are read
//! from the file or the environment.

use std::path::PathBuf;

use hmac::{Hmac, KeyInit, Mac};
use jsonwebtoken::{Algorithm, AlgorithmFamily};
use serde::{Deserialize, Deserializer, Serialize};
use sha2::Sha256;

use super::secret::{ClusterSecrets, MIN_SECRET_BYTES, Secret};
use super::{AuthSection, SAMPLE_JWT_SECRET};

/// The shortest HS secret and fingerprint secret accepted.
pub const MIN_JWT_SECRET_BYTES: usize = MIN_SECRET_BYTES;

/// The algorithms a key may name (`alg`), as JOSE spells them.
pub const KEY_ALGORITHMS: [&str; 12] = [
    "HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256",
    "ES384", "EdDSA",
];

/// One `[[auth.keys]]` entry as written.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct KeyEntry {
    /// The key id a token names in its header (`kid`).
    pub kid: String,
    /// `HS256` (a shared secret) or a public-key algorithm (`RS256`,
    /// `ES256`, ...): a token must use exactly this one with this key.
    pub alg: String,
    /// HS secrets: the secret itself, or the variable holding it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_env: Option<String>,
    /// Public-key algorithms: a PEM file with the public key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_key_file: Option<PathBuf>,
}

/// Where a verification key's material is.
#[derive(Clone, PartialEq, Eq)]
pub enum KeySource {
    /// An HS secret's bytes.
    Secret(Vec<u8>),
    /// A PEM file with a public key (read when the keys are built).
    PublicKeyFile(PathBuf),
}

impl std::fmt::Debug for KeySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeySource::Secret(s) => write!(f, "Secret({} bytes)", s.len()),
            KeySource::PublicKeyFile(p) => write!(f, "PublicKeyFile({})", p.display()),
        }
    }
}

/// A key as configured: `kid` is `None` for `jwt_secret` only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyKey {
    pub kid: Option<String>,
    pub alg: Algorithm,
    pub source: KeySource,
    /// Where it was configured (`auth.keys[1] ("2026-11")`), for messages.
    pub path: String,
}

/// `audience` as one string or a list of them.
pub(super) fn one_or_many<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(s) if s.is_empty() => Vec::new(),
        OneOrMany::One(s) => vec![s],
        OneOrMany::Many(v) => v,
    })
}

/// The keys `[auth]` configures, in order: `jwt_secret` first (when set),
/// then `[[auth.keys]]`. Reports every problem with its path.
pub(super) fn resolve_keys(
    auth: &AuthSection,
    env: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<String>,
) -> Vec<VerifyKey> {
    let mut keys = Vec::new();
    if !auth.jwt_secret.is_empty() {
        if auth.jwt_secret.len() < MIN_JWT_SECRET_BYTES {
            problems.push(format!(
                "auth.jwt_secret: must be at least {MIN_JWT_SECRET_BYTES} bytes"
            ));
        }
        keys.push(VerifyKey {
            kid: None,
            alg: Algorithm::HS256,
            source: KeySource::Secret(auth.jwt_secret.clone().into_bytes()),
            path: "auth.jwt_secret".into(),
        });
    }
    let mut kids = std::collections::HashSet::new();
    for (i, entry) in auth.keys.iter().enumerate() {
        let path = if entry.kid.is_empty() {
            format!("auth.keys[{i}]")
        } else {
            format!("auth.keys[{i}] ({:?})", entry.kid)
        };
        if let Some(key) = resolve_entry(entry, &path, env, problems) {
            if !kids.insert(entry.kid.clone()) {
                problems.push(format!("{path}.kid: {:?} is used twice", entry.kid));
            }
            keys.push(key);
        }
    }
    if keys.is_empty() && auth.jwks_file.is_empty() {
        problems.push(
            "auth: no key verifies tokens: set auth.jwt_secret (TIDEGATE_JWT_SECRET), [[auth.keys]] or auth.jwks_file".into(),
        );
    }
    for (i, aud) in auth.audience.iter().enumerate() {
        if aud.is_empty() {
            problems.push(format!("auth.audience[{i}]: must not be empty"));
        }
    }
    keys
}

fn resolve_entry(
    entry: &KeyEntry,
    path: &str,
    env: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<String>,
) -> Option<VerifyKey> {
    let before = problems.len();
    let kid_ok = !entry.kid.is_empty()
        && entry.kid.len() <= 128
        && entry.kid.bytes().all(|b| b.is_ascii_graphic());
    if !kid_ok {
        problems.push(format!(
            "{path}.kid: 1-128 printable ASCII characters, the `kid` tokens signed with this key carry"
        ));
    }
    let alg = match entry.alg.parse::<Algorithm>() {
        Ok(a) if KEY_ALGORITHMS.contains(&entry.alg.as_str()) => Some(a),
        _ => {
            problems.push(format!(
                "{path}.alg: {:?} is not one of {}",
                entry.alg,
                KEY_ALGORITHMS.join(", ")
            ));
            None
        }
    };
    let source = match alg.map(|a| a.family()) {
        Some(AlgorithmFamily::Hmac) => {
            if entry.public_key_file.is_some() {
                problems.push(format!(
                    "{path}.public_key_file: an {} key is a shared secret: give `secret` or `secret_env`",
                    entry.alg
                ));
            }
            secret(entry, path, env, problems).map(KeySource::Secret)
        }
        Some(_) => {
            if entry.secret.is_some() || entry.secret_env.is_some() {
                problems.push(format!(
                    "{path}.secret: an {} key is a public key: give `public_key_file` (PEM), not a secret",
                    entry.alg
                ));
            }
            match &entry.public_key_file {
                Some(p) if !p.as_os_str().is_empty() => Some(KeySource::PublicKeyFile(p.clone())),
                _ => {
                    problems.push(format!(
                        "{path}.public_key_file: an {} key needs the PEM file of its public key",
                        entry.alg
                    ));
                    None
                }
            }
        }
        None => None,
    };
    if problems.len() > before {
        return None;
    }
    Some(VerifyKey {
        kid: Some(entry.kid.clone()),
        alg: alg?,
        source: source?,
        path: path.to_owned(),
    })
}

/// An HS key's secret from exactly one of `secret` and `secret_env`.
fn secret(
    entry: &KeyEntry,
    path: &str,
    env: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<String>,
) -> Option<Vec<u8>> {
    let field = (path, "secret", true, MIN_JWT_SECRET_BYTES);
    super::env::secret_field(field, &entry.secret, &entry.secret_env, env, problems)
        .map(String::into_bytes)
}

/// Whether any configured HS key is the public sample secret.
pub(super) fn uses_sample_secret(keys: &[VerifyKey]) -> bool {
    keys.iter()
        .any(|k| k.source == KeySource::Secret(SAMPLE_JWT_SECRET.as_bytes().to_vec()))
}

/// The key of the API keys' fingerprints (`http/keys.rs`): the names of
/// their buckets in Redis, the same on every node. `auth.fingerprint_secret`
/// when set; else derived from the cluster's signing secret (every node
/// has it); a single node without either uses a key of its own process
/// (its buckets never leave it). Never the JWT secret, so rotating the
/// JWT keys keeps every API key's bucket.
pub(super) fn fingerprint_key(
    auth: &AuthSection,
    cluster: &ClusterSecrets,
    problems: &mut Vec<String>,
) -> Secret {
    let own = &auth.fingerprint_secret;
    if !own.is_empty() && own.len() < MIN_JWT_SECRET_BYTES {
        problems.push(format!(
            "auth.fingerprint_secret: must be at least {MIN_JWT_SECRET_BYTES} bytes"
        ));
    }
    Secret(derive_fingerprint_key(
        auth,
        cluster.sign.as_ref().map(|s| s.0.as_slice()),
    ))
}

fn derive_fingerprint_key(auth: &AuthSection, cluster_secret: Option<&[u8]>) -> Vec<u8> {
    if !auth.fingerprint_secret.is_empty() {
        return auth.fingerprint_secret.as_bytes().to_vec();
    }
    match cluster_secret {
        Some(secret) => {
            let mut mac =
                Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes a key of any length");
            mac.update(b"tidegate api-key fingerprints v1");
            mac.finalize().into_bytes().to_vec()
        }
        None => PROCESS_KEY.to_vec(),
    }
}

/// A random key for this process's own fingerprints.
static PROCESS_KEY: std::sync::LazyLock<[u8; 32]> = std::sync::LazyLock::new(rand::random);

#[cfg(test)]
mod tests {
    use super::*;

    fn auth(toml: &str) -> AuthSection {
        toml::from_str(toml).unwrap()
    }

    fn resolve(toml: &str, env: &dyn Fn(&str) -> Option<String>) -> (Vec<VerifyKey>, Vec<String>) {
        let mut problems = Vec::new();
        let keys = resolve_keys(&auth(toml), env, &mut problems);
        (keys, problems)
    }

    #[test]
    fn the_single_secret_is_a_kidless_hs256_key() {
        let (keys, problems) = resolve("jwt_secret = \"0123456789abcdef\"", &|_| None);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(keys.len(), 1);
        assert_eq!(
            (keys[0].kid.as_deref(), keys[0].alg),
            (None, Algorithm::HS256)
        );
    }

    #[test]
    fn key_entries_are_checked_one_by_one() {
        let text = r#"
            jwt_secret = ""
            [[keys]]
            kid = "a"
            alg = "HS256"
            secret_env = "KEY_A"
            [[keys]]
            kid = "a"
            alg = "HS256"
            secret = "short"
            [[keys]]
            kid = "rsa"
            alg = "RS256"
            [[keys]]
            kid = "x"
            alg = "none"
            [[keys]]
            kid = "ec"
            alg = "ES256"
            public_key_file = "/etc/idp.pem"
            secret = "0123456789abcdef"
        "#;
        let env = |k: &str| (k == "KEY_A").then(|| "0123456789abcdef0123".to_string());
        let (keys, problems) = resolve(text, &env);
        let all = problems.join("\n");
        for needle in [
            "auth.keys[1] (\"a\").secret: must be at least 16 bytes",
            "auth.keys[2] (\"rsa\").public_key_file: an RS256 key needs",
            "auth.keys[3] (\"x\").alg: \"none\" is not one of",
            "auth.keys[4] (\"ec\").secret: an ES256 key is a public key",
        ] {
            assert!(all.contains(needle), "missing {needle:?} in:\n{all}");
        }
        assert_eq!(keys.len(), 1, "only the good entry resolves");
        assert_eq!(keys[0].kid.as_deref(), Some("a"));
        assert_eq!(
            keys[0].source,
            KeySource::Secret(b"0123456789abcdef0123".to_vec())
        );
    }

    #[test]
    fn duplicate_kids_and_no_key_at_all_are_problems() {
        let text = "jwt_secret = \"\"\n[[keys]]\nkid = \"a\"\nalg = \"HS256\"\nsecret = \"0123456789abcdef\"\n[[keys]]\nkid = \"a\"\nalg = \"HS512\"\nsecret = \"0123456789abcdef\"\n";
        let (_, problems) = resolve(text, &|_| None);
        assert!(
            problems.iter().any(|p| p.contains("is used twice")),
            "{problems:?}"
        );
        let (_, problems) = resolve("jwt_secret = \"\"", &|_| None);
        assert!(problems[0].starts_with("auth: no key verifies tokens"));
        let (_, problems) = resolve("jwt_secret = \"\"\njwks_file = \"/idp/jwks.json\"", &|_| {
            None
        });
        assert!(
            problems.is_empty(),
            "a JWKS file alone is enough: {problems:?}"
        );
    }

    #[test]
    fn audience_is_one_string_or_a_list() {
        assert_eq!(auth("audience = \"tidegate\"").audience, vec!["tidegate"]);
        assert_eq!(auth("audience = [\"a\", \"b\"]").audience, vec!["a", "b"]);
        assert!(auth("audience = \"\"").audience.is_empty());
    }

    #[test]
    fn fingerprints_never_use_the_jwt_secret() {
        let a = auth("jwt_secret = \"0123456789abcdef\"");
        let b = auth("jwt_secret = \"fedcba9876543210\"");
        let cluster = b"a-cluster-secret-of-some-length".as_slice();
        assert_eq!(
            derive_fingerprint_key(&a, Some(cluster)),
            derive_fingerprint_key(&b, Some(cluster)),
            "rotating the JWT secret keeps the fingerprints"
        );
        assert_ne!(derive_fingerprint_key(&a, Some(cluster)), cluster);
        let own = auth("fingerprint_secret = \"fingerprints-0123456\"");
        assert_eq!(
            derive_fingerprint_key(&own, Some(cluster)),
            b"fingerprints-0123456"
        );
        assert_eq!(
            derive_fingerprint_key(&a, None),
            derive_fingerprint_key(&b, None)
        );
    }
}
