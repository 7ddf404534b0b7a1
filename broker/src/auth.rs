//! Client tokens: HS256 JWTs carrying the account (`sub`), an optional
//! plan and role, and the channel globs the connection may use.

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

use crate::protocol::glob::GlobSet;

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
}

/// What a verified token lets a connection do.
#[derive(Debug, Clone)]
pub struct Grants {
    pub subscribe: GlobSet,
    pub publish: GlobSet,
}

impl Claims {
    pub fn grants(&self) -> Grants {
        Grants {
            subscribe: GlobSet::new(&self.sub_channels),
            publish: GlobSet::new(&self.pub_channels),
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AuthError {
    #[error(
        "no token: send `Sec-WebSocket-Protocol: tidegate.v1, bearer.<token>` or `Authorization: Bearer <token>`"
    )]
    Missing,
    #[error("token expired")]
    Expired,
    #[error("token signature is invalid")]
    BadSignature,
    #[error("token algorithm is not accepted (HS256 only)")]
    BadAlgorithm,
    #[error("token is malformed: {0}")]
    Malformed(String),
    #[error("token has an empty `sub`")]
    EmptySubject,
    #[error("the token secret is empty")]
    EmptySecret,
}

/// Verifies and mints tokens with one HS256 secret.
pub struct Authenticator {
    decoding: DecodingKey,
    encoding: EncodingKey,
    validation: Validation,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Authenticator { .. }")
    }
}

impl Authenticator {
    pub fn new(secret: &str, leeway_secs: u64) -> Result<Authenticator, AuthError> {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.leeway = leeway_secs;
        validation.set_required_spec_claims(&["exp", "sub"]);
        Ok(Authenticator {
            decoding: DecodingKey::from_secret(secret.as_bytes())
                .map_err(|_| AuthError::EmptySecret)?,
            encoding: EncodingKey::from_secret(secret.as_bytes())
                .map_err(|_| AuthError::EmptySecret)?,
            validation,
        })
    }

    /// Checks signature, algorithm and expiry. `alg: none` and every
    /// algorithm but HS256 are refused.
    pub fn verify(&self, token: &str) -> Result<Claims, AuthError> {
        use jsonwebtoken::errors::ErrorKind;
        let data = jsonwebtoken::decode::<Claims>(token, &self.decoding, &self.validation)
            .map_err(|e| {
                match e.kind() {
                    ErrorKind::ExpiredSignature => AuthError::Expired,
                    ErrorKind::InvalidSignature => AuthError::BadSignature,
                    ErrorKind::InvalidAlgorithm | ErrorKind::InvalidAlgorithmName => {
                        AuthError::BadAlgorithm
                    }
                    _ => {
                        // `alg: none` fails header parsing (an unknown variant).
                        let text = e.to_string();
                        if text.contains("unknown variant") {
                            AuthError::BadAlgorithm
                        } else {
                            AuthError::Malformed(text)
                        }
                    }
                }
            })?;
        if data.claims.sub.is_empty() {
            return Err(AuthError::EmptySubject);
        }
        Ok(data.claims)
    }

    pub fn mint(&self, claims: &Claims) -> String {
        // HS256 signing of serializable claims cannot fail.
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), claims, &self.encoding)
            .unwrap_or_default()
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
mod tests {
    use super::*;

    const SECRET: &str = "0123456789abcdef0123456789abcdef";

    fn claims(exp: u64) -> Claims {
        Claims {
            sub: "acme".into(),
            exp,
            plan: None,
            role: None,
            sub_channels: vec!["doc:*".into()],
            pub_channels: vec![],
        }
    }

    #[test]
    fn round_trip() {
        let auth = Authenticator::new(SECRET, 0).unwrap();
        let c = claims(unix_now() + 60);
        assert_eq!(auth.verify(&auth.mint(&c)).unwrap(), c);
        let g = c.grants();
        assert!(g.subscribe.matches("doc:1") && !g.publish.matches("doc:1"));
    }

    #[test]
    fn refuses_expired_bad_signature_and_alg_none() {
        let auth = Authenticator::new(SECRET, 0).unwrap();
        assert_eq!(
            auth.verify(&auth.mint(&claims(unix_now() - 10))),
            Err(AuthError::Expired)
        );
        let other = Authenticator::new("another-secret-another-secret", 0).unwrap();
        assert_eq!(
            auth.verify(&other.mint(&claims(unix_now() + 60))),
            Err(AuthError::BadSignature)
        );
        // Hand-made unsigned token: {"alg":"none","typ":"JWT"}.{"sub":"acme","exp":9999999999}.
        let none =
            "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.eyJzdWIiOiJhY21lIiwiZXhwIjo5OTk5OTk5OTk5fQ.";
        assert_eq!(auth.verify(none), Err(AuthError::BadAlgorithm));
        assert!(matches!(
            auth.verify("garbage"),
            Err(AuthError::Malformed(_))
        ));
    }

    #[test]
    fn hs512_is_refused() {
        let auth = Authenticator::new(SECRET, 0).unwrap();
        let key = EncodingKey::from_secret(SECRET.as_bytes()).unwrap();
        let t = jsonwebtoken::encode(
            &Header::new(Algorithm::HS512),
            &claims(unix_now() + 60),
            &key,
        )
        .unwrap();
        assert_eq!(auth.verify(&t), Err(AuthError::BadAlgorithm));
    }
}
