//! A node's view of a channel it sends diffs of, brought in line with
//! Redis: when the view is new (silently: what is already there is not
//! news to anyone here) and every lease tick (the members that vanished,
//! a dead node's, become leaves; missed joins become joins).
//!
//! What it costs Redis is in proportion to what changed: one call that
//! answers the channel's version and counts, and the members' sort keys
//! only when the version moved since the view was last in line; infos
//! only of members new to the view, and only while the channel is at or
//! under `join_leave_max_members` (above it watchers get counts, not
//! members: a member learned there is listed without its info until the
//! channel is back under it).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use parking_lot::Mutex;

use super::reply::Reply;
use super::wire::{parse_sort_key, sort_key};
use super::{COMMAND_TIMEOUT, RedisPresence};
use crate::presence::{ChannelState, Presence};
use crate::protocol::presence::{Counts, Member};

/// What the `ids` script answered.
pub(super) struct Ids {
    pub version: i64,
    pub counts: Counts,
    /// Every member's (user, connection id), unless the caller's version
    /// was current.
    pub list: Option<Vec<(String, String)>>,
}

impl RedisPresence {
    /// The channel's version and counts, and its members' keys unless
    /// `known` is current; `None` when Redis does not answer.
    async fn ids(self: &Arc<Self>, channel: &str, known: Option<i64>) -> Option<Ids> {
        let mut conn = self.conn().await?;
        let mut inv = self.scripts.ids.prepare_invoke();
        for k in self.keys(channel) {
            inv.key(k);
        }
        inv.arg(known.map(|v| v.to_string()).unwrap_or_default())
            .arg(self.lease_ms);
        let call = inv.invoke_async::<redis::Value>(&mut conn);
        let Ok(Ok(value)) = tokio::time::timeout(COMMAND_TIMEOUT, call).await else {
            self.set_up(false);
            return None;
        };
        let mut r = Reply::new(value);
        let version = r.int();
        let counts = Counts {
            connections: r.int().max(0) as u64,
            users: r.int().max(0) as u64,
        };
        let listed = r.int() == 1;
        self.gone(channel, r.members());
        let list = listed.then(|| {
            r.rest_texts()
                .iter()
                .filter_map(|k| parse_sort_key(k))
                .collect()
        });
        Some(Ids {
            version,
            counts,
            list,
        })
    }

    /// The stored members of `keys` (sort keys) of `channel`, in order
    /// (`None` where one left meanwhile); `None` when Redis does not
    /// answer.
    async fn infos(&self, channel: &str, keys: &[String]) -> Option<Vec<Option<Member>>> {
        let mut conn = self.conn().await?;
        let [_, info, ..] = self.keys(channel);
        let cmd = redis::cmd("HMGET").arg(info).arg(keys).to_owned();
        let call = cmd.query_async::<Vec<Option<String>>>(&mut conn);
        let Ok(Ok(stored)) = tokio::time::timeout(COMMAND_TIMEOUT, call).await else {
            self.set_up(false);
            return None;
        };
        Some(
            stored
                .into_iter()
                .map(|s| {
                    let w = serde_json::from_str::<super::wire::Wire>(&s?).ok()?;
                    Some(Member::from(w))
                })
                .collect(),
        )
    }
}

impl Presence {
    /// Brings `state` (the view of `channel`) in line with Redis. `seed`:
    /// only if the view was never in line, silently (a join or a watch
    /// about to start on it).
    pub(in crate::presence) async fn sync(
        self: &Arc<Self>,
        redis: &Arc<RedisPresence>,
        channel: &str,
        state: &Arc<Mutex<ChannelState>>,
        seed: bool,
    ) {
        // Only members this view held before Redis answered can be found
        // gone: one an event added meanwhile may be newer than the answer.
        // Bounded by the roster.
        let (known, held) = {
            let st = state.lock();
            if seed && st.synced.is_some() {
                return;
            }
            let held: HashSet<(Arc<str>, Arc<str>)> =
                st.roster.iter().map(|m| (m.user, m.conn_id)).collect();
            (st.synced, held)
        };
        let Some(ids) = redis.ids(channel, known).await else {
            return;
        };
        let Some(list) = ids.list else {
            state.lock().synced = Some(ids.version);
            return;
        };
        // Infos to read: the new members', and those listed without one
        // while the channel was above the threshold.
        let fill: Vec<(String, String)> = {
            let st = state.lock();
            if ids.counts.connections <= u64::from(st.rule.join_leave_max_members) {
                list.iter()
                    .filter(|(u, c)| !st.roster.contains(u, c))
                    .cloned()
                    .chain(
                        st.unknown_info
                            .iter()
                            .map(|(u, c)| (u.to_string(), c.to_string())),
                    )
                    .collect()
            } else {
                Vec::new()
            }
        };
        let mut read: HashMap<(Arc<str>, Arc<str>), Member> = HashMap::new();
        if !fill.is_empty() {
            let keys: Vec<String> = fill.iter().map(|(u, c)| sort_key(u, c)).collect();
            let Some(infos) = redis.infos(channel, &keys).await else {
                return;
            };
            for m in infos.into_iter().flatten() {
                read.insert((m.user.clone(), m.conn_id.clone()), m);
            }
        }
        let mut st = state.lock();
        // Not news only to a view nobody here was told anything from.
        let silent = seed && st.synced.is_none() && st.local.is_empty() && st.watchers.is_empty();
        st.synced = Some(ids.version);
        let mut joins = Vec::new();
        for (user, conn) in &list {
            if st.roster.contains(user, conn) {
                continue;
            }
            let key: (Arc<str>, Arc<str>) = (user.as_str().into(), conn.as_str().into());
            let member = match read.remove(&key) {
                Some(m) => m,
                None => {
                    let m = Member {
                        user: key.0.clone(),
                        conn_id: key.1.clone(),
                        info: None,
                    };
                    st.unknown_info.insert(key);
                    m
                }
            };
            joins.push(member);
        }
        // Members listed without an info whose info was read now.
        for (key, m) in read {
            if st.unknown_info.remove(&key) {
                st.roster.set_info(&m);
            }
        }
        let listed: HashSet<(&str, &str)> =
            list.iter().map(|(u, c)| (u.as_str(), c.as_str())).collect();
        let leaves: Vec<Member> = st
            .roster
            .iter()
            .filter(|m| {
                held.contains(&(m.user.clone(), m.conn_id.clone()))
                    && !st.local.contains_key(&m.conn_id)
                    && !st.joining.contains_key(&m.conn_id)
                    && !listed.contains(&(&*m.user, &*m.conn_id))
            })
            .collect();
        if silent {
            for m in joins.drain(..) {
                st.roster.insert(&m);
            }
        }
        drop(st);
        if !joins.is_empty() || !leaves.is_empty() {
            self.remote(channel, joins, leaves);
        }
    }
}
