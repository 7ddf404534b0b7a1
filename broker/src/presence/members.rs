//! This node's members joining and leaving (§13). A member is one
//! subscribed connection, and it lasts exactly as long as its
//! subscription: whatever ends that (unsubscribe, close, a refresh that
//! no longer grants the channel, an operator's kick or ban, the drain)
//! calls [`Presence::leave`], which also cancels a join still waiting for
//! Redis.

use std::sync::Arc;

use parking_lot::Mutex;

use super::{ChannelState, Full, Pending, Presence, PresenceSink, RedisPresence};
use crate::config::PresenceRule;
use crate::protocol::presence::Member;

impl Presence {
    /// A subscribing connection joins `channel` (refused past
    /// `max_members`, counted cluster-wide in a cluster). `watcher` gets
    /// the channel's diffs when the namespace has `join_leave`.
    ///
    /// In a cluster the connection is registered as joining before Redis
    /// is asked, in a task that does not depend on the caller: if the
    /// caller leaves (or ends) first, the join undoes itself when Redis
    /// answers. The answer is then `Ok` and means nothing: the caller
    /// already dropped the membership.
    pub fn join(
        self: &Arc<Self>,
        channel: &str,
        rule: PresenceRule,
        member: Member,
        watcher: Arc<dyn PresenceSink>,
    ) -> Pending<Result<(), Full>> {
        let Some(redis) = self.redis.clone().filter(|r| r.is_up()) else {
            return Pending::Ready(self.with_entry(channel, rule, |state, st| {
                let r = self.add(channel, st, member, watcher, None);
                if r.is_err() {
                    self.forget_if_idle(channel, state, st);
                }
                r
            }));
        };
        let (state, others) = self.with_entry(channel, rule, |state, st| {
            st.joining.insert(member.conn_id.clone(), member.clone());
            (state.clone(), !st.local.is_empty())
        });
        let (tx, rx) = tokio::sync::oneshot::channel();
        let this = self.clone();
        let channel: Arc<str> = channel.into();
        tokio::spawn(async move {
            let before = redis.registrations();
            if rule.join_leave {
                // A view new to this node starts from Redis's members,
                // silently (they are not news to anyone here).
                this.sync(&redis, &channel, &state, true).await;
            }
            let known = redis
                .join(&channel, &member, (rule.max_members, rule.by_user), others)
                .await;
            let result = this.joined(&channel, &state, &redis, member, watcher, known);
            redis.settle(before);
            let _ = tx.send(result);
        });
        Pending::Later(Box::pin(async move { rx.await.unwrap_or(Ok(())) }))
    }

    /// Redis answered a join (`None`: it did not, then this node's view
    /// decides).
    fn joined(
        self: &Arc<Self>,
        channel: &str,
        state: &Arc<Mutex<ChannelState>>,
        redis: &Arc<RedisPresence>,
        member: Member,
        watcher: Arc<dyn PresenceSink>,
        known: Option<Result<(), Full>>,
    ) -> Result<(), Full> {
        let mut st = state.lock();
        if st.joining.remove(&member.conn_id).is_none() {
            // It left while Redis answered: undo what Redis did.
            if matches!(known, Some(Ok(()))) {
                redis.leave(channel, &member);
            }
            self.forget_if_idle(channel, state, &mut st);
            return Ok(());
        }
        let r = self.add(channel, &mut st, member, watcher, known);
        if r.is_err() {
            self.forget_if_idle(channel, state, &mut st);
        }
        r
    }

    /// Adds a member here; `known` is what Redis answered (`None`: check
    /// against this node's view).
    fn add(
        self: &Arc<Self>,
        channel: &str,
        st: &mut ChannelState,
        member: Member,
        watcher: Arc<dyn PresenceSink>,
        known: Option<Result<(), Full>>,
    ) -> Result<(), Full> {
        let max = st.rule.max_members;
        match known {
            Some(Err(full)) => return Err(full),
            Some(Ok(())) => {}
            None if st.rule.by_user
                && st.roster.members.len() >= max as usize
                && !st.roster.members.contains_key(&member.user) =>
            {
                return Err(Full { max });
            }
            None if !st.rule.by_user
                && st.roster.connections >= u64::from(max)
                && !st.roster.contains(&member.user, &member.conn_id) =>
            {
                return Err(Full { max });
            }
            None => {}
        }
        // A status channel's members are nobody's subscription: not
        // counted as members, no member webhooks (`status.rs`).
        let status = super::is_status(channel);
        if st
            .local
            .insert(member.conn_id.clone(), member.clone())
            .is_none()
            && !status
        {
            self.metrics.presence.members.inc();
            let n = st.local_users.entry(member.user.clone()).or_default();
            *n += 1;
            if *n == 1 && crate::protocol::channel::is_pusher(channel) {
                self.metrics.pusher.presence_user(channel, true);
            }
            if *n == 1
                && let Some(w) = self.webhooks.upgrade()
            {
                w.member_changed(channel, &member.user, true);
            }
        }
        if st.rule.join_leave && watcher.watches() {
            if st.rule.by_user {
                // The members as they are, under the lock: every window
                // after this one is news to it, and this one's unsent
                // users it weighs against this list.
                watcher.listed(&st.roster.list(usize::MAX), &st.window.users());
            }
            st.watchers.insert(member.conn_id.clone(), watcher);
        }
        if st.roster.insert(&member) {
            self.changed(channel, st, |w| w.join(member));
        }
        Ok(())
    }

    /// A connection of this node left `channel` (unsubscribed, closed, no
    /// longer granted it): its membership ends, or its join still waiting
    /// for Redis is cancelled.
    pub fn leave(self: &Arc<Self>, channel: &str, user: &str, conn: &str) {
        let Some(state) = self.state(channel) else {
            return;
        };
        let mut st = state.lock();
        if st.joining.remove(conn).is_some() {
            // The join's task undoes it in Redis when Redis answers.
            return;
        }
        let Some(gone) = st.local.remove(conn) else {
            return;
        };
        // A status channel's members were never counted (`Presence::add`).
        if !super::is_status(channel) {
            self.metrics.presence.members.dec();
            if let Some(n) = st.local_users.get_mut(&gone.user) {
                *n -= 1;
                if *n == 0 {
                    st.local_users.remove(&gone.user);
                    if crate::protocol::channel::is_pusher(channel) {
                        self.metrics.pusher.presence_user(channel, false);
                    }
                    if let Some(w) = self.webhooks.upgrade() {
                        w.member_changed(channel, &gone.user, false);
                    }
                }
            }
        }
        st.watchers.remove(conn);
        if let Some(m) = st.roster.remove(user, conn) {
            if let Some(r) = &self.redis {
                r.leave(channel, &m);
            }
            self.changed(channel, &mut st, |w| w.leave(m));
        }
        self.forget_if_idle(channel, &state, &mut st);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Weak;

    use bytes::Bytes;

    use super::*;
    use crate::metrics::Metrics;
    use crate::presence::Update;

    struct Nowhere;

    impl PresenceSink for Nowhere {
        fn send(&self, _: &Bytes, _: &Update<'_>) {}
    }

    fn m(user: &str, conn: &str) -> Member {
        Member {
            user: user.into(),
            conn_id: conn.into(),
            info: None,
        }
    }

    const RULE: PresenceRule = PresenceRule {
        join_leave: false,
        max_members: 100,
        diff_ms: 200,
        join_leave_max_members: 100,
        by_user: false,
    };

    fn join(p: &Arc<Presence>, member: Member) -> Result<(), Full> {
        match p.join("note:race", RULE, member, Arc::new(Nowhere)) {
            Pending::Ready(r) => r,
            Pending::Later(_) => panic!("one node answers at once"),
        }
    }

    /// The last member leaves while a join holds the channel's entry,
    /// found in the map but not yet locked: the entry is forgotten, and
    /// the join must not land in it (it would be a member nobody sees,
    /// reads and `max_members` included).
    #[test]
    fn a_join_racing_the_last_leave_is_never_lost() {
        let p = Presence::new(Arc::new(Metrics::new()), Weak::new(), None);
        for round in 0..200 {
            join(&p, m("ann", "n1-1")).unwrap();
            let state = p.state("note:race").unwrap();
            let guard = state.lock();
            let q = p.clone();
            let joiner = std::thread::spawn(move || join(&q, m("bob", "n1-2")));
            // The joiner has taken the entry from the map (a third
            // holder) and waits for its lock.
            while Arc::strong_count(&state) < 3 {
                std::thread::yield_now();
            }
            drop(guard);
            p.leave("note:race", "ann", "n1-1");
            joiner.join().unwrap().unwrap();
            let Pending::Ready(read) = p.read("note:race", 10) else {
                panic!("one node answers at once");
            };
            assert_eq!(
                read.members.iter().map(|m| &*m.user).collect::<Vec<_>>(),
                ["bob"],
                "round {round}: a join was lost to the forgotten entry"
            );
            p.leave("note:race", "bob", "n1-2");
            assert_eq!(p.tracked_channels(), 0, "round {round}");
        }
    }
}
