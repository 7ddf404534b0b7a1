//! The HTTP API's request signature (Pusher's "HTTP API reference"):
//! `auth_signature` = hex HMAC-SHA256(secret, "METHOD\npath\nquery"), the
//! query being every parameter but `auth_signature`, keys lowercased,
//! sorted, `key=value` joined with `&`; `auth_timestamp` within 600 s;
//! `auth_version` 1.0; `body_md5` the body's MD5 when it has one.

use super::{md5, sign};

/// How far `auth_timestamp` may be from now.
pub const MAX_SKEW_SECS: u64 = 600;

/// A request as the signature covers it.
pub struct Request<'a> {
    pub method: &'a str,
    pub path: &'a str,
    /// The raw query string.
    pub query: &'a str,
    pub body: &'a [u8],
    pub now_secs: u64,
}

/// Why a request's signature was refused (the 401's message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unsigned {
    #[error("missing {0}")]
    Missing(&'static str),
    #[error("unknown auth_key")]
    UnknownKey,
    #[error("auth_version must be 1.0")]
    Version,
    #[error(
        "auth_timestamp is more than {MAX_SKEW_SECS} s from the server's time (or not a number)"
    )]
    Stale,
    #[error("body_md5 does not match the body")]
    BodyMd5,
    #[error("Invalid signature: you should have sent HmacSHA256Hex({0:?}, your_secret_key)")]
    Signature(String),
}

/// `%XX` and `+` decoded (a library may escape what Pusher's node library
/// sends raw).
fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() && s.is_char_boundary(i + 3) => {
                match u8::from_str_radix(&s[i + 1..i + 3], 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Checks `r` signed by the app (`key`, `secret`).
pub fn verify(key: &str, secret: &[u8], r: &Request<'_>) -> Result<(), Unsigned> {
    let mut params: Vec<(String, String)> = r
        .query
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (decode(k).to_ascii_lowercase(), decode(v))
        })
        .collect();
    let get = |name: &'static str| {
        params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .ok_or(Unsigned::Missing(name))
    };
    let signature = get("auth_signature")?;
    if get("auth_key")? != key {
        return Err(Unsigned::UnknownKey);
    }
    if get("auth_version")? != "1.0" {
        return Err(Unsigned::Version);
    }
    let ts: u64 = get("auth_timestamp")?
        .parse()
        .map_err(|_| Unsigned::Stale)?;
    if ts.abs_diff(r.now_secs) > MAX_SKEW_SECS {
        return Err(Unsigned::Stale);
    }
    if !r.body.is_empty() && get("body_md5")? != md5::hex(r.body) {
        return Err(Unsigned::BodyMd5);
    }
    params.retain(|(k, _)| k != "auth_signature");
    params.sort();
    let query: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let text = format!("{}\n{}\n{}", r.method, r.path, query.join("&"));
    let expected = sign::hmac_hex(secret, text.as_bytes());
    if sign::equal(signature.as_bytes(), expected.as_bytes()) {
        Ok(())
    } else {
        Err(Unsigned::Signature(text))
    }
}

/// The signed query string a client sends for `method path` with `params`
/// and `body` at `timestamp`: what the `pusher` library builds (tests and
/// tools use it).
pub fn signed_query(
    key: &str,
    secret: &[u8],
    (method, path): (&str, &str),
    params: &[(&str, &str)],
    body: &[u8],
    timestamp: u64,
) -> String {
    let ts = timestamp.to_string();
    let md5 = md5::hex(body);
    let mut all: Vec<(&str, &str)> = vec![
        ("auth_key", key),
        ("auth_timestamp", &ts),
        ("auth_version", "1.0"),
    ];
    if !body.is_empty() {
        all.push(("body_md5", &md5));
    }
    all.extend_from_slice(params);
    all.sort();
    let query: Vec<String> = all.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let query = query.join("&");
    let signature = sign::hmac_hex(secret, format!("{method}\n{path}\n{query}").as_bytes());
    format!("{query}&auth_signature={signature}")
}

#[cfg(test)]
mod tests {
    use super::*;

    // Pusher's "HTTP API reference" worked example.
    const KEY: &str = "278d425bdf160c739803";
    const SECRET: &[u8] = b"7ad3773142a6692b25b8";
    const BODY: &[u8] = br#"{"name":"foo","channels":["project-3"],"data":"{\"some\":\"data\"}"}"#;

    fn request(query: &str, now: u64) -> Request<'_> {
        Request {
            method: "POST",
            path: "/apps/3/events",
            query,
            body: BODY,
            now_secs: now,
        }
    }

    #[test]
    fn a_signed_query_verifies() {
        let q = signed_query(
            KEY,
            SECRET,
            ("POST", "/apps/3/events"),
            &[],
            BODY,
            1353088179,
        );
        assert_eq!(verify(KEY, SECRET, &request(&q, 1353088179)), Ok(()));
        assert!(q.contains(
            "auth_signature=da454824c97ba181a32ccc17a72625ba02771f50b50e1e7430e47a1f3f457e6c"
        ));
    }

    #[test]
    fn pushers_worked_example_verifies() {
        assert_eq!(md5::hex(BODY), "ec365a775a4cd0599faeb73354201b6f");
        let q = "auth_key=278d425bdf160c739803&auth_timestamp=1353088179&auth_version=1.0&body_md5=ec365a775a4cd0599faeb73354201b6f&auth_signature=da454824c97ba181a32ccc17a72625ba02771f50b50e1e7430e47a1f3f457e6c";
        assert_eq!(verify(KEY, SECRET, &request(q, 1353088179)), Ok(()));
        assert_eq!(
            verify(KEY, SECRET, &request(q, 1353088179 + 601)),
            Err(Unsigned::Stale)
        );
        assert_eq!(
            verify("other", SECRET, &request(q, 1353088179)),
            Err(Unsigned::UnknownKey)
        );
        let tampered = q.replace("1.0&", "1.0&x=1&");
        assert!(matches!(
            verify(KEY, SECRET, &request(&tampered, 1353088179)),
            Err(Unsigned::Signature(_))
        ));
        let no_sig = q.split("&auth_signature").next().unwrap();
        assert_eq!(
            verify(KEY, SECRET, &request(no_sig, 1353088179)),
            Err(Unsigned::Missing("auth_signature"))
        );
    }
}
