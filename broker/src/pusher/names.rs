//! Channel names and socket ids on this wire.

use crate::protocol::channel::{PUSHER_PREFIX, is_pusher};

/// Longest Pusher channel name, in bytes.
pub const MAX_NAME: usize = 200;

/// Whether `name` is a channel a Pusher client may name: at most 200 bytes
/// of `[A-Za-z0-9_\-=@,.;]`.
pub fn valid(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-=@,.;".contains(&b))
}

/// The hub's name of an app's channel: `pusher|{app_id}|{name}`. `|` is
/// outside §2's alphabet, so no Tidegate client can name it, and the app's
/// id (no `|` in it: `config/pusher.rs`) keeps apps apart.
pub fn internal(app_id: &str, name: &str) -> String {
    format!("{PUSHER_PREFIX}{app_id}|{name}")
}

/// The Pusher name of an app's hub channel ([`internal`]'s `name`): what
/// follows the app's id (which has no `|`).
pub fn external(internal: &str) -> &str {
    internal
        .strip_prefix(PUSHER_PREFIX)
        .and_then(|rest| rest.split_once('|'))
        .map_or(internal, |(_, name)| name)
}

/// The prefix of every hub channel of an app.
pub fn app_prefix(app_id: &str) -> String {
    format!("{PUSHER_PREFIX}{app_id}|")
}

/// The reserved channel of a signed-in user's events (`sendToUser`):
/// pusher-js subscribes `#server-to-user-{id}` after `pusher:signin`.
pub const USER_CHANNEL_PREFIX: &str = "#server-to-user-";

/// The user a `#server-to-user-{id}` channel is for (outside [`valid`]'s
/// alphabet: only that user's signed-in connections may hold it).
pub fn user_of(channel: &str) -> Option<&str> {
    channel
        .strip_prefix(USER_CHANNEL_PREFIX)
        .filter(|id| !id.is_empty())
}

/// A signed-in user of an app as the broker's shared layers key it: its
/// per-identity handshake bucket, its cluster-wide connection count and an
/// operator's (`terminate_connections`) close. Beside the app's channels
/// (`|` is outside §2's alphabet and an app id has none), never an account.
pub fn user_key(app_id: &str, user_id: &str) -> String {
    format!("{PUSHER_PREFIX}{app_id}|user|{user_id}")
}

/// Whether a hub channel belongs to a Pusher app (hidden from §9's
/// webhooks).
pub fn is_internal(channel: &str) -> bool {
    is_pusher(channel)
}

/// A connection's `socket_id`, `^\d+\.\d+$`, unique cluster-wide: the
/// node's number (from its id) and the connection's (unique on the node).
pub fn socket_id(node_id: &str, conn: u64) -> String {
    format!("{}.{conn}", node_number(node_id))
}

/// The node id read as a number in bijective base 64 (each character of
/// `node.id`'s alphabet a digit from 1 to 64), written in decimal. No two
/// node ids get the same number, so, node ids being unique in a cluster,
/// neither do two nodes' `socket_id`s (a 32-bit hash of the id, used
/// before, could collide). A short id stays short: `n1` is `3202`, a
/// six-character id at most 11 digits, the longest (32) 58.
fn node_number(node_id: &str) -> String {
    // Little-endian limbs of nine decimal digits each.
    const LIMB: u64 = 1_000_000_000;
    let mut limbs: Vec<u64> = vec![0];
    for b in node_id.bytes() {
        let mut carry = digit(b);
        for limb in &mut limbs {
            let v = *limb * 64 + carry;
            *limb = v % LIMB;
            carry = v / LIMB;
        }
        if carry > 0 {
            limbs.push(carry);
        }
    }
    let mut out = String::with_capacity(limbs.len() * 9);
    let mut rest = limbs.iter().rev();
    if let Some(top) = rest.next() {
        out.push_str(&top.to_string());
    }
    for limb in rest {
        out.push_str(&format!("{limb:09}"));
    }
    out
}

/// A node id character's digit, 1 to 64 (`node.id` is checked against
/// `[A-Za-z0-9_-]` at load, so no other byte reaches here; one would
/// count as `-`).
fn digit(b: u8) -> u64 {
    1 + match b {
        b'0'..=b'9' => u64::from(b - b'0'),
        b'A'..=b'Z' => 10 + u64::from(b - b'A'),
        b'a'..=b'z' => 36 + u64::from(b - b'a'),
        b'_' => 62,
        _ => 63,
    }
}

/// Whether a channel replays its last event to a new subscriber:
/// `cache-`, and the cache kind of every other channel (Pusher's
/// `private-cache-`, `private-encrypted-cache-`, `presence-cache-`).
pub fn is_cache(name: &str) -> bool {
    [
        "cache-",
        "private-cache-",
        "private-encrypted-cache-",
        "presence-cache-",
    ]
    .iter()
    .any(|p| name.starts_with(p))
}

/// What kind of channel a name is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Public,
    Private,
    Encrypted,
    Presence,
}

pub fn kind(name: &str) -> Kind {
    if name.starts_with("private-encrypted-") {
        Kind::Encrypted
    } else if name.starts_with("private-") {
        Kind::Private
    } else if name.starts_with("presence-") {
        Kind::Presence
    } else {
        Kind::Public
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_pusher() {
        assert!(valid("private-a_b-c=d@e,f.g;h"));
        assert!(valid(&"x".repeat(200)));
        assert!(!valid(&"x".repeat(201)));
        for bad in ["", "a b", "a|b", "a:b", "#server-to-user-1", "a/b"] {
            assert!(!valid(bad), "{bad:?}");
        }
    }

    #[test]
    fn internal_names_are_outside_the_tidegate_alphabet() {
        let n = internal("1234", "chat");
        assert!(crate::protocol::channel::validate(&n).is_err());
        assert!(is_internal(&n));
        assert_ne!(internal("1", "a"), internal("2", "a"));
    }

    #[test]
    fn the_pusher_name_is_read_back_from_the_hub_name() {
        for name in ["chat", "private-a", "#server-to-user-a|b", ""] {
            assert_eq!(external(&internal("1234", name)), name);
        }
    }

    #[test]
    fn user_channels_name_their_user_and_users_are_keyed_by_app() {
        assert_eq!(user_of("#server-to-user-42"), Some("42"));
        assert_eq!(user_of("#server-to-user-"), None);
        assert_eq!(user_of("server-to-user-42"), None);
        assert_ne!(user_key("1", "a"), user_key("2", "a"));
        assert!(crate::protocol::channel::validate(&user_key("1", "a")).is_err());
    }

    #[test]
    fn cache_channels_by_prefix() {
        for yes in [
            "cache-a",
            "private-cache-a",
            "presence-cache-a",
            "private-encrypted-cache-a",
        ] {
            assert!(is_cache(yes), "{yes}");
        }
        for no in [
            "a-cache-b",
            "private-a",
            "presence-a",
            "cachex",
            "encrypted-cache-a",
        ] {
            assert!(!is_cache(no), "{no}");
        }
    }

    #[test]
    fn socket_ids_are_two_numbers() {
        let id = socket_id("n1", 42);
        let (a, b) = id.split_once('.').unwrap();
        assert!(a.bytes().all(|c| c.is_ascii_digit()) && !a.is_empty());
        assert_eq!(b, "42");
        assert_ne!(socket_id("n1", 1), socket_id("n2", 1));
    }

    #[test]
    fn node_numbers_are_distinct_for_distinct_ids() {
        // Bijective base 64: `0` is 1, `-` is 64, `00` is 65.
        assert_eq!(node_number("0"), "1");
        assert_eq!(node_number("-"), "64");
        assert_eq!(node_number("00"), "65");
        assert_eq!(node_number("n1"), ((36 + 13 + 1) * 64 + 2).to_string());
        // Ids an old 32-bit hash could not tell apart all get their own
        // number, here every id of up to two characters (4,160 of them).
        let alphabet: Vec<char> = ('0'..='9')
            .chain('A'..='Z')
            .chain('a'..='z')
            .chain(['_', '-'])
            .collect();
        let mut seen = std::collections::HashSet::new();
        for a in &alphabet {
            assert!(seen.insert(node_number(&a.to_string())));
            for b in &alphabet {
                assert!(seen.insert(node_number(&format!("{a}{b}"))));
            }
        }
        // The longest id is 58 digits, every one a digit.
        let longest = node_number(&"-".repeat(32));
        assert_eq!(longest.len(), 58);
        assert!(longest.bytes().all(|c| c.is_ascii_digit()));
        // Across limbs, against the same number in a u128.
        let mid = node_number("zzzzzzzzzzzzzzzzzzzz");
        let mut v: u128 = 0;
        for _ in 0..20 {
            v = v * 64 + 62;
        }
        assert_eq!(mid, v.to_string());
    }
}
