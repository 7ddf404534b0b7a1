//! Watchlists (Pusher's "watchlist events", §16): a signed-in user's
//! `user_data` may carry `"watchlist": ["id", ...]`, and its connection is
//! then sent `pusher_internal:watchlist_events`
//! `{"events":[{"name":"online","user_ids":[..]},{"name":"offline",..}]}`
//! (pusher-js 8 emits each event on `pusher.user.watchlist`): once after
//! the sign-in with the watchlist's state as it is, then when one of its
//! users comes online (its first connection signed in, on any node) or
//! goes offline (its last one gone, or its node dead past the lease).
//!
//! Online status is a presence channel of the app's signed-in users, one
//! member per signed-in connection, on §13's machinery
//! (`presence/status.rs`): cluster-wide through Redis like any presence
//! channel, a user with two tabs is one user, and news is coalesced per
//! `presence_diff_ms` window: at most one event per user per window for
//! each watcher, and a reload inside a window is no news at all.

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use serde_json::{Value, json};

use super::frames::{self, code};
use super::presence::MAX_USER_ID;
use crate::config::{PresenceRule, PusherApp};
use crate::dialect::{Link, Outlet};
use crate::presence::{Full, Pending, Presence, PresenceSink, STATUS_PREFIX, StatusSink, Update};
use crate::protocol::presence::Member;
use crate::protocol::wire;

/// The most users one connection watches. The bound is what the app pays
/// for a watcher: each watched user is one entry in its node's index, and
/// every window's news about that user is one more frame to queue (Pusher
/// documents no number; Sockudo has a "watchlist limit exceeded" error,
/// 4302, and no number either). Past it the first `MAX_WATCHLIST` distinct
/// ids are watched and the connection is told so (`pusher:error` 4302).
pub const MAX_WATCHLIST: usize = 100;

/// The app's status channel: its signed-in users.
fn status_channel(app_id: &str) -> String {
    format!("{STATUS_PREFIX}{app_id}")
}

/// The status channel's rule: news per user, in `presence_diff_ms`
/// windows; no cap of its own (its members are the app's signed-in
/// connections, capped by the app's connection cap).
fn rule(app: &PusherApp) -> PresenceRule {
    PresenceRule {
        join_leave: true,
        max_members: u32::MAX,
        diff_ms: app.presence_diff_ms,
        join_leave_max_members: u32::MAX,
        by_user: true,
    }
}

/// A `user_data`'s watchlist: its distinct valid ids, at most
/// [`MAX_WATCHLIST`], in the order given, and how many were left out
/// (past the cap, or not an id: not a string of 1–128 bytes without
/// control characters).
fn parse(user_data: &str) -> (Vec<Arc<str>>, usize) {
    let Ok(v) = serde_json::from_str::<Value>(user_data) else {
        return (Vec::new(), 0);
    };
    let Some(list) = v.get("watchlist").and_then(Value::as_array) else {
        return (Vec::new(), 0);
    };
    let mut ids: Vec<Arc<str>> = Vec::new();
    let mut left_out = 0;
    for item in list {
        let id = item.as_str().filter(|id| {
            !id.is_empty() && id.len() <= MAX_USER_ID && !id.chars().any(char::is_control)
        });
        match id {
            Some(id) if ids.iter().any(|i| **i == *id) => {}
            Some(id) if ids.len() < MAX_WATCHLIST => ids.push(id.into()),
            _ => left_out += 1,
        }
    }
    (ids, left_out)
}

/// The `pusher_internal:watchlist_events` frame saying `online` and
/// `offline` (each event only when it names someone).
fn frame(online: &[Arc<str>], offline: &[Arc<str>]) -> String {
    let mut events = Vec::with_capacity(2);
    for (name, ids) in [("online", online), ("offline", offline)] {
        if !ids.is_empty() {
            let ids: Vec<&str> = ids.iter().map(|i| &**i).collect();
            events.push(json!({"name": name, "user_ids": ids}));
        }
    }
    let data = json!({ "events": events }).to_string();
    frames::event("pusher_internal:watchlist_events", None, &data)
}

/// A member of the status channel: watches nothing itself.
struct NotWatching;

impl PresenceSink for NotWatching {
    fn send(&self, _frame: &Bytes, _update: &Update<'_>) {}

    fn watches(&self) -> bool {
        false
    }
}

/// A watching connection's queue.
struct Watcher {
    outlet: Arc<dyn Outlet>,
    /// The connection closed: nothing more is queued.
    ended: AtomicBool,
}

impl StatusSink for Watcher {
    /// Queued whole and never dropped (the client's view of who is online
    /// must stay exact): one that takes the socket past its mark starts
    /// the slow-consumer grace, which closes a reader that stopped, as a
    /// presence channel's member events do.
    fn changed(&self, online: &[Arc<str>], offline: &[Arc<str>]) {
        if self.ended.load(Ordering::Acquire) {
            return;
        }
        let rendered = wire::text(frame(online, offline).as_bytes());
        if self.outlet.gauge().add_answer(rendered.len()) {
            self.outlet.congested();
        }
        self.outlet.push_frame(rendered);
    }
}

/// A signed-in connection's place in its app's online status: it is
/// online while this lives (a member of the status channel), and watches
/// its watchlist. Dropped when the connection closes.
pub(super) struct Online {
    presence: Arc<Presence>,
    channel: Arc<str>,
    user: Arc<str>,
    socket_id: Arc<str>,
    /// Its watcher and the users it watches, when its watchlist names any.
    watching: Option<Watching>,
}

/// A connection's watcher and the users it watches.
type Watching = (Arc<Watcher>, Arc<[Arc<str>]>);

impl Drop for Online {
    fn drop(&mut self) {
        self.presence
            .leave(&self.channel, &self.user, &self.socket_id);
        if let Some((watcher, users)) = &self.watching {
            watcher.ended.store(true, Ordering::Release);
            self.presence
                .unwatch_status(&self.channel, &self.socket_id, users);
        }
    }
}

/// The connection signed in as `user`: it comes online (a member of the
/// app's status channel). In a cluster the join goes on by itself (and
/// undoes itself if the connection left first); its registration is
/// returned, so `pusher:signin_success` waits for it: once a client is told
/// it is signed in, every node counts it online, and a second connection of
/// the same user closing elsewhere is no news (it was "offline, online"
/// when that close reached Redis first).
pub(super) fn signed_in(
    link: &mut dyn Link,
    app: &PusherApp,
    socket_id: &Arc<str>,
    user: &Arc<str>,
) -> (Online, Pending<Result<(), Full>>) {
    let presence = link.node().presence.clone();
    let channel: Arc<str> = status_channel(&app.id).into();
    let me = Member {
        user: user.clone(),
        conn_id: socket_id.clone(),
        info: None,
    };
    let registering = presence.join(&channel, rule(app), me, Arc::new(NotWatching));
    let online = Online {
        presence,
        channel,
        user: user.clone(),
        socket_id: socket_id.clone(),
        watching: None,
    };
    (online, registering)
}

/// `pusher:signin_success` was sent: the watchlist of `user_data` is
/// watched (its state as it is comes first); one past [`MAX_WATCHLIST`]
/// or with entries that are no user id is watched in part and the
/// connection told so.
pub(super) fn watch(link: &mut dyn Link, app: &PusherApp, online: &mut Online, user_data: &str) {
    let (ids, left_out) = parse(user_data);
    if left_out > 0 {
        link.send(&frames::error(
            Some(code::WATCHLIST_LIMIT),
            &format!(
                "{left_out} watchlist entries not watched: at most {MAX_WATCHLIST} distinct user ids of 1-{MAX_USER_ID} bytes"
            ),
        ));
    }
    if ids.is_empty() {
        return;
    }
    let users: Arc<[Arc<str>]> = ids.into();
    let watcher = Arc::new(Watcher {
        outlet: link.outlet(),
        ended: AtomicBool::new(false),
    });
    let (presence, channel, socket_id) = (
        online.presence.clone(),
        online.channel.clone(),
        online.socket_id.clone(),
    );
    let pending = presence.watch_status(
        &channel,
        rule(app),
        socket_id.clone(),
        users.to_vec(),
        watcher.clone(),
    );
    if let Pending::Later(f) = pending {
        // Registered after Redis answered: if the connection closed
        // meanwhile, its `Online` found nothing to forget, so this does.
        let (w, users, key) = (watcher.clone(), users.clone(), socket_id);
        actix_rt::spawn(async move {
            f.await;
            if w.ended.load(Ordering::Acquire) {
                presence.unwatch_status(&channel, &key, &users);
            }
        });
    }
    online.watching = Some((watcher, users));
}

/// `user_authentication_timeout_s` rang.
pub(super) struct SigninDue;

/// Arms the app's `user_authentication_timeout_s` (0: none): a connection
/// not signed in by then is closed 4009 (`user.rs`).
pub(super) fn arm_signin_timeout(link: &mut dyn Link, app: &PusherApp) {
    if app.user_authentication_timeout_s == 0 {
        return;
    }
    let after = std::time::Duration::from_secs(app.user_authentication_timeout_s);
    link.spawn(Box::pin(async move {
        actix_rt::time::sleep(after).await;
        Box::new(SigninDue) as Box<dyn Any>
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watchlist_is_distinct_ids_capped() {
        let (ids, out) = parse(r#"{"id":"a","watchlist":["b","c","b",7,"",null]}"#);
        assert_eq!(ids.iter().map(|i| &**i).collect::<Vec<_>>(), ["b", "c"]);
        assert_eq!(out, 3, "a repeat is not left out: it is watched");
        assert_eq!(parse(r#"{"id":"a"}"#), (vec![], 0));
        assert_eq!(parse(r#"{"id":"a","watchlist":"b"}"#), (vec![], 0));
        let many: Vec<String> = (0..150).map(|i| format!("u{i}")).collect();
        let (ids, out) = parse(&json!({"id": "a", "watchlist": many}).to_string());
        assert_eq!((ids.len(), out), (MAX_WATCHLIST, 50));
        assert_eq!(&*ids[0], "u0");
    }

    #[test]
    fn the_frame_is_pusher_js_s() {
        let f: Value = serde_json::from_str(&frame(&["b".into()], &[])).unwrap();
        assert_eq!(f["event"], "pusher_internal:watchlist_events");
        let data: Value = serde_json::from_str(f["data"].as_str().unwrap()).unwrap();
        assert_eq!(
            data,
            json!({"events": [{"name": "online", "user_ids": ["b"]}]})
        );
    }
}
