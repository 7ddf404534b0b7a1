//! Verification keys (`[auth]`): HS secrets with key ids overlapping
//! during a rotation, RS256/ES256 public keys in PEM and JWKS files (the
//! JWKS read again on SIGHUP), issuer and audience, and API-key buckets
//! that a JWT secret rotation leaves alone.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use tidegate::auth::unix_now;

use crate::certs::TempDir;
use crate::common::{Broker, Client, PATIENCE, config};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/jwt")
        .join(name)
}

fn claims() -> Value {
    json!({"sub": "acme", "exp": unix_now() + 600, "sub_channels": ["doc:*"]})
}

/// `claims` signed under `alg` and `kid` with `key`: a fixture's private
/// key (`"rs256"`, `"es256"`) or, for any other text, that HS secret.
fn sign(alg: Algorithm, kid: &str, claims: &Value, key: &str) -> String {
    let pem = |f: &str| std::fs::read(fixture(f)).unwrap();
    let key = match key {
        "rs256" => EncodingKey::from_rsa_pem(&pem("rs256-private.pem")).unwrap(),
        "es256" => EncodingKey::from_ec_pem(&pem("es256-private.pem")).unwrap(),
        secret => EncodingKey::from_secret(secret.as_bytes()).unwrap(),
    };
    let mut header = Header::new(alg);
    header.kid = Some(kid.into());
    jsonwebtoken::encode(&header, claims, &key).unwrap()
}

/// The welcome, or the refusal's status and message.
async fn handshake(b: &Broker, token: &str) -> Result<Value, (u16, String)> {
    match b.try_connect(token).await {
        Ok(mut c) => Ok(c.next_json().await),
        Err((status, body, _)) => Err((status, body["message"].as_str().unwrap_or("").into())),
    }
}

const NEW: &str = "the-new-hs256-secret-0123";
const OLD: &str = "the-old-hs256-secret-0123";

fn keys(list: &[(&str, &str)]) -> String {
    let mut out = "[auth]\njwt_secret = \"\"\n".to_string();
    for (kid, secret) in list {
        out += &format!("[[auth.keys]]\nkid = \"{kid}\"\nalg = \"HS256\"\nsecret = \"{secret}\"\n");
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_keys_are_accepted_during_the_overlap_and_the_old_one_after_it_is_not() {
    let b = Broker::start(&keys(&[("k-new", NEW), ("k-old", OLD)]));
    let old_token = sign(Algorithm::HS256, "k-old", &claims(), OLD);
    let new_token = sign(Algorithm::HS256, "k-new", &claims(), NEW);
    let mut held = Client::connect(&b.ws_url(), &old_token).await.unwrap();
    assert_eq!(held.next_json().await["type"], "welcome");
    assert_eq!(handshake(&b, &new_token).await.unwrap()["type"], "welcome");
    // Dev tokens (and the test helper's) are signed with the first key.
    let minted = b.token("acme");
    assert_eq!(
        jsonwebtoken::decode_header(&minted).unwrap().kid.as_deref(),
        Some("k-new")
    );
    let (status, message) = handshake(&b, &sign(Algorithm::HS256, "k-gone", &claims(), OLD))
        .await
        .unwrap_err();
    assert_eq!(status, 401);
    assert!(message.contains("k-gone"), "{message}");

    // The overlap ends: a reload keeps only the new key.
    b.node
        .reload(config(&keys(&[("k-new", NEW)])))
        .expect("the reload applies");
    let (status, _) = handshake(&b, &old_token).await.unwrap_err();
    assert_eq!(status, 401);
    assert_eq!(handshake(&b, &new_token).await.unwrap()["type"], "welcome");
    // A socket opened with the old key keeps going until its token's exp.
    let answer = held.call(json!({"type":"budget"}), 1).await;
    assert_eq!(answer["type"], "budget");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rs256_and_es256_tokens_verify_with_pem_and_jwks_keys() {
    let b = Broker::start(&format!(
        "[auth]\njwt_secret = \"\"\njwks_file = {:?}\n\
         [[auth.keys]]\nkid = \"pem-ec\"\nalg = \"ES256\"\npublic_key_file = {:?}\n",
        fixture("jwks.json"),
        fixture("es256-public.pem"),
    ));
    for (alg, kid, key) in [
        (Algorithm::RS256, "idp-rsa", "rs256"),
        (Algorithm::ES256, "idp-ec", "es256"),
        (Algorithm::ES256, "pem-ec", "es256"),
    ] {
        let welcome = handshake(&b, &sign(alg, kid, &claims(), key)).await;
        assert_eq!(welcome.unwrap()["account"], "acme", "{kid}");
    }
    // The RSA public key as an HMAC secret (algorithm confusion): refused.
    let pem = std::fs::read_to_string(fixture("rs256-public.pem")).unwrap();
    let (status, message) = handshake(&b, &sign(Algorithm::HS256, "idp-rsa", &claims(), &pem))
        .await
        .unwrap_err();
    assert_eq!(status, 401);
    assert!(message.contains("algorithm"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jwks_file_is_read_again_on_sighup() {
    let dir = TempDir::new("jwks");
    let jwks = dir.path("jwks.json");
    // At first the provider publishes only its EC key.
    let full: Value =
        serde_json::from_slice(&std::fs::read(fixture("jwks.json")).unwrap()).unwrap();
    let only_ec = json!({"keys": [full["keys"][1].clone()]});
    std::fs::write(&jwks, only_ec.to_string()).unwrap();
    let config = crate::process::shipped(&[
        (
            "jwt_secret = \"tidegate-sample-secret-do-not-use-in-production\"",
            "jwt_secret = \"\"",
        ),
        ("jwks_file = \"\"", &format!("jwks_file = {jwks:?}")),
    ]);
    let p = crate::process::Proc::start(&config).await;
    let rsa_token = sign(Algorithm::RS256, "idp-rsa", &claims(), "rs256");
    let refused = crate::common::refusal(Client::connect(&p.ws(), &rsa_token).await);
    assert_eq!(refused.err().map(|r| r.0), Some(401));
    // The provider rotates in its RSA key; SIGHUP reads the file again.
    std::fs::write(&jwks, full.to_string()).unwrap();
    p.signal("-HUP");
    let deadline = Instant::now() + PATIENCE;
    loop {
        match Client::connect(&p.ws(), &rsa_token).await {
            Ok(mut c) => {
                assert_eq!(c.next_json().await["type"], "welcome");
                break;
            }
            Err(_) => {
                assert!(Instant::now() < deadline, "the rotated JWKS was never read");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

#[tokio::test]
async fn issuer_and_audience_are_enforced_at_the_handshake() {
    let secret = "issuer-audience-secret-0123";
    let b = Broker::start(&format!(
        "[auth]\njwt_secret = \"{secret}\"\nissuer = \"https://idp.example\"\naudience = [\"tidegate\"]\n"
    ));
    // The usual claims with `extra`'s fields on top.
    let token = |extra: Value| {
        let Value::Object(extra) = extra else {
            unreachable!()
        };
        let mut all = claims();
        for (k, v) in extra {
            all[k] = v;
        }
        sign(Algorithm::HS256, "any", &all, secret)
    };
    let ok = handshake(
        &b,
        &token(json!({"iss": "https://idp.example", "aud": "tidegate"})),
    )
    .await;
    assert_eq!(ok.unwrap()["type"], "welcome");
    for (bad, word) in [
        (
            json!({"iss": "https://evil.example", "aud": "tidegate"}),
            "issuer",
        ),
        (json!({"aud": "tidegate"}), "issuer"),
        (
            json!({"iss": "https://idp.example", "aud": "billing"}),
            "audience",
        ),
        (
            json!({"iss": "https://idp.example", "nbf": unix_now() + 3600, "aud": "tidegate"}),
            "not valid yet",
        ),
    ] {
        let (status, message) = handshake(&b, &token(bad.clone())).await.unwrap_err();
        assert_eq!(status, 401, "{bad}");
        assert!(message.contains(word), "{bad}: {message}");
    }
}

/// `X-RateLimit-Remaining` after one publish with the sample key.
async fn remaining(b: &Broker) -> u64 {
    let resp = b.publish_http("doc:1", json!(1)).await;
    assert_eq!(resp.status(), 200);
    resp.headers()["x-ratelimit-remaining"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotating_the_jwt_secret_keeps_every_api_keys_bucket() {
    // A key bucket that does not refill during the test.
    let plan = "[plans.free]\naccount_messages_per_sec = 0.001\naccount_burst = 10\naccount_sample_every = 5\n";
    let b = Broker::start(&format!("{plan}[auth]\njwt_secret = \"{OLD}\"\n"));
    for expected in (5..10).rev() {
        assert_eq!(remaining(&b).await, expected);
    }
    b.node
        .reload(config(&format!("{plan}[auth]\njwt_secret = \"{NEW}\"\n")))
        .expect("the reload applies");
    assert_eq!(
        remaining(&b).await,
        4,
        "the bucket was not renamed (and refilled) by the new JWT secret"
    );
}
