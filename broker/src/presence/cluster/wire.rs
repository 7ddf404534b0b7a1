//! What presence keeps in Redis and tells the other nodes: a member as
//! stored, its sort key, and the join/leave event (the scripts are in
//! `scripts.rs`).

use serde::{Deserialize, Serialize};

use crate::protocol::presence::Member;

/// What one node tells the others (on the events topic, sealed with
/// `cluster.secret` like the control topic's messages).
#[derive(Serialize, Deserialize)]
pub(super) struct Event {
    /// The sending node (its own events are already applied).
    pub n: String,
    pub c: String,
    #[serde(default)]
    pub j: Vec<Wire>,
    #[serde(default)]
    pub l: Vec<Wire>,
}

/// A member as Redis and the events hold it: `[user, conn, info]`.
#[derive(Serialize, Deserialize)]
pub(super) struct Wire(String, String, Option<String>);

impl From<&Member> for Wire {
    fn from(m: &Member) -> Wire {
        Wire(
            m.user.to_string(),
            m.conn_id.to_string(),
            m.info.as_deref().map(str::to_owned),
        )
    }
}

impl From<Wire> for Member {
    fn from(w: Wire) -> Member {
        Member {
            user: w.0.into(),
            conn_id: w.1.into(),
            info: w.2.map(Into::into),
        }
    }
}

/// A member's sort key in the channel's sorted set, whose members all
/// have score 0 so that Redis orders them by their bytes: the user with
/// its bytes 0 and 1 escaped (`0` → `1 1`, `1` → `1 2`, which keeps their
/// order and leaves no 0 in it), a 0 byte, then the connection id. So
/// `ZRANGEBYLEX` answers members by user then connection id in byte
/// order (a user that is a prefix of another sorts first, as the 0 ends
/// it), which is §13's order, and reads `limit` of them without the rest.
/// The text stays UTF-8 (bytes 0-2 are ASCII); the part before the 0 is
/// the user's key in the channel's user counts.
pub(super) fn sort_key(user: &str, conn: &str) -> String {
    let mut k = String::with_capacity(user.len() + conn.len() + 1);
    for c in user.chars() {
        match c {
            '\u{0}' => k.push_str("\u{1}\u{1}"),
            '\u{1}' => k.push_str("\u{1}\u{2}"),
            c => k.push(c),
        }
    }
    k.push('\u{0}');
    k.push_str(conn);
    k
}

/// The user and connection id of a [`sort_key`]; `None` if it is not one.
pub(super) fn parse_sort_key(key: &str) -> Option<(String, String)> {
    let (escaped, conn) = key.split_once('\u{0}')?;
    let mut user = String::with_capacity(escaped.len());
    let mut chars = escaped.chars();
    while let Some(c) = chars.next() {
        match c {
            '\u{1}' => match chars.next()? {
                '\u{1}' => user.push('\u{0}'),
                '\u{2}' => user.push('\u{1}'),
                _ => return None,
            },
            c => user.push(c),
        }
    }
    Some((user, conn.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sort_keys_order_by_user_then_connection_in_byte_order() {
        let pairs = [
            ("", "n1-1"),
            ("\u{0}", "n1-1"),
            ("\u{0}a", "n1-1"),
            ("\u{1}", "n1-1"),
            ("\u{2}", "n1-1"),
            ("a", "n1-1"),
            ("a", "n1-2"),
            ("a\u{0}", "n1-0"),
            ("a\u{1}", "n1-0"),
            ("ab", "n1-0"),
            ("b", "a"),
            ("é", "n1-1"),
        ];
        // The contract's order: by user, then connection id, in bytes.
        let mut want = pairs.to_vec();
        want.sort_by(|a, b| {
            (a.0.as_bytes(), a.1.as_bytes()).cmp(&(b.0.as_bytes(), b.1.as_bytes()))
        });
        assert_eq!(want, pairs, "the list above is written in that order");
        let keys: Vec<String> = pairs.iter().map(|(u, c)| sort_key(u, c)).collect();
        let mut sorted = keys.clone();
        sorted.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
        assert_eq!(
            sorted, keys,
            "Redis's byte order of the keys is the contract's"
        );
        for (k, (u, c)) in keys.iter().zip(pairs) {
            assert!(!k[..k.find('\u{0}').unwrap()].contains('\u{0}'));
            assert_eq!(parse_sort_key(k), Some((u.to_owned(), c.to_owned())));
        }
        assert_eq!(parse_sort_key("no terminator"), None);
        assert_eq!(parse_sort_key("bad\u{1}\u{3}\u{0}c"), None);
    }
}
