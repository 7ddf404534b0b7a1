//! The members of one channel as a node knows them, sorted the way reads
//! answer.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::protocol::presence::{Counts, Member};

/// One user's connections in a channel: connection id → `info`.
pub(crate) type Conns = BTreeMap<Arc<str>, Option<Arc<str>>>;

/// The members of one channel as this node knows them.
#[derive(Default)]
pub(crate) struct Roster {
    /// user → connection id → info; sorted the way reads answer. Bounded
    /// by the channel's `max_members` (enforced cluster-wide at join).
    pub(crate) members: BTreeMap<Arc<str>, Conns>,
    pub(crate) connections: u64,
}

impl Roster {
    /// Adds a member; false if it was there already.
    pub(crate) fn insert(&mut self, m: &Member) -> bool {
        let conns = self.members.entry(m.user.clone()).or_default();
        let new = conns.insert(m.conn_id.clone(), m.info.clone()).is_none();
        self.connections += u64::from(new);
        new
    }

    pub(crate) fn remove(&mut self, user: &str, conn: &str) -> Option<Member> {
        let conns = self.members.get_mut(user)?;
        let info = conns.remove(conn)?;
        let user = self.members.get_key_value(user).map(|(k, _)| k.clone())?;
        if self.members[&user].is_empty() {
            self.members.remove(&user);
        }
        self.connections -= 1;
        Some(Member {
            user,
            conn_id: conn.into(),
            info,
        })
    }

    pub(crate) fn contains(&self, user: &str, conn: &str) -> bool {
        self.members.get(user).is_some_and(|c| c.contains_key(conn))
    }

    /// Gives a listed member its info (it was listed without one).
    pub(crate) fn set_info(&mut self, m: &Member) {
        if let Some(info) = self
            .members
            .get_mut(&m.user)
            .and_then(|c| c.get_mut(&m.conn_id))
        {
            *info = m.info.clone();
        }
    }

    pub(crate) fn counts(&self) -> Counts {
        Counts {
            users: self.members.len() as u64,
            connections: self.connections,
        }
    }

    pub(crate) fn list(&self, limit: usize) -> Vec<Member> {
        self.iter().take(limit).collect()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = Member> + '_ {
        self.members.iter().flat_map(|(user, conns)| {
            conns.iter().map(|(conn, info)| Member {
                user: user.clone(),
                conn_id: conn.clone(),
                info: info.clone(),
            })
        })
    }
}
