//! One channel's diff window (§13): the joins and leaves since the window
//! opened, net of each other, so a member that joined and left inside one
//! window appears in neither list.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::protocol::presence::Member;

/// A member's identity inside a window: its connection id.
type Key = Arc<str>;

/// The joins and leaves of one open window. Bounded by the channel's
/// members: each connection is in at most one of the two maps.
#[derive(Debug, Default)]
pub struct Window {
    joins: BTreeMap<Key, Member>,
    leaves: BTreeMap<Key, Member>,
}

impl Window {
    pub fn join(&mut self, m: Member) {
        // Left and came back inside the window: nothing changed.
        if self.leaves.remove(&m.conn_id).is_none() {
            self.joins.insert(m.conn_id.clone(), m);
        }
    }

    pub fn leave(&mut self, m: Member) {
        // Joined and left inside the window: neither is sent.
        if self.joins.remove(&m.conn_id).is_none() {
            self.leaves.insert(m.conn_id.clone(), m);
        }
    }

    /// Whether `conn`'s join waits in this window (not sent yet).
    pub fn joining(&self, conn: &str) -> bool {
        self.joins.contains_key(conn)
    }

    /// The leaves waiting in this window (members still listed by
    /// everyone who has had the window's previous diffs).
    pub fn leaving(&self) -> impl Iterator<Item = &Member> {
        self.leaves.values()
    }

    /// The users this window touched (each once, sorted).
    pub fn users(&self) -> Vec<Arc<str>> {
        let mut users: Vec<Arc<str>> = self
            .joins
            .values()
            .chain(self.leaves.values())
            .map(|m| m.user.clone())
            .collect();
        users.sort();
        users.dedup();
        users
    }

    pub fn is_empty(&self) -> bool {
        self.joins.is_empty() && self.leaves.is_empty()
    }

    /// Closes the window: its joins and leaves, each sorted by user then
    /// connection id.
    pub fn take(&mut self) -> (Vec<Member>, Vec<Member>) {
        let mut joins: Vec<Member> = std::mem::take(&mut self.joins).into_values().collect();
        let mut leaves: Vec<Member> = std::mem::take(&mut self.leaves).into_values().collect();
        joins.sort();
        leaves.sort();
        (joins, leaves)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(user: &str, conn: &str) -> Member {
        Member {
            user: user.into(),
            conn_id: conn.into(),
            info: None,
        }
    }

    #[test]
    fn joins_and_leaves_inside_one_window_cancel() {
        let mut w = Window::default();
        w.join(m("b", "n1-2"));
        w.join(m("a", "n1-1"));
        w.join(m("c", "n1-3"));
        w.leave(m("c", "n1-3"));
        w.leave(m("d", "n1-4"));
        w.join(m("d", "n1-4"));
        w.leave(m("e", "n1-5"));
        let (joins, leaves) = w.take();
        let users = |v: &[Member]| v.iter().map(|m| m.user.to_string()).collect::<Vec<_>>();
        assert_eq!(users(&joins), ["a", "b"]);
        assert_eq!(users(&leaves), ["e"]);
        assert!(w.is_empty());
    }
}
