//! Presence channels on this wire (§16): `presence-` channels are §13's
//! presence machinery with members counted and told per user
//! ([`PresenceRule::by_user`]): a user with two tabs is one member, added
//! when its first connection joins and removed when its last leaves, and
//! `max_presence_members` counts users. Each subscription's connection is
//! one §13 member (its `socket_id` the connection id, `channel_data`'s
//! `user_info` the info); this module turns what the machinery tells a
//! member's watcher into Pusher's frames.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::Value;

use super::frames;
use super::sink::PusherSink;
use crate::config::{PresenceRule, PusherApp};
use crate::node::Node;
use crate::presence::{PresenceSink, Update, UserChanges};
use crate::protocol::presence::{MAX_INFO_BYTES, Member};

/// Longest `user_id`, in bytes (Pusher's own limit).
pub const MAX_USER_ID: usize = 128;

/// The rule of an app's presence channels: join/leave news always (never
/// counts in their place: pusher-js's member list must stay exact), in
/// windows of `presence_diff_ms`, at most `max_presence_members` users.
pub fn rule(app: &PusherApp) -> PresenceRule {
    PresenceRule {
        join_leave: true,
        max_members: app.max_presence_members,
        diff_ms: app.presence_diff_ms,
        join_leave_max_members: u32::MAX,
        by_user: true,
    }
}

/// Why a presence subscription's `channel_data` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadChannelData {
    #[error("channel_data must be a JSON object {{\"user_id\",\"user_info\"}} as a string")]
    NotAnObject,
    #[error("channel_data has no user_id (a string or a number)")]
    NoUserId,
    #[error("user_id must be 1-{MAX_USER_ID} bytes without control characters")]
    BadUserId,
    #[error("user_info is {0} bytes of JSON, above the limit of {MAX_INFO_BYTES}")]
    InfoTooLarge(usize),
}

/// A presence subscriber: its user and that user's info (compact JSON).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelData {
    pub user_id: Arc<str>,
    pub user_info: Option<Arc<str>>,
}

/// Reads `channel_data` (already covered by the subscription's checked
/// signature). A numeric `user_id` is taken as its text, as Pusher does.
pub fn channel_data(text: &str) -> Result<ChannelData, BadChannelData> {
    let Ok(Value::Object(mut v)) = serde_json::from_str::<Value>(text) else {
        return Err(BadChannelData::NotAnObject);
    };
    let user_id = match v.remove("user_id") {
        Some(Value::String(s)) => s,
        Some(Value::Number(n)) => n.to_string(),
        _ => return Err(BadChannelData::NoUserId),
    };
    if user_id.is_empty() || user_id.len() > MAX_USER_ID || user_id.chars().any(char::is_control) {
        return Err(BadChannelData::BadUserId);
    }
    let user_info = match v.remove("user_info") {
        None | Some(Value::Null) => None,
        Some(info) => {
            let text = info.to_string();
            if text.len() > MAX_INFO_BYTES {
                return Err(BadChannelData::InfoTooLarge(text.len()));
            }
            Some(text.into())
        }
    };
    Ok(ChannelData {
        user_id: user_id.into(),
        user_info,
    })
}

/// One presence subscription as the machinery's watcher: it renders the
/// member list it is given at its join as `subscription_succeeded`'s
/// data, and each window's users as `member_added`/`member_removed`,
/// queued on the channel's sink (held there until the subscription is
/// answered). Its own user is never news to it: its own connection keeps
/// that user in.
pub struct PusherMembers {
    /// The Pusher name of the channel.
    channel: String,
    pub me: ChannelData,
    sink: Arc<PusherSink>,
    /// `subscription_succeeded`'s data, set at the join.
    succeeded: Mutex<Option<String>>,
    /// The users the window open at the join had touched, and whether
    /// `subscription_succeeded` listed them: that window's news about
    /// them is weighed against this, not against what the others knew.
    /// Bounded by that window's users; emptied when it closes.
    unsent: Mutex<BTreeMap<Arc<str>, bool>>,
}

impl PusherMembers {
    pub fn new(channel: &str, me: ChannelData, sink: Arc<PusherSink>) -> Arc<Self> {
        Arc::new(PusherMembers {
            channel: channel.to_owned(),
            me,
            sink,
            succeeded: Mutex::new(None),
            unsent: Mutex::new(BTreeMap::new()),
        })
    }

    /// The member this connection is.
    pub fn member(&self, socket_id: &str) -> Member {
        Member {
            user: self.me.user_id.clone(),
            conn_id: socket_id.into(),
            info: self.me.user_info.clone(),
        }
    }

    /// `subscription_succeeded`'s data (`None`: the join was not made).
    pub fn succeeded(&self) -> Option<String> {
        self.succeeded.lock().take()
    }
}

impl PusherMembers {
    /// `member_added` of `m`'s user (never this connection's own user:
    /// its own connection keeps that user in).
    fn added(&self, m: &Member) {
        if m.user == self.me.user_id {
            return;
        }
        let data = serde_json::json!({"user_id": &*m.user, "user_info": info_value(&m.info)});
        let frame = frames::event(
            "pusher_internal:member_added",
            Some(&self.channel),
            &data.to_string(),
        );
        self.sink.push_own(&frame);
    }

    /// `member_removed` of `user` (never this connection's own).
    fn removed(&self, user: &Arc<str>) {
        if *user == self.me.user_id {
            return;
        }
        let data = serde_json::json!({ "user_id": &**user });
        let frame = frames::event(
            "pusher_internal:member_removed",
            Some(&self.channel),
            &data.to_string(),
        );
        self.sink.push_own(&frame);
    }
}

/// `{"presence":{"ids":[...],"hash":{id:info},"count":n}}` of `members`
/// (sorted by user; a user's first connection names its info) and `me`,
/// the ids sorted.
pub fn presence_data(members: &[Member], me: &ChannelData) -> String {
    let mut ids: Vec<&str> = Vec::with_capacity(members.len() + 1);
    let mut hash = serde_json::Map::with_capacity(members.len() + 1);
    let all = members
        .iter()
        .map(|m| (&m.user, &m.info))
        .chain(std::iter::once((&me.user_id, &me.user_info)));
    for (user, info) in all {
        if !hash.contains_key(&**user) {
            ids.push(user);
            hash.insert(user.to_string(), info_value(info));
        }
    }
    // Sorted, `me` among the others.
    ids.sort_unstable();
    let count = ids.len();
    serde_json::json!({"presence": {"ids": ids, "hash": hash, "count": count}}).to_string()
}

/// A member's info as JSON (`null` when it has none).
fn info_value(info: &Option<Arc<str>>) -> Value {
    info.as_deref()
        .and_then(|i| serde_json::from_str(i).ok())
        .unwrap_or(Value::Null)
}

impl PresenceSink for PusherMembers {
    /// Not called on a `by_user` channel.
    fn send(&self, _frame: &Bytes, _update: &Update<'_>) {}

    fn listed(&self, members: &[Member], unsent: &[Arc<str>]) {
        *self.succeeded.lock() = Some(presence_data(members, &self.me));
        // `members` is sorted by user.
        let listed = |u: &Arc<str>| members.binary_search_by(|m| m.user.cmp(u)).is_ok();
        *self.unsent.lock() = unsent.iter().map(|u| (u.clone(), listed(u))).collect();
    }

    fn users(&self, changes: &UserChanges<'_>) {
        let unsent = std::mem::take(&mut *self.unsent.lock());
        // Users this one listed while their news was unsent: news if they
        // are not now as listed.
        for (user, was) in &unsent {
            match (*was, changes.present(user)) {
                (false, true) => {
                    if let Some(m) = changes.member(user) {
                        self.added(&m);
                    }
                }
                (true, false) => self.removed(user),
                _ => {}
            }
        }
        for m in &changes.added {
            if !unsent.contains_key(&m.user) {
                self.added(m);
            }
        }
        for m in &changes.removed {
            if !unsent.contains_key(&m.user) {
                self.removed(&m.user);
            }
        }
    }
}

/// The most connections one users read lists (a channel's users are
/// capped by `max_presence_members`; their connections by the account's
/// connection cap, which this bounds again).
const MAX_READ: u64 = 100_000;

/// How many users the presence channel `internal` has, cluster-wide.
pub async fn user_count(node: &Node, internal: &str) -> u64 {
    node.presence.read(internal, 0).wait().await.counts.users
}

/// The users of the presence channel `internal`, cluster-wide, sorted:
/// a first read of as many connections as the channel may have users,
/// and a second of all its connections if some user has several.
pub async fn user_ids(node: &Node, app: &PusherApp, internal: &str) -> Vec<Arc<str>> {
    let first = app.max_presence_members as usize;
    let mut read = node.presence.read(internal, first).wait().await;
    if (read.members.len() as u64) < read.counts.connections.min(MAX_READ) {
        let all = read.counts.connections.min(MAX_READ) as usize;
        read = node.presence.read(internal, all).wait().await;
    }
    let mut users: Vec<Arc<str>> = read.members.into_iter().map(|m| m.user).collect();
    users.dedup();
    users
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_data_is_read_as_pusher_writes_it() {
        let d = channel_data(r#"{"user_id":"u1","user_info":{"name":"Ann"}}"#).unwrap();
        assert_eq!(&*d.user_id, "u1");
        assert_eq!(d.user_info.as_deref(), Some(r#"{"name":"Ann"}"#));
        let d = channel_data(r#"{"user_id":42}"#).unwrap();
        assert_eq!((&*d.user_id, d.user_info), ("42", None));
        assert_eq!(channel_data("[1]"), Err(BadChannelData::NotAnObject));
        assert_eq!(channel_data("{}"), Err(BadChannelData::NoUserId));
        assert_eq!(
            channel_data(r#"{"user_id":"a\u0000b"}"#),
            Err(BadChannelData::BadUserId)
        );
        let big = format!(r#"{{"user_id":"u","user_info":"{}"}}"#, "x".repeat(2000));
        assert_eq!(channel_data(&big), Err(BadChannelData::InfoTooLarge(2002)));
    }

    #[test]
    fn presence_data_lists_users_once_with_me() {
        let m = |u: &str, c: &str, i: Option<&str>| Member {
            user: u.into(),
            conn_id: c.into(),
            info: i.map(Into::into),
        };
        let members = [
            m("ann", "1.1", Some(r#"{"n":1}"#)),
            m("ann", "1.2", Some(r#"{"n":2}"#)),
            m("bob", "1.3", None),
        ];
        let me = ChannelData {
            user_id: "cid".into(),
            user_info: Some("\"c\"".into()),
        };
        let v: Value = serde_json::from_str(&presence_data(&members, &me)).unwrap();
        assert_eq!(
            v["presence"]["ids"],
            serde_json::json!(["ann", "bob", "cid"])
        );
        assert_eq!(v["presence"]["count"], 3);
        assert_eq!(v["presence"]["hash"]["ann"], serde_json::json!({"n": 1}));
        assert_eq!(v["presence"]["hash"]["bob"], Value::Null);
        assert_eq!(v["presence"]["hash"]["cid"], "c");
    }
}
