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
/// node's number (from its id) and the connection's.
pub fn socket_id(node_id: &str, conn: u64) -> String {
    format!("{}.{conn}", node_number(node_id))
}

/// A number for a node id (FNV-1a, 32 bits): node ids are unique in a
/// cluster, and so, but for a hash collision, are these.
fn node_number(node_id: &str) -> u32 {
    node_id.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
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
}
