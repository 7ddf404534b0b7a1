//! A window's joins and leaves told per user (Pusher's presence, §16):
//! a user is added when its first connection comes and removed when its
//! last goes, so a second tab, or a tab that left and came back inside
//! one window, is no news at all.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::Roster;
use crate::protocol::presence::Member;

/// One window's news per user, each list sorted by user, and the
/// channel's members as the window closes. Bounded by the window's joins
/// and leaves: at most one entry per user touched.
pub struct UserChanges<'a> {
    /// A connection of each user who came (with its info).
    pub added: Vec<Member>,
    /// A connection of each user who went.
    pub removed: Vec<Member>,
    roster: &'a Roster,
}

impl<'a> UserChanges<'a> {
    /// Whether `user` is in the channel now.
    pub fn present(&self, user: &str) -> bool {
        self.roster.members.contains_key(user)
    }

    /// `user`'s first connection in the channel now, with its info.
    pub fn member(&self, user: &str) -> Option<Member> {
        let (user, conns) = self.roster.members.get_key_value(user)?;
        let (conn, info) = conns.iter().next()?;
        Some(Member {
            user: user.clone(),
            conn_id: conn.clone(),
            info: info.clone(),
        })
    }

    /// `roster` as the window closes, and the window's joins and leaves
    /// (net per connection): a user's connections before the window are
    /// those now, less its joins, plus its leaves.
    pub(crate) fn of(roster: &'a Roster, joins: &[Member], leaves: &[Member]) -> UserChanges<'a> {
        // user → (joins, leaves, a member to name it by)
        let mut touched: BTreeMap<&Arc<str>, (u64, u64, &Member)> = BTreeMap::new();
        for m in joins {
            touched.entry(&m.user).or_insert((0, 0, m)).0 += 1;
        }
        for m in leaves {
            touched.entry(&m.user).or_insert((0, 0, m)).1 += 1;
        }
        let mut out = UserChanges {
            added: Vec::new(),
            removed: Vec::new(),
            roster,
        };
        for (user, (joined, left, some)) in touched {
            let now = roster.members.get(user).map_or(0, |c| c.len() as u64);
            let before = (now + left).saturating_sub(joined);
            match (before, now) {
                (0, n) if n > 0 => {
                    // Named by a connection still in, for its info.
                    let named = out.member(user);
                    out.added.push(named.unwrap_or_else(|| some.clone()));
                }
                (b, 0) if b > 0 => out.removed.push(some.clone()),
                _ => {}
            }
        }
        out
    }

    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::presence::Window;

    fn m(user: &str, conn: &str) -> Member {
        Member {
            user: user.into(),
            conn_id: conn.into(),
            info: Some(format!("{{\"name\":\"{user}\"}}").into()),
        }
    }

    /// Applies `ops` (true: join) to the roster and a window, and tells
    /// the window per user.
    fn run(roster: &mut Roster, ops: &[(bool, Member)]) -> (Vec<String>, Vec<String>) {
        let mut w = Window::default();
        for (join, member) in ops {
            if *join {
                assert!(roster.insert(member));
                w.join(member.clone());
            } else {
                assert!(roster.remove(&member.user, &member.conn_id).is_some());
                w.leave(member.clone());
            }
        }
        let (joins, leaves) = w.take();
        let c = UserChanges::of(roster, &joins, &leaves);
        let users = |v: &[Member]| v.iter().map(|m| m.user.to_string()).collect();
        (users(&c.added), users(&c.removed))
    }

    #[test]
    fn a_user_is_one_member_however_many_tabs() {
        let mut r = Roster::default();
        // ann opens two tabs: added once.
        let got = run(&mut r, &[(true, m("ann", "1.1")), (true, m("ann", "1.2"))]);
        assert_eq!(got, (vec!["ann".to_owned()], vec![]));
        // One tab closes: no news; the last closes: removed once.
        assert_eq!(run(&mut r, &[(false, m("ann", "1.1"))]), (vec![], vec![]));
        let got = run(&mut r, &[(false, m("ann", "1.2"))]);
        assert_eq!(got, (vec![], vec!["ann".to_owned()]));
    }

    #[test]
    fn a_join_and_a_leave_of_one_user_in_a_window_cancel() {
        let mut r = Roster::default();
        run(&mut r, &[(true, m("bob", "1.1"))]);
        // bob's tab reloads (a new connection, the old one gone) and cid
        // comes and goes: nobody is told anything.
        let got = run(
            &mut r,
            &[
                (true, m("bob", "1.2")),
                (false, m("bob", "1.1")),
                (true, m("cid", "1.3")),
                (false, m("cid", "1.3")),
            ],
        );
        assert_eq!(got, (vec![], vec![]));
        // bob leaves and another bob connection comes: still no news.
        let got = run(&mut r, &[(false, m("bob", "1.2")), (true, m("bob", "1.4"))]);
        assert_eq!(got, (vec![], vec![]));
    }

    #[test]
    fn added_carries_the_info_of_a_connection_still_in() {
        let mut r = Roster::default();
        let mut w = Window::default();
        let a = m("ann", "1.1");
        r.insert(&a);
        w.join(a);
        let (joins, leaves) = w.take();
        let c = UserChanges::of(&r, &joins, &leaves);
        assert_eq!(c.added[0].info.as_deref(), Some("{\"name\":\"ann\"}"));
        assert!(c.removed.is_empty());
    }
}
