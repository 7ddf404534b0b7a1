use std::path::PathBuf;

use serde_json::{Value, json};

use super::*;
use crate::config::Config;

const SECRET: &str = "0123456789abcdef0123456789abcdef";

fn claims(exp: u64) -> Claims {
    Claims {
        sub: "acme".into(),
        exp,
        plan: None,
        role: None,
        sub_channels: vec!["doc:*".into()],
        pub_channels: vec![],
        info: None,
    }
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/jwt")
        .join(name)
}

/// A token with any claims, signed with `key` under `alg` and `kid`.
fn sign(alg: Algorithm, kid: Option<&str>, claims: &Value, key: &EncodingKey) -> String {
    let mut header = Header::new(alg);
    header.kid = kid.map(Into::into);
    jsonwebtoken::encode(&header, claims, key).unwrap()
}

fn hs(secret: &str) -> EncodingKey {
    EncodingKey::from_secret(secret.as_bytes()).unwrap()
}

fn rsa() -> EncodingKey {
    EncodingKey::from_rsa_pem(&std::fs::read(fixture("rs256-private.pem")).unwrap()).unwrap()
}

fn ec() -> EncodingKey {
    EncodingKey::from_ec_pem(&std::fs::read(fixture("es256-private.pem")).unwrap()).unwrap()
}

fn valid() -> Value {
    json!({"sub": "acme", "exp": unix_now() + 60})
}

/// The authenticator a config's `[auth]` builds (`[plans.free]` added).
fn from(auth_toml: &str) -> Authenticator {
    let config = Config::from_toml(&format!("[plans.free]\n{auth_toml}"), &|_| None)
        .unwrap_or_else(|e| panic!("{e}"));
    Authenticator::from_config(&config.auth, &config.jwt_keys).unwrap()
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
    let none = "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.eyJzdWIiOiJhY21lIiwiZXhwIjo5OTk5OTk5OTk5fQ.";
    assert!(matches!(auth.verify(none), Err(AuthError::BadAlgorithm(_))));
    assert!(matches!(
        auth.verify("garbage"),
        Err(AuthError::Malformed(_))
    ));
}

#[test]
fn a_sub_longer_than_its_limit_is_refused_and_the_limit_is_accepted() {
    let auth = Authenticator::new(SECRET, 0).unwrap();
    let with_sub = |n: usize| Claims {
        sub: "a".repeat(n),
        ..claims(unix_now() + 60)
    };
    assert!(auth.verify(&auth.mint(&with_sub(MAX_SUB_BYTES))).is_ok());
    let err = auth
        .verify(&auth.mint(&with_sub(MAX_SUB_BYTES + 1)))
        .unwrap_err();
    assert_eq!(err, AuthError::SubjectTooLong(MAX_SUB_BYTES + 1));
    assert!(err.to_string().contains("at most 128"), "{err}");
}

#[test]
fn hs512_is_refused() {
    let auth = Authenticator::new(SECRET, 0).unwrap();
    let t = sign(Algorithm::HS512, None, &valid(), &hs(SECRET));
    let err = auth.verify(&t).unwrap_err();
    assert!(matches!(err, AuthError::BadAlgorithm(_)), "{err}");
    assert!(
        err.to_string().contains("HS256"),
        "says what the key takes: {err}"
    );
}

#[test]
fn rotated_keys_are_accepted_while_they_overlap() {
    let overlap = from(
        "[auth]\njwt_secret = \"\"\n\
         [[auth.keys]]\nkid = \"new\"\nalg = \"HS256\"\nsecret = \"the-new-secret-0123456\"\n\
         [[auth.keys]]\nkid = \"old\"\nalg = \"HS256\"\nsecret = \"the-old-secret-0123456\"\n",
    );
    let new = sign(
        Algorithm::HS256,
        Some("new"),
        &valid(),
        &hs("the-new-secret-0123456"),
    );
    let old = sign(
        Algorithm::HS256,
        Some("old"),
        &valid(),
        &hs("the-old-secret-0123456"),
    );
    assert!(overlap.verify(&new).is_ok());
    assert!(overlap.verify(&old).is_ok());
    // Without a kid, any key of the algorithm may have signed it.
    let bare = sign(
        Algorithm::HS256,
        None,
        &valid(),
        &hs("the-old-secret-0123456"),
    );
    assert!(overlap.verify(&bare).is_ok());
    // A kid names one key only.
    let crossed = sign(
        Algorithm::HS256,
        Some("new"),
        &valid(),
        &hs("the-old-secret-0123456"),
    );
    assert_eq!(overlap.verify(&crossed), Err(AuthError::BadSignature));
    let unknown = sign(
        Algorithm::HS256,
        Some("gone"),
        &valid(),
        &hs("the-old-secret-0123456"),
    );
    assert_eq!(
        overlap.verify(&unknown),
        Err(AuthError::UnknownKey("gone".into()))
    );
    // Dev tokens carry the first key's kid.
    let minted = overlap.mint(&claims(unix_now() + 60));
    assert_eq!(
        jsonwebtoken::decode_header(&minted).unwrap().kid.as_deref(),
        Some("new")
    );

    // After the rotation only the new key is left.
    let after = from(
        "[auth]\njwt_secret = \"\"\n[[auth.keys]]\nkid = \"new\"\nalg = \"HS256\"\nsecret = \"the-new-secret-0123456\"\n",
    );
    assert!(after.verify(&new).is_ok());
    assert_eq!(after.verify(&old), Err(AuthError::UnknownKey("old".into())));
}

#[test]
fn the_single_secret_still_accepts_tokens_with_any_kid() {
    // Earlier releases never looked at `kid`: tokens an app signs with the
    // one secret keep working whatever kid it puts in.
    let auth = from("[auth]\njwt_secret = \"a-single-secret-0123\"\n");
    let t = sign(
        Algorithm::HS256,
        Some("whatever"),
        &valid(),
        &hs("a-single-secret-0123"),
    );
    assert!(auth.verify(&t).is_ok());
}

#[test]
fn public_keys_from_pem_files_and_a_jwks_file() {
    let auth = from(&format!(
        "[auth]\njwt_secret = \"\"\njwks_file = {:?}\n\
         [[auth.keys]]\nkid = \"pem-rsa\"\nalg = \"RS256\"\npublic_key_file = {:?}\n\
         [[auth.keys]]\nkid = \"pem-ec\"\nalg = \"ES256\"\npublic_key_file = {:?}\n",
        fixture("jwks.json"),
        fixture("rs256-public.pem"),
        fixture("es256-public.pem"),
    ));
    let ok = |alg, kid: &str, key: &EncodingKey| {
        let t = sign(alg, Some(kid), &valid(), key);
        auth.verify(&t).unwrap_or_else(|e| panic!("{kid}: {e}"))
    };
    ok(Algorithm::RS256, "pem-rsa", &rsa());
    ok(Algorithm::ES256, "pem-ec", &ec());
    ok(Algorithm::RS256, "idp-rsa", &rsa());
    // `idp-ec` has no `alg`: its curve (P-256) says ES256.
    ok(Algorithm::ES256, "idp-ec", &ec());
    // The JWKS's encryption key is not a verification key.
    let enc = sign(Algorithm::RS256, Some("idp-enc"), &valid(), &rsa());
    assert_eq!(
        auth.verify(&enc),
        Err(AuthError::UnknownKey("idp-enc".into()))
    );
    // Algorithm confusion: an HS256 token "signed" with the public key's
    // PEM text as its secret is refused for the algorithm, not verified.
    let pem = std::fs::read_to_string(fixture("rs256-public.pem")).unwrap();
    let forged = sign(Algorithm::HS256, Some("idp-rsa"), &valid(), &hs(&pem));
    assert!(matches!(
        auth.verify(&forged),
        Err(AuthError::BadAlgorithm(_))
    ));
}

#[test]
fn unreadable_and_malformed_key_files_say_which_key() {
    let config = Config::from_toml(
        "[plans.free]\n[auth]\njwt_secret = \"\"\n[[auth.keys]]\nkid = \"k\"\nalg = \"RS256\"\npublic_key_file = \"/nonexistent/key.pem\"\n",
        &|_| None,
    )
    .unwrap();
    let e = Authenticator::from_config(&config.auth, &config.jwt_keys).unwrap_err();
    assert!(
        e.0.starts_with("auth.keys[0] (\"k\"): /nonexistent/key.pem"),
        "{e}"
    );

    let dir = std::env::temp_dir().join(format!("tidegate-jwks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("jwks.json");
    std::fs::write(&bad, r#"{"keys":[{"kty":"RSA","n":"AQAB","e":"AQAB"}]}"#).unwrap();
    let mut auth = config.auth.clone();
    auth.keys.clear();
    auth.jwks_file = bad.display().to_string();
    let e = Authenticator::from_config(&auth, &[]).unwrap_err();
    assert!(e.0.contains("keys[0] has no `kid`"), "{e}");
    std::fs::write(&bad, "not json").unwrap();
    let e = Authenticator::from_config(&auth, &[]).unwrap_err();
    assert!(e.0.contains("not a JWKS document"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn issuer_and_audience_are_checked_when_configured() {
    let secret = "issuer-test-secret-0123";
    let strict = from(&format!(
        "[auth]\njwt_secret = {secret:?}\nissuer = \"https://idp.example\"\naudience = \"tidegate\"\n"
    ));
    let with = |extra: Value| {
        let mut c = valid();
        c.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        sign(Algorithm::HS256, None, &c, &hs(secret))
    };
    let idp = "https://idp.example";
    for (extra, want) in [
        (json!({"iss": idp, "aud": "tidegate"}), Ok(())),
        (json!({"iss": idp, "aud": ["other", "tidegate"]}), Ok(())),
        (
            json!({"iss": "https://evil.example", "aud": "tidegate"}),
            Err(AuthError::WrongIssuer),
        ),
        // A configured issuer and audience are required.
        (json!({"aud": "tidegate"}), Err(AuthError::WrongIssuer)),
        (
            json!({"iss": idp, "aud": "billing"}),
            Err(AuthError::WrongAudience),
        ),
        (json!({"iss": idp}), Err(AuthError::WrongAudience)),
    ] {
        let got = strict.verify(&with(extra.clone())).map(drop);
        assert_eq!(got, want, "{extra}");
    }
    // Without `audience`, a token that names one is refused (RFC 7519).
    let plain = from(&format!("[auth]\njwt_secret = {secret:?}\n"));
    assert_eq!(
        plain.verify(&with(json!({"aud": "tidegate"}))),
        Err(AuthError::WrongAudience)
    );
    assert!(plain.verify(&with(json!({"iss": "anyone"}))).is_ok());
}

#[test]
fn nbf_has_a_small_leeway_and_exp_its_own() {
    let secret = "nbf-test-secret-012345";
    let auth = from(&format!(
        "[auth]\njwt_secret = {secret:?}\nnbf_leeway_secs = 5\n"
    ));
    let token = |nbf: u64, exp: u64| {
        sign(
            Algorithm::HS256,
            None,
            &json!({"sub": "acme", "nbf": nbf, "exp": exp}),
            &hs(secret),
        )
    };
    let now = unix_now();
    assert!(
        auth.verify(&token(now + 2, now + 60)).is_ok(),
        "a clock 2 s ahead"
    );
    assert_eq!(
        auth.verify(&token(now + 120, now + 600)),
        Err(AuthError::NotYetValid)
    );
    assert_eq!(
        auth.verify(&token(now - 10, now - 1)),
        Err(AuthError::Expired)
    );
    let lenient = from(&format!(
        "[auth]\njwt_secret = {secret:?}\nleeway_secs = 30\n"
    ));
    let late = token(now - 60, now - 10);
    assert!(lenient.verify(&late).is_ok());
    let c = lenient.verify(&late).unwrap();
    assert_eq!(lenient.deadline(&c), c.exp + 30);
}

#[test]
fn minting_needs_an_hs_key() {
    let auth = from(&format!(
        "[auth]\njwt_secret = \"\"\njwks_file = {:?}\n",
        fixture("jwks.json")
    ));
    assert_eq!(
        auth.try_mint(&claims(unix_now() + 60)),
        Err(AuthError::NoSigningKey)
    );
}
