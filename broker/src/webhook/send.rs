//! One HTTP attempt and what the answer means for the endpoint (§9).
//!
//! Redirects are never followed (a 3xx is a failure: following one could
//! send signed events to a host nobody configured). https receivers are
//! verified with the system's roots or the endpoint's `ca_file`, over
//! rustls with the process's provider (`tls.rs`). The answer's body is
//! read up to [`BODY_LIMIT`] and then dropped with its connection, so a
//! receiver answering with 50 MB costs 64 KiB, not 50 MB of memory.

use std::time::{Duration, SystemTime};

use reqwest::StatusCode;
use reqwest::header::{CONTENT_TYPE, HeaderMap, RETRY_AFTER};

use super::event::Event;
use super::sign::{pusher_signature, signature};
use crate::config::WebhookEndpoint;

/// How much of an answer's body is read before it is dropped.
pub const BODY_LIMIT: usize = 64 * 1024;

/// The longest pause a `Retry-After` may impose; longer values are capped
/// (a typo on the receiver's side should not silence it for a week).
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// What one attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// 2xx.
    Delivered(u16),
    /// 429 or 503 with a valid `Retry-After`: pause the endpoint this long.
    Pause(Duration, u16),
    /// Worth retrying after a backoff: 5xx, 408, 3xx, 429/503 without a
    /// valid `Retry-After`, timeouts and connection errors.
    Retry(String),
    /// Any other 4xx: this event will never be accepted.
    Rejected(u16),
    /// 410: the receiver is gone; the endpoint is disabled until its
    /// config changes.
    Gone,
}

/// The HTTP client of one endpoint: its own connection pool, no
/// redirects; for https, only `ca_pem`'s roots when given.
pub fn client(timeout: Duration, ca_pem: Option<&[u8]>) -> reqwest::Client {
    crate::tls::provider();
    let mut builder = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(timeout)
        .user_agent(concat!("tidegate-webhooks/", env!("CARGO_PKG_VERSION")));
    if let Some(pem) = ca_pem {
        // The config checked that the bundle parses.
        builder =
            builder.tls_certs_only(reqwest::Certificate::from_pem_bundle(pem).unwrap_or_default());
    }
    builder
        .build()
        // Only TLS setup can fail: the provider is installed above and the
        // roots were checked by the config.
        .expect("the webhook client builds")
}

/// A receiver's URL as logs may show it: no user, password, query or
/// fragment (they can carry credentials), only where requests go.
pub fn redacted(url: &reqwest::Url) -> String {
    let mut shown = url.clone();
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown.set_query(None);
    shown.set_fragment(None);
    shown.to_string()
}

pub fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Posts `event` to `endpoint` once.
pub async fn attempt(
    client: &reqwest::Client,
    endpoint: &WebhookEndpoint,
    event: &Event,
) -> Outcome {
    let ts = unix_secs();
    let request = client
        .post(endpoint.url.clone())
        .timeout(endpoint.pacing.timeout)
        .header(CONTENT_TYPE, "application/json");
    let request = match &endpoint.pusher {
        // Pusher's scheme: the app's key, and the body signed with its
        // secret (the endpoint's one secret).
        Some(app) => request.header("X-Pusher-Key", &app.key).header(
            "X-Pusher-Signature",
            pusher_signature(
                endpoint.secrets.first().map_or(&[][..], Vec::as_slice),
                &event.body,
            ),
        ),
        None => request
            .header("webhook-id", &*event.id)
            .header("webhook-timestamp", ts)
            .header(
                "webhook-signature",
                signature(&endpoint.secrets, &event.id, ts, &event.body),
            ),
    }
    .body(event.body.clone());
    let mut response = match request.send().await {
        Ok(r) => r,
        Err(e) => return Outcome::Retry(describe(&e)),
    };
    let status = response.status();
    let outcome = classify(status, response.headers(), SystemTime::now());
    // Read a bounded prefix so a small answer lets the connection be
    // reused; past the limit the response (and its connection) is dropped.
    let mut read = 0usize;
    while read < BODY_LIMIT {
        match response.chunk().await {
            Ok(Some(chunk)) => read += chunk.len(),
            Ok(None) => break,
            // The status is what counts; a body cut short does not undo
            // a 2xx the receiver already sent.
            Err(_) => break,
        }
    }
    outcome
}

fn describe(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        "timeout".into()
    } else if e.is_connect() {
        format!("connect: {}", root_cause(e))
    } else {
        format!("request: {}", root_cause(e))
    }
}

fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

/// What a status (and its `Retry-After`) means, per §9.
pub fn classify(status: StatusCode, headers: &HeaderMap, now: SystemTime) -> Outcome {
    let code = status.as_u16();
    if status.is_success() {
        return Outcome::Delivered(code);
    }
    match code {
        429 | 503 => match headers
            .get(RETRY_AFTER)
            .map(|v| retry_after(v.to_str().ok(), now))
        {
            Some(Some(wait)) => Outcome::Pause(wait, code),
            Some(None) => Outcome::Retry(format!("{code} with a malformed Retry-After")),
            None => Outcome::Retry(format!("{code} without Retry-After")),
        },
        410 => Outcome::Gone,
        408 => Outcome::Retry("408".into()),
        300..=399 => Outcome::Retry(format!("{code} redirect (not followed)")),
        400..=499 => Outcome::Rejected(code),
        _ => Outcome::Retry(code.to_string()),
    }
}

/// `Retry-After` as delta-seconds or an HTTP date; `None` if malformed.
pub fn retry_after(value: Option<&str>, now: SystemTime) -> Option<Duration> {
    let value = value?.trim();
    let wait = if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        Duration::from_secs(value.parse::<u64>().unwrap_or(u64::MAX))
    } else {
        let at = httpdate::parse_http_date(value).ok()?;
        at.duration_since(now).unwrap_or(Duration::ZERO)
    };
    Some(wait.min(MAX_RETRY_AFTER))
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn with_retry_after(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(RETRY_AFTER, HeaderValue::from_str(v).unwrap());
        h
    }

    #[test]
    fn urls_lose_their_credentials_in_logs() {
        let url =
            reqwest::Url::parse("https://hook:s3cret@backend.example:8443/in?token=abc#x").unwrap();
        assert_eq!(redacted(&url), "https://backend.example:8443/in");
        let plain = reqwest::Url::parse("http://127.0.0.1:9000/tidegate-events").unwrap();
        assert_eq!(redacted(&plain), "http://127.0.0.1:9000/tidegate-events");
    }

    #[test]
    fn statuses_map_to_the_contract() {
        let now = SystemTime::now();
        let none = HeaderMap::new();
        let c = |s: u16, h: &HeaderMap| classify(StatusCode::from_u16(s).unwrap(), h, now);
        assert_eq!(c(204, &none), Outcome::Delivered(204));
        assert_eq!(
            c(429, &with_retry_after("2")),
            Outcome::Pause(Duration::from_secs(2), 429)
        );
        assert!(matches!(
            c(503, &with_retry_after("soon")),
            Outcome::Retry(_)
        ));
        assert!(matches!(c(429, &none), Outcome::Retry(_)));
        assert!(matches!(c(500, &none), Outcome::Retry(_)));
        assert!(matches!(c(408, &none), Outcome::Retry(_)));
        assert!(matches!(c(302, &none), Outcome::Retry(_)));
        assert_eq!(c(410, &none), Outcome::Gone);
        assert_eq!(c(404, &none), Outcome::Rejected(404));
    }

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(retry_after(Some(" 5 "), now), Some(Duration::from_secs(5)));
        let later = httpdate::fmt_http_date(now + Duration::from_secs(30));
        assert_eq!(
            retry_after(Some(&later), now),
            Some(Duration::from_secs(30))
        );
        let past = httpdate::fmt_http_date(now - Duration::from_secs(30));
        assert_eq!(retry_after(Some(&past), now), Some(Duration::ZERO));
        assert_eq!(retry_after(Some("-1"), now), None);
        assert_eq!(retry_after(Some("1.5"), now), None);
        assert_eq!(retry_after(Some(""), now), None);
        assert_eq!(retry_after(None, now), None);
        assert_eq!(retry_after(Some("99999999999"), now), Some(MAX_RETRY_AFTER));
    }
}
