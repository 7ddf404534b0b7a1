//! The control topic's messages (account breaches, operators' bans and
//! disconnects), signed by the node that sends them, so that a client of
//! the same Redis with nothing but `PUBLISH` cannot ban or disconnect
//! anyone.
//!
//! A message is `tg1:<unix ms>:<nonce>:<mac>:<body>`, where `mac` is the
//! base64url HMAC-SHA256, keyed with `cluster.secret`, of the topic and
//! everything before the mac: it binds the message to this cluster's topic
//! and to its moment. A receiver accepts it when some configured secret
//! (`secret` or one of `accept_secrets`) verifies it, its clock is within
//! [`WINDOW`] of the receiver's, and its mac was not seen before in that
//! window, so a recorded message cannot be replayed either.

use std::collections::{HashSet, VecDeque};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use parking_lot::Mutex;
use sha2::Sha256;

use crate::config::ClusterSecrets;

const VERSION: &str = "tg1";
/// How far a message's clock may be from the receiver's (nodes run NTP;
/// this is generous) and how long its mac is remembered against replays.
pub const WINDOW: Duration = Duration::from_secs(60);
/// The most macs remembered. Only correctly signed messages are
/// remembered, which only nodes can make (a few per operator action or
/// account breach), so this is far above what a window holds; past it the
/// oldest is forgotten first.
const MAX_SEEN: usize = 10_000;

/// At most one log line per this long about ignored messages (a flood of
/// forgeries must not flood the log).
const LOG_EVERY_MS: u64 = 10_000;

/// Milliseconds since the Unix epoch: the messages' clock.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Why a message on the control topic was ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forged {
    /// Not in the signed format at all.
    Unsigned,
    /// No configured secret verifies it.
    BadSignature,
    /// Its clock is outside the window.
    Stale,
    /// Its mac was seen already.
    Replayed,
}

impl Forged {
    pub const fn as_str(self) -> &'static str {
        match self {
            Forged::Unsigned => "unsigned",
            Forged::BadSignature => "bad_signature",
            Forged::Stale => "stale",
            Forged::Replayed => "replayed",
        }
    }
}

/// Signs this node's control messages and checks the others'.
pub struct ControlSigner {
    topic: String,
    secrets: ClusterSecrets,
    /// Macs accepted, with the time (unix ms) until which each is kept,
    /// oldest first (bounded by [`MAX_SEEN`]).
    seen: Mutex<Seen>,
    /// When an ignored message was last logged, and how many were ignored
    /// since.
    logged: Mutex<(u64, u64)>,
}

#[derive(Default)]
struct Seen {
    order: VecDeque<(u64, [u8; 32])>,
    macs: HashSet<[u8; 32]>,
}

fn mac(secret: &[u8], topic: &str, signed: &str) -> [u8; 32] {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes a key of any length");
    mac.update(topic.as_bytes());
    mac.update(b"\n");
    mac.update(signed.as_bytes());
    mac.finalize().into_bytes().into()
}

/// Constant-time comparison of two macs.
fn same(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

impl ControlSigner {
    pub fn new(topic: String, secrets: ClusterSecrets) -> ControlSigner {
        ControlSigner {
            topic,
            secrets,
            seen: Mutex::new(Seen::default()),
            logged: Mutex::new((0, 0)),
        }
    }

    /// An ignored message: `Some(n)` when it is time to log (with the `n`
    /// ignored since the last line, this one included), else `None`.
    pub fn log_due(&self, now_ms: u64) -> Option<u64> {
        let mut logged = self.logged.lock();
        logged.1 += 1;
        if logged.0 != 0 && now_ms.saturating_sub(logged.0) < LOG_EVERY_MS {
            return None;
        }
        let n = logged.1;
        *logged = (now_ms.max(1), 0);
        Some(n)
    }

    /// `body` ready to publish; `None` without a signing secret (the
    /// config refuses cluster mode without one, so only in tests).
    pub fn seal(&self, body: &str, now_ms: u64) -> Option<String> {
        let secret = self.secrets.sign.as_ref()?;
        let nonce: u64 = rand::random();
        let signed = format!("{VERSION}:{now_ms}:{nonce:016x}");
        let tag = URL_SAFE_NO_PAD.encode(mac(&secret.0, &self.topic, &format!("{signed}:{body}")));
        Some(format!("{signed}:{tag}:{body}"))
    }

    /// The body of a message a node signed, or why it is ignored.
    pub fn open<'a>(&self, message: &'a str, now_ms: u64) -> Result<&'a str, Forged> {
        let mut parts = message.splitn(5, ':');
        let (Some(VERSION), Some(ts), Some(nonce), Some(tag), Some(body)) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err(Forged::Unsigned);
        };
        let Ok(given) = URL_SAFE_NO_PAD.decode(tag) else {
            return Err(Forged::Unsigned);
        };
        let Ok(given) = <[u8; 32]>::try_from(given.as_slice()) else {
            return Err(Forged::Unsigned);
        };
        let signed = format!("{VERSION}:{ts}:{nonce}:{body}");
        if !self
            .secrets
            .verifying()
            .any(|s| same(&mac(s, &self.topic, &signed), &given))
        {
            return Err(Forged::BadSignature);
        }
        let ts: u64 = ts.parse().map_err(|_| Forged::Unsigned)?;
        let window = WINDOW.as_millis() as u64;
        if ts.abs_diff(now_ms) > window {
            return Err(Forged::Stale);
        }
        let mut seen = self.seen.lock();
        while let Some(&(until, old)) = seen.order.front() {
            if until >= now_ms && seen.order.len() < MAX_SEEN {
                break;
            }
            seen.order.pop_front();
            seen.macs.remove(&old);
        }
        if !seen.macs.insert(given) {
            return Err(Forged::Replayed);
        }
        // Remembered until its timestamp can no longer pass the window.
        seen.order.push_back((ts.max(now_ms) + window, given));
        Ok(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Secret;

    fn signer(sign: &str, accept: &[&str]) -> ControlSigner {
        ControlSigner::new(
            "tidegate:ctl".into(),
            ClusterSecrets {
                sign: Some(Secret(sign.as_bytes().to_vec())),
                accept: accept
                    .iter()
                    .map(|s| Secret(s.as_bytes().to_vec()))
                    .collect(),
            },
        )
    }

    const NOW: u64 = 1_800_000_000_000;

    #[test]
    fn a_sealed_message_opens_once() {
        let a = signer("secret-of-the-cluster", &[]);
        let sealed = a.seal("admin:{\"ban\":1}", NOW).unwrap();
        assert_eq!(a.open(&sealed, NOW + 5), Ok("admin:{\"ban\":1}"));
        assert_eq!(a.open(&sealed, NOW + 6), Err(Forged::Replayed));
    }

    #[test]
    fn forgeries_are_told_apart() {
        let a = signer("secret-of-the-cluster", &[]);
        assert_eq!(a.open("admin:{\"ban\":1}", NOW), Err(Forged::Unsigned));
        assert_eq!(a.open("breach:acme", NOW), Err(Forged::Unsigned));
        let other = signer("another-secret-entirely", &[]);
        let forged = other.seal("breach:acme", NOW).unwrap();
        assert_eq!(a.open(&forged, NOW), Err(Forged::BadSignature));
        // Changing the body breaks the mac.
        let sealed = a.seal("breach:acme", NOW).unwrap();
        let edited = sealed.replace("acme", "zeta");
        assert_eq!(a.open(&edited, NOW), Err(Forged::BadSignature));
        // Another cluster's topic with the same secret: not ours.
        let elsewhere = ControlSigner::new(
            "other:ctl".into(),
            ClusterSecrets {
                sign: Some(Secret(b"secret-of-the-cluster".to_vec())),
                accept: Vec::new(),
            },
        );
        let theirs = elsewhere.seal("breach:acme", NOW).unwrap();
        assert_eq!(a.open(&theirs, NOW), Err(Forged::BadSignature));
        let old = a.seal("breach:acme", NOW - 61_000).unwrap();
        assert_eq!(a.open(&old, NOW), Err(Forged::Stale));
    }

    #[test]
    fn a_rotation_accepts_both_secrets() {
        let old_node = signer("the-old-secret-0123", &[]);
        let during = signer("the-new-secret-0123", &["the-old-secret-0123"]);
        assert_eq!(
            during.open(&old_node.seal("breach:a", NOW).unwrap(), NOW),
            Ok("breach:a")
        );
        let accepting_new = signer("the-old-secret-0123", &["the-new-secret-0123"]);
        assert_eq!(
            accepting_new.open(&during.seal("breach:b", NOW).unwrap(), NOW),
            Ok("breach:b")
        );
    }

    #[test]
    fn ignored_messages_are_logged_at_most_every_ten_seconds() {
        let a = signer("secret-of-the-cluster", &[]);
        assert_eq!(a.log_due(NOW), Some(1));
        assert_eq!(a.log_due(NOW + 1), None);
        assert_eq!(a.log_due(NOW + 9_999), None);
        assert_eq!(a.log_due(NOW + 10_000), Some(3), "with the count since");
    }

    #[test]
    fn the_replay_memory_is_bounded() {
        let a = signer("secret-of-the-cluster", &[]);
        for i in 0..(MAX_SEEN + 50) {
            let m = a.seal(&format!("breach:a{i}"), NOW).unwrap();
            assert!(a.open(&m, NOW).is_ok());
        }
        assert!(a.seen.lock().order.len() <= MAX_SEEN);
        // Past the window everything is forgotten.
        let m = a.seal("breach:late", NOW + 120_000).unwrap();
        assert!(a.open(&m, NOW + 120_000).is_ok());
        assert_eq!(a.seen.lock().order.len(), 1);
    }
}
