//! Entry points for the fuzz targets (`fuzz/`, run with `cargo fuzz`) and
//! for their bounded runs on stable in the test suite: each takes
//! untrusted bytes exactly as the broker receives them and runs them
//! through the same code the broker does. None may panic or hang; each
//! also checks what must hold of a successful parse.
//!
//! Nothing here grants anything the broker's own API does not: the
//! functions take bytes and return what the parsers said.

use crate::auth::Authenticator;
use crate::config::{Config, Limits};
use crate::protocol::{ClientFrame, channel, frames, json};
use crate::socket::inbound::{InFrame, WsDecoder};

/// The secret the token targets sign and verify with.
pub const SECRET: &str = "fuzzing-secret";

/// One WebSocket text message, as the socket parses it (the free plan's
/// nesting limit). Returns whether it parsed.
pub fn client_frame(data: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(data) else {
        return false;
    };
    let limits = Limits::default();
    let Ok(frame) = frames::parse(text, limits.max_json_depth) else {
        return false;
    };
    assert!(
        !json::depth_exceeds(text.as_bytes(), limits.max_json_depth),
        "a frame deeper than the limit parsed"
    );
    if let Some(id) = frame.id() {
        assert!(
            id.get().len() <= frames::MAX_ID_LEN,
            "an oversized id parsed"
        );
    }
    let _ = frame.op();
    match &frame {
        ClientFrame::Subscribe { channel: c, .. } | ClientFrame::Unsubscribe { channel: c, .. } => {
            // Subscriptions may name globs; both checks must answer.
            let _ = channel::validate(c);
            let _ = channel::namespace(c);
        }
        ClientFrame::Publish {
            channel: c, data, ..
        } => {
            assert!(channel::validate(c).is_ok(), "a publish to {c:?} parsed");
            serde_json::from_str::<serde::de::IgnoredAny>(data.get()).expect("data is JSON");
        }
        ClientFrame::Budget { .. } => {}
    }
    true
}

/// Bytes off a client's TCP stream after the upgrade: the first byte
/// picks how they are cut into reads, the rest go through the broker's
/// WebSocket decoder and fragment reassembly under a small payload limit.
/// Returns how many messages came out.
pub fn websocket(data: &[u8]) -> usize {
    const MAX: usize = 4096;
    let Some((&cut, rest)) = data.split_first() else {
        return 0;
    };
    let step = usize::from(cut % 64) + 1;
    let mut decoder = WsDecoder::default();
    let mut messages = 0;
    for chunk in rest.chunks(step) {
        decoder.feed(chunk);
        loop {
            match decoder.decode(MAX) {
                Ok(Some(frame)) => {
                    messages += 1;
                    match frame {
                        InFrame::Text(t) => {
                            assert!(t.len() <= MAX, "a {} byte message passed", t.len());
                            client_frame(&t);
                        }
                        InFrame::Binary(n) => assert!(n <= MAX),
                        InFrame::Ping(_) | InFrame::Pong | InFrame::Close(_) => {}
                    }
                }
                Ok(None) => break,
                // The socket closes on the first error.
                Err(_) => return messages,
            }
        }
    }
    messages
}

/// A bearer token as a client sends it. Returns whether it verified.
pub fn token(data: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(data) else {
        return false;
    };
    let auth = Authenticator::new(SECRET, 0).expect("a fixed secret");
    auth.verify(text).is_ok()
}

/// JSON as a token's claims, correctly signed: the claims and the channel
/// globs in them are what is under test. Returns whether it verified.
pub fn claims(data: &[u8]) -> bool {
    use jsonwebtoken::{Algorithm, EncodingKey, Header};
    let Ok(raw) = serde_json::from_slice::<&serde_json::value::RawValue>(data) else {
        return false;
    };
    let key = EncodingKey::from_secret(SECRET.as_bytes()).expect("a fixed secret");
    let Ok(token) = jsonwebtoken::encode(&Header::new(Algorithm::HS256), &raw, &key) else {
        return false;
    };
    let auth = Authenticator::new(SECRET, 0).expect("a fixed secret");
    match auth.verify(&token) {
        Ok(claims) => {
            assert!(!claims.sub.is_empty(), "a token with an empty sub verified");
            let grants = claims.grants();
            for c in claims.sub_channels.iter().chain(&claims.pub_channels) {
                let _ = grants.subscribe.matches(c);
                let _ = grants.publish.matches(c);
            }
            true
        }
        Err(_) => false,
    }
}

/// `POST /v1/publish` (or, when the first byte is odd, the batch endpoint)
/// body, through every check that needs no node. Returns how many messages
/// passed.
pub fn http_body(data: &[u8]) -> usize {
    let Some((&which, body)) = data.split_first() else {
        return 0;
    };
    crate::http::publish::check_body(body, which % 2 == 1, &Limits::default()).unwrap_or(0)
}

/// A `config.toml`, through what `tidegate check-config` runs. Returns
/// whether it was valid; every problem must render.
pub fn config(data: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(data) else {
        return false;
    };
    match Config::from_toml(text, &|_| None) {
        Ok(config) => {
            // A valid config answers the lookups the broker makes.
            let _ = config.account_limits("acme");
            true
        }
        Err(e) => {
            assert!(!e.problems.is_empty(), "refused without a problem");
            for p in &e.problems {
                let _ = p.to_string();
            }
            false
        }
    }
}
