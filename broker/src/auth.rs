//! Client tokens: JWTs carrying the account (`sub`), an optional plan and
//! role, and the channel globs the connection may use, verified with the
//! keys `[auth]` configures (`config/auth.rs`): the single HS256
//! `jwt_secret`, `[[auth.keys]]` with key ids, and an identity provider's
//! JWKS file. Several keys at once are what lets a secret be rotated
//! without a flag day: tokens signed with the old key and with the new one
//! are both accepted while they overlap.

use std::path::Path;

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, JwkSet, PublicKeyUse};
use jsonwebtoken::{Algorithm, AlgorithmFamily, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

use crate::config::{AuthSection, KeySource, VerifyKey};
use crate::protocol::glob::GlobSet;

/// The longest `sub` a token may carry (like a channel name's 128 bytes):
/// the account id becomes part of Redis key names, bucket names, metrics'
/// exceeded events and log lines, so it is bounded before anything uses
/// it.
pub const MAX_SUB_BYTES: usize = 128;

/// The claims Tidegate reads from a token (§1).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Claims {
    /// Account id.
    pub sub: String,
    /// Expiry, seconds since the Unix epoch.
    pub exp: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(default)]
    pub sub_channels: Vec<String>,
    #[serde(default)]
    pub pub_channels: Vec<String>,
    /// What presence shows of this connection (§13): a JSON object of at
    /// most 1,024 bytes, checked with the signature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub info: Option<serde_json::Value>,
}

/// What a verified token lets a connection do.
#[derive(Debug, Clone)]
pub struct Grants {
    pub subscribe: GlobSet,
    pub publish: GlobSet,
}

impl Claims {
    /// The token's channel grants, compiled. The tokens of a deployment
    /// mostly carry the same few patterns, so the thread's last compiled
    /// pair is shared with the next token that has the same ones (one
    /// entry a thread: bounded by the worker threads) instead of being
    /// compiled again: each connection kept six small allocations of its
    /// own copy (issue 42).
    pub fn grants(&self) -> Grants {
        type Last = Option<(Vec<String>, Vec<String>, Grants)>;
        thread_local! {
            static LAST: std::cell::RefCell<Last> = const { std::cell::RefCell::new(None) };
        }
        LAST.with(|last| {
            let mut last = last.borrow_mut();
            if let Some((sub, publ, grants)) = &*last
                && *sub == self.sub_channels
                && *publ == self.pub_channels
            {
                return grants.clone();
            }
            let grants = Grants {
                subscribe: GlobSet::new(&self.sub_channels),
                publish: GlobSet::new(&self.pub_channels),
            };
            *last = Some((
                self.sub_channels.clone(),
                self.pub_channels.clone(),
                grants.clone(),
            ));
            grants
        })
    }

    /// The `info` claim as compact JSON text (checked by
    /// [`Authenticator::verify`]).
    pub fn info_json(&self) -> Option<std::sync::Arc<str>> {
        self.info
            .as_ref()
            .and_then(|i| crate::protocol::presence::check_info(i).ok())
    }

    /// `exp` in milliseconds since the Unix epoch (`tokenExpiresAt`, §2).
    pub fn expires_at_ms(&self) -> u64 {
        self.exp.saturating_mul(1000)
    }
}

/// Why a token was refused. The messages go to the client (401 bodies,
/// `bad_request` on a refresh), so they say what to change and never
/// quote a key.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AuthError {
    #[error(
        "no token: send `Sec-WebSocket-Protocol: tidegate.v1, bearer.<token>` or `Authorization: Bearer <token>`"
    )]
    Missing,
    #[error("token expired")]
    Expired,
    #[error("token is not valid yet (`nbf` is in the future)")]
    NotYetValid,
    #[error("token signature is invalid")]
    BadSignature,
    #[error("token algorithm is not accepted ({0})")]
    BadAlgorithm(String),
    #[error("token names key id {0:?}, which no configured key has")]
    UnknownKey(String),
    #[error("token issuer (`iss`) is not the one this broker accepts")]
    WrongIssuer,
    #[error(
        "token audience (`aud`) does not name this broker (a token with `aud` needs auth.audience)"
    )]
    WrongAudience,
    #[error("token is malformed: {0}")]
    Malformed(String),
    #[error("token has an empty `sub`")]
    EmptySubject,
    /// `sub` names Redis keys, buckets and log lines: bounded like a
    /// channel name.
    #[error("token `sub` is {0} bytes long; it must be at most {MAX_SUB_BYTES}")]
    SubjectTooLong(usize),
    /// The `info` claim is not an object, or is too large (§13).
    #[error("{0}")]
    BadInfo(String),
    #[error("the token secret is empty")]
    EmptySecret,
    #[error(
        "no HS key to sign tokens with (set auth.jwt_secret or an HS256 entry of [[auth.keys]])"
    )]
    NoSigningKey,
}

/// A key could not be built from its file (`[auth]`: PEM, JWKS).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0}")]
pub struct KeyError(pub String);

/// One verification key, ready to check signatures.
struct Key {
    kid: Option<String>,
    alg: Algorithm,
    decoding: DecodingKey,
}

/// Verifies tokens against every configured key, and mints development
/// tokens with the first HS key.
pub struct Authenticator {
    keys: Vec<Key>,
    signer: Option<(Option<String>, Algorithm, EncodingKey)>,
    /// Issuer, audience, `nbf` and its leeway: shared by every key (the
    /// algorithm is set per key).
    validation: Validation,
    /// Clock skew tolerated on `exp`, checked here so the handshake and an
    /// open socket's deadline (`socket/actor/refresh.rs`) agree.
    exp_leeway_secs: u64,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Authenticator {{ {} keys }}", self.keys.len())
    }
}

const JOSE_FAMILIES: &str = "the key's own algorithm";

impl Authenticator {
    /// One HS256 secret, no key id, no issuer or audience (tests, the fuzz
    /// targets, the benches).
    pub fn new(secret: &str, leeway_secs: u64) -> Result<Authenticator, AuthError> {
        if secret.is_empty() {
            return Err(AuthError::EmptySecret);
        }
        let key = Key {
            kid: None,
            alg: Algorithm::HS256,
            decoding: DecodingKey::from_secret(secret.as_bytes())
                .map_err(|_| AuthError::EmptySecret)?,
        };
        Ok(Authenticator {
            keys: vec![key],
            signer: Some((
                None,
                Algorithm::HS256,
                EncodingKey::from_secret(secret.as_bytes()).map_err(|_| AuthError::EmptySecret)?,
            )),
            validation: validation(None, &[], 0),
            exp_leeway_secs: leeway_secs,
        })
    }

    /// The keys `[auth]` configures (`config.jwt_keys`, then the JWKS
    /// file's), reading every file now: a reload calls this again, which
    /// is how a rotated PEM or JWKS file is picked up.
    pub fn from_config(
        auth: &AuthSection,
        configured: &[VerifyKey],
    ) -> Result<Authenticator, KeyError> {
        let mut keys = Vec::new();
        let mut signer = None;
        for k in configured {
            let decoding = match &k.source {
                KeySource::Secret(s) => {
                    if signer.is_none() || (k.kid.is_some() && signer_is_legacy(&signer)) {
                        signer = EncodingKey::from_secret(s)
                            .ok()
                            .map(|e| (k.kid.clone(), k.alg, e));
                    }
                    DecodingKey::from_secret(s).map_err(|e| e.to_string())
                }
                KeySource::PublicKeyFile(path) => public_key(k.alg, path),
            }
            .map_err(|why| KeyError(format!("{}: {why}", k.path)))?;
            keys.push(Key {
                kid: k.kid.clone(),
                alg: k.alg,
                decoding,
            });
        }
        if !auth.jwks_file.is_empty() {
            for key in jwks(Path::new(&auth.jwks_file))? {
                if keys.iter().any(|k| k.kid == key.kid) {
                    return Err(KeyError(format!(
                        "auth.jwks_file: key id {:?} is also in [[auth.keys]]",
                        key.kid.unwrap_or_default()
                    )));
                }
                keys.push(key);
            }
        }
        let issuer = (!auth.issuer.is_empty()).then_some(auth.issuer.as_str());
        Ok(Authenticator {
            keys,
            signer,
            validation: validation(issuer, &auth.audience, auth.nbf_leeway_secs),
            exp_leeway_secs: auth.leeway_secs,
        })
    }

    /// Checks the signature (with the key the header's `kid` names, or
    /// every key of the token's algorithm when it names none), the
    /// algorithm (the key's own: `alg: none` and any other are refused),
    /// `exp`, `nbf`, and `iss`/`aud` when configured.
    pub fn verify(&self, token: &str) -> Result<Claims, AuthError> {
        let header = jsonwebtoken::decode_header(token).map_err(|e| refusal(&e))?;
        let named: Vec<&Key> = match &header.kid {
            Some(kid) if self.keys.iter().any(|k| k.kid.as_ref() == Some(kid)) => self
                .keys
                .iter()
                .filter(|k| k.kid.as_ref() == Some(kid))
                .collect(),
            // A kid no key has: only the key without one may have signed
            // it (`jwt_secret`, which never looked at kids).
            Some(kid) => {
                let legacy: Vec<&Key> = self.keys.iter().filter(|k| k.kid.is_none()).collect();
                if legacy.is_empty() {
                    return Err(AuthError::UnknownKey(kid.chars().take(64).collect()));
                }
                legacy
            }
            None => self.keys.iter().collect(),
        };
        let candidates: Vec<&Key> = named
            .iter()
            .copied()
            .filter(|k| k.alg == header.alg)
            .collect();
        if candidates.is_empty() {
            let wanted: Vec<String> = named.iter().map(|k| format!("{:?}", k.alg)).collect();
            return Err(AuthError::BadAlgorithm(if wanted.is_empty() {
                JOSE_FAMILIES.into()
            } else {
                format!("{:?}; the key takes {}", header.alg, wanted.join(" or "))
            }));
        }
        let mut last = AuthError::BadSignature;
        for key in candidates {
            let mut validation = self.validation.clone();
            validation.algorithms = vec![key.alg];
            match jsonwebtoken::decode::<Claims>(token, &key.decoding, &validation) {
                Ok(data) => return self.check(data.claims),
                // Another key of the same algorithm may have signed it.
                Err(e) if *e.kind() == jsonwebtoken::errors::ErrorKind::InvalidSignature => {
                    last = AuthError::BadSignature;
                }
                Err(e) => return Err(refusal(&e)),
            }
        }
        Err(last)
    }

    fn check(&self, claims: Claims) -> Result<Claims, AuthError> {
        // RFC 7519: not accepted "on or after" `exp` (plus the leeway), the
        // moment an open socket is closed with 4001.
        if self.deadline(&claims) <= unix_now() {
            return Err(AuthError::Expired);
        }
        if claims.sub.is_empty() {
            return Err(AuthError::EmptySubject);
        }
        if claims.sub.len() > MAX_SUB_BYTES {
            return Err(AuthError::SubjectTooLong(claims.sub.len()));
        }
        if let Some(info) = &claims.info {
            crate::protocol::presence::check_info(info).map_err(AuthError::BadInfo)?;
        }
        Ok(claims)
    }

    /// When a verified token stops being accepted (seconds since the
    /// epoch): its `exp` plus the leeway.
    pub fn deadline(&self, claims: &Claims) -> u64 {
        claims.exp.saturating_add(self.exp_leeway_secs)
    }

    /// Signs `claims` with the first HS key (its `kid` in the header);
    /// empty when no HS key is configured (see [`Authenticator::try_mint`]).
    pub fn mint(&self, claims: &Claims) -> String {
        self.try_mint(claims).unwrap_or_default()
    }

    pub fn try_mint(&self, claims: &Claims) -> Result<String, AuthError> {
        let (kid, alg, key) = self.signer.as_ref().ok_or(AuthError::NoSigningKey)?;
        let mut header = Header::new(*alg);
        header.kid = kid.clone();
        // HMAC signing of serializable claims cannot fail.
        jsonwebtoken::encode(&header, claims, key).map_err(|e| AuthError::Malformed(e.to_string()))
    }
}

/// Whether the signer so far is `jwt_secret` (no kid): an `[[auth.keys]]`
/// HS entry takes over, so dev tokens carry the current key id.
fn signer_is_legacy(signer: &Option<(Option<String>, Algorithm, EncodingKey)>) -> bool {
    matches!(signer, Some((None, _, _)))
}

fn validation(issuer: Option<&str>, audience: &[String], nbf_leeway: u64) -> Validation {
    let mut v = Validation::new(Algorithm::HS256);
    v.leeway = nbf_leeway;
    v.validate_exp = false;
    v.validate_nbf = true;
    let mut required = vec!["exp", "sub"];
    if let Some(iss) = issuer {
        v.set_issuer(&[iss]);
        required.push("iss");
    }
    if !audience.is_empty() {
        v.set_audience(audience);
        required.push("aud");
    }
    v.set_required_spec_claims(&required);
    v
}

/// The client's refusal for a decoding error.
fn refusal(e: &jsonwebtoken::errors::Error) -> AuthError {
    use jsonwebtoken::errors::ErrorKind;
    match e.kind() {
        ErrorKind::ExpiredSignature => AuthError::Expired,
        ErrorKind::ImmatureSignature => AuthError::NotYetValid,
        ErrorKind::InvalidSignature => AuthError::BadSignature,
        ErrorKind::InvalidIssuer => AuthError::WrongIssuer,
        ErrorKind::InvalidAudience => AuthError::WrongAudience,
        ErrorKind::MissingRequiredClaim(c) if c == "iss" => AuthError::WrongIssuer,
        ErrorKind::MissingRequiredClaim(c) if c == "aud" => AuthError::WrongAudience,
        ErrorKind::InvalidAlgorithm | ErrorKind::InvalidAlgorithmName => {
            AuthError::BadAlgorithm(JOSE_FAMILIES.into())
        }
        _ => {
            // `alg: none` fails header parsing (an unknown variant).
            let text = e.to_string();
            if text.contains("unknown variant") {
                AuthError::BadAlgorithm(JOSE_FAMILIES.into())
            } else {
                AuthError::Malformed(text)
            }
        }
    }
}

/// A public key from a PEM file, for `alg`.
fn public_key(alg: Algorithm, path: &Path) -> Result<DecodingKey, String> {
    let pem = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let key = match alg.family() {
        AlgorithmFamily::Rsa => DecodingKey::from_rsa_pem(&pem),
        AlgorithmFamily::Ec => DecodingKey::from_ec_pem(&pem),
        AlgorithmFamily::Ed => DecodingKey::from_ed_pem(&pem),
        AlgorithmFamily::Hmac => return Err("an HS key is not a public key".into()),
    };
    key.map_err(|e| format!("{}: not a PEM {alg:?} public key ({e})", path.display()))
}

/// The signing keys of a JWKS file. Keys meant for encryption are left
/// out; every other key needs a `kid`, and an algorithm (its `alg`, or the
/// one its type implies: RSA → RS256, P-256 → ES256, P-384 → ES384,
/// Ed25519 → EdDSA).
fn jwks(path: &Path) -> Result<Vec<Key>, KeyError> {
    let at = |why: String| KeyError(format!("auth.jwks_file: {}: {why}", path.display()));
    let text = std::fs::read(path).map_err(|e| at(e.to_string()))?;
    let set: JwkSet =
        serde_json::from_slice(&text).map_err(|e| at(format!("not a JWKS document ({e})")))?;
    let mut keys = Vec::new();
    for (i, jwk) in set.keys.iter().enumerate() {
        if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
            continue;
        }
        let Some(kid) = jwk.common.key_id.clone() else {
            return Err(at(format!("keys[{i}] has no `kid`")));
        };
        let alg = jwk_algorithm(jwk).ok_or_else(|| {
            at(format!(
                "keys[{i}] ({kid:?}): no `alg`, and none follows from its key type"
            ))
        })?;
        if alg.family() == AlgorithmFamily::Hmac {
            return Err(at(format!(
                "keys[{i}] ({kid:?}): a shared secret does not belong in a file of public keys"
            )));
        }
        let decoding =
            DecodingKey::from_jwk(jwk).map_err(|e| at(format!("keys[{i}] ({kid:?}): {e}")))?;
        keys.push(Key {
            kid: Some(kid),
            alg,
            decoding,
        });
    }
    Ok(keys)
}

fn jwk_algorithm(jwk: &Jwk) -> Option<Algorithm> {
    if let Some(alg) = jwk.common.key_algorithm {
        return Algorithm::try_from(alg).ok();
    }
    match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => Some(Algorithm::RS256),
        AlgorithmParameters::EllipticCurve(ec) => match ec.curve {
            EllipticCurve::P256 => Some(Algorithm::ES256),
            EllipticCurve::P384 => Some(Algorithm::ES384),
            _ => None,
        },
        AlgorithmParameters::OctetKeyPair(_) => Some(Algorithm::EdDSA),
        _ => None,
    }
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;
