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
        ClientFrame::Refresh { token, .. } => assert!(!token.is_empty(), "an empty token parsed"),
        ClientFrame::Presence {
            channel: c, limit, ..
        } => {
            assert!(
                channel::validate(c).is_ok(),
                "a presence read of {c:?} parsed"
            );
            assert!(
                (1..=frames::PRESENCE_MAX_LIMIT).contains(limit),
                "a presence limit of {limit} parsed"
            );
        }
        ClientFrame::PresenceStats { channel: c, .. } => {
            assert!(
                channel::validate(c).is_ok(),
                "a presence read of {c:?} parsed"
            );
        }
        ClientFrame::Rpc { method, .. } => {
            assert!(
                !method.is_empty() && method.len() <= frames::MAX_METHOD_LEN,
                "an rpc method of {} bytes parsed",
                method.len()
            );
        }
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
    crate::http::body::check_body(body, which % 2 == 1, &Limits::default()).unwrap_or(0)
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

/// The key the gRPC target calls with: it may publish and subscribe on
/// `chat:*` only, so the permission checks answer both ways.
fn grpc_key() -> crate::charge::KeyState {
    use crate::protocol::glob::GlobSet;
    crate::charge::KeyState {
        account: "fuzz".into(),
        publish: GlobSet::new(&["chat:*"]),
        subscribe: GlobSet::new(&["chat:*"]),
        id: "fuzz".into(),
    }
}

/// A plan small enough that inputs of libFuzzer's sizes reach every
/// refusal (payload size, subscription count, cost).
fn grpc_limits() -> Limits {
    Limits {
        max_payload_bytes: 512,
        max_subscriptions: 8,
        ..Limits::default()
    }
}

/// One gRPC request message as tonic hands it to the service, after
/// gRPC's own framing: the first byte picks which (even: a
/// `PublishRequest`, as `Publish` and each message of `PublishStream`
/// take it, with `byte / 2` thousand subscribers on its channel for the
/// price; odd: a `SubscribeRequest`), the rest is decoded with prost and
/// put through the checks the service makes before it charges (JSON and
/// nesting of `data_json`, channel grammar, size, permission, price).
/// Returns the price when the request passed.
pub fn grpc_request(data: &[u8]) -> Option<u32> {
    use crate::grpc::proto::{PublishReply, PublishRequest, SubscribeRequest};
    use prost::Message;
    let (&which, body) = data.split_first()?;
    let key = grpc_key();
    let limits = grpc_limits();
    if which % 2 == 1 {
        let req = SubscribeRequest::decode(body).ok()?;
        let cost = match crate::grpc::check_subscribe(&key, &limits, &req) {
            Ok(checked) => checked.cost,
            Err((refusal, _)) => {
                assert!(!refusal.message.is_empty(), "a refusal without a sentence");
                return None;
            }
        };
        let n = req.channels.len();
        assert!((1..=limits.max_subscriptions as usize).contains(&n));
        let mut seen = std::collections::HashSet::new();
        for c in &req.channels {
            assert!(
                channel::validate(&c.channel).is_ok(),
                "{:?} passed",
                c.channel
            );
            assert!(key.subscribe.matches(&c.channel));
            assert!(
                seen.insert(&c.channel),
                "{:?} named twice passed",
                c.channel
            );
        }
        return Some(cost);
    }
    let msg = PublishRequest::decode(body).ok()?;
    let subscribers = u64::from(which / 2) * 1000;
    let priced = crate::charge::publish::check_json(&msg.data_json, limits.max_json_depth)
        .and_then(|()| {
            crate::charge::publish::price(
                &msg.channel,
                &msg.data_json,
                &key.publish,
                &limits,
                subscribers,
            )
        });
    let cost = match priced {
        Ok(cost) => cost,
        Err(refusal) => {
            assert!(!refusal.message.is_empty(), "a refusal without a sentence");
            return None;
        }
    };
    assert!(
        channel::validate(&msg.channel).is_ok(),
        "{:?} passed",
        msg.channel
    );
    assert!(key.publish.matches(&msg.channel));
    assert!(msg.data_json.len() <= limits.max_payload_bytes);
    assert!(!json::depth_exceeds(
        msg.data_json.as_bytes(),
        limits.max_json_depth
    ));
    serde_json::from_str::<serde::de::IgnoredAny>(&msg.data_json).expect("data_json is JSON");
    assert!(
        crate::admission::check_single(cost, limits.costs.max_single).is_ok(),
        "a price over the maximum passed"
    );
    // The reply echoes the id; it must survive the wire.
    let reply = PublishReply {
        id: msg.id,
        seq: 1,
        error: None,
        duplicate: false,
    };
    let back = PublishReply::decode(reply.encode_to_vec().as_slice()).expect("our own reply");
    assert_eq!(back, reply);
    Some(cost)
}

/// The clock the webhook target reads `Retry-After` dates against.
const WEBHOOK_NOW_SECS: u64 = 1_700_000_000;

/// What webhook endpoints answered, as the sender reads an answer: the
/// bytes are answers separated by an empty line, each a status line (the
/// code, optionally after `HTTP/1.1`) and then `Name: value` header lines
/// as the HTTP client hands them over (lines it would refuse are left
/// out). Each answer is classified (`webhook::send::classify`, which
/// reads `Retry-After` as seconds or an HTTP date) and fed to the
/// endpoint's health state machine one second after the previous one.
/// Returns how many answers were read.
pub fn webhook_answers(data: &[u8]) -> usize {
    use crate::webhook::health::{Health, Status};
    use crate::webhook::send::{MAX_RETRY_AFTER, Outcome, classify, retry_after};
    use reqwest::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
    use std::time::{Duration, Instant, SystemTime};

    let pacing = crate::config::Pacing {
        rate_per_sec: 1.0,
        burst: 1,
        max_in_flight: 1,
        timeout: Duration::from_secs(5),
        queue_max: 16,
        vacated_delay: Duration::ZERO,
        backoff_base: Duration::from_secs(1),
        backoff_max: Duration::from_secs(300),
        unhealthy_after: Duration::from_secs(600),
        probe_interval: Duration::from_secs(60),
    };
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(WEBHOOK_NOW_SECS);
    let start = Instant::now();
    let mut health = Health::default();
    let mut read = 0;
    for (i, answer) in data
        .split(|&b| b == b'\n')
        .collect::<Vec<_>>()
        .split(|l| l.is_empty())
        .enumerate()
    {
        let Some((status_line, header_lines)) = answer.split_first() else {
            continue;
        };
        let code = String::from_utf8_lossy(status_line);
        let code = code.trim().trim_start_matches("HTTP/1.1").trim();
        let code = code.split(' ').next().unwrap_or("");
        let Ok(status) = code.parse::<u16>().map(reqwest::StatusCode::from_u16) else {
            continue;
        };
        let Ok(status) = status else { continue };
        let mut headers = HeaderMap::new();
        for line in header_lines {
            let Some(colon) = line.iter().position(|&b| b == b':') else {
                continue;
            };
            let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(line[..colon].trim_ascii()),
                HeaderValue::from_bytes(line[colon + 1..].trim_ascii()),
            ) else {
                continue;
            };
            headers.append(name, value);
        }
        read += 1;
        let at = start + Duration::from_secs(i as u64);
        let outcome = classify(status, &headers, now);
        let asked = headers
            .get(RETRY_AFTER)
            .map(|v| retry_after(v.to_str().ok(), now));
        match outcome {
            Outcome::Delivered(c) => {
                assert!(status.is_success() && c == status.as_u16());
                health.success();
                assert_eq!(health.status(at, &pacing), Status::Healthy);
            }
            Outcome::Pause(wait, c) => {
                assert!(c == 429 || c == 503, "{c} paused");
                assert!(wait <= MAX_RETRY_AFTER, "a pause of {wait:?}");
                assert_eq!(asked, Some(Some(wait)), "the pause is the Retry-After");
                health.paused(at);
                assert_ne!(health.status(at, &pacing), Status::Healthy);
            }
            Outcome::Retry(why) => {
                assert!(!status.is_success() && !why.is_empty());
                let wait = health.failure(at, &pacing);
                assert!(wait <= pacing.backoff_max.max(pacing.probe_interval));
            }
            Outcome::Rejected(c) => {
                assert!((400..500).contains(&c) && ![408, 410, 429].contains(&c))
            }
            Outcome::Gone => assert_eq!(status.as_u16(), 410),
        }
    }
    read
}

/// A GraphQL document (`/v1/graphql`, §12), through what the server runs
/// before a charge: the size and bracket-nesting limits, the parse and the
/// price and its measures (default weights, a publish priced by its
/// data's length), then the actual cost against a response without data
/// (which must be the minimum: no operation is free). Returns the price,
/// or `None` when refused.
pub fn graphql_document(data: &[u8]) -> Option<u64> {
    use crate::graphql::{over_http, pricing};
    let text = std::str::from_utf8(data).ok()?;
    if text.len() > over_http::MAX_DOCUMENT_BYTES
        || over_http::text_nesting(text) > over_http::MAX_TEXT_NESTING
    {
        return None;
    }
    let doc = async_graphql::parser::parse_query(text).ok()?;
    let w = pricing::Weights::new(&crate::config::Costs::default());
    let vars = async_graphql::Variables::default();
    let publish = |_: &str, len: usize| 1 + len as u64 / 1024;
    let e = pricing::estimate(&doc, None, &vars, w, &publish).ok()?;
    assert!(e.cost >= pricing::MIN_COST, "no operation is free");
    assert!(
        e.fields <= w.max_fields,
        "admitted within the expanded size"
    );
    let actual = pricing::actual(&doc, None, &vars, w, &async_graphql_value::ConstValue::Null);
    assert_eq!(
        actual,
        pricing::MIN_COST,
        "nothing returned costs the minimum"
    );
    Some(e.cost)
}
