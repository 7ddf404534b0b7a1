//! A connection's user (§16's user authentication): `pusher:signin`, the
//! reserved `#server-to-user-{id}` channel, and the user's place in the
//! broker's shared layers.
//!
//! A sign-in carries `user_data` (a JSON object with at least a string
//! `id`) and `auth`, `key:hex(HMAC-SHA256(secret,
//! "socket_id::user::user_data"))` as the `pusher` library's
//! `authenticateUser` signs it, checked in constant time; a bad one is
//! `pusher:error` 4009 and the connection stays signed out. A verified one
//! is charged to the user's per-identity handshake bucket (§1, cluster-wide
//! through the bridge; over it `pusher:error` 4301, signed out), then
//! counted toward `user_max_connections` with the bridge's connection
//! count (cluster-wide in a cluster; over it `pusher:error` 4004 and the
//! close 4004). Signed in, the socket's handle names the user, so the HTTP
//! API's `terminate_connections` closes it as an operator's disconnect
//! does (§10, on every node).

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::frames::{self, code};
use super::names;
use super::presence::MAX_USER_ID;
use super::sign;
use super::watchlist::{self, Online, SigninDue};
use crate::cluster::{CapReached, SharedLimiterStore, scale_cap};
use crate::config::{LimitName, PusherApp};
use crate::dialect::Link;
use crate::exceeded::Exceeded;
use crate::metrics::Layer;
use crate::presence::Pending;
use crate::protocol::ErrorCode;

/// One connection counted toward its user's `user_max_connections`: given
/// back to the bridge when dropped (the connection closed, or the sign-in's
/// answer never reached it), so a count cannot leak.
pub(super) struct Counted {
    store: SharedLimiterStore,
    key: Arc<str>,
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.store.release_connection(&self.key);
    }
}

/// A sign-in's answer from the shared layers, back on the connection.
pub(super) struct Verdict {
    socket_id: Arc<str>,
    user_data: String,
    id: Arc<str>,
    outcome: Result<Option<Counted>, Refused>,
}

/// Why a verified sign-in was refused by the shared layers.
enum Refused {
    /// The user's handshake bucket is empty: retry after this.
    RateLimited(Duration),
    /// The user has its `user_max_connections` open.
    OverCap(CapReached),
}

/// Where a connection stands with its user.
#[derive(Default)]
enum State {
    #[default]
    Out,
    /// A verified sign-in is being charged and counted.
    Signing,
    /// Boxed: most connections never sign in, and every connection holds
    /// a `State` for its whole life (issue 40's idle memory).
    In(Box<SignedIn>),
}

/// A signed-in connection's user.
struct SignedIn {
    id: Arc<str>,
    /// `None`: the app sets no cap, nothing is counted.
    _counted: Option<Counted>,
    /// Online, and watching its watchlist (`watchlist.rs`).
    online: Online,
    /// The verified `user_data` while its online status is registered
    /// (`pusher:signin_success` not sent yet); bounded by the sign-in
    /// frame it came in, which the connection paid for.
    welcome: Option<String>,
}

/// A sign-in's online status is registered cluster-wide: it is answered.
struct Registered;

/// The connection's user.
#[derive(Default)]
pub(super) struct User {
    state: State,
}

/// A user's `id` from a verified `user_data`.
fn user_id(user_data: &str) -> Option<Arc<str>> {
    let v: Value = serde_json::from_str(user_data).ok()?;
    let id = v.get("id")?.as_str()?;
    let ok = !id.is_empty() && id.len() <= MAX_USER_ID && !id.chars().any(char::is_control);
    ok.then(|| Arc::from(id))
}

impl User {
    /// The signed-in user's id (a hook's `client.sub`).
    pub fn id(&self) -> Option<Arc<str>> {
        match &self.state {
            State::In(me) => Some(me.id.clone()),
            _ => None,
        }
    }

    /// Whether this connection may hold `#server-to-user-{id}`: only once
    /// signed in as `id`.
    pub fn holds(&self, id: &str) -> bool {
        matches!(&self.state, State::In(me) if *me.id == *id)
    }

    /// `pusher:signin` (its frame charged already): verified here, then
    /// charged and counted off the connection's worker; the answer comes
    /// back as a [`Verdict`] through [`User::done`].
    pub fn signin(&mut self, link: &mut dyn Link, app: &PusherApp, socket_id: &str, data: &Value) {
        let node = link.node().clone();
        let user_data = data.get("user_data").and_then(Value::as_str).unwrap_or("");
        let auth = data.get("auth").and_then(Value::as_str).unwrap_or("");
        if !sign::user_auth_ok(&app.key, &app.secret, socket_id, user_data, auth) {
            Exceeded::new(Layer::Connection, "unauthorized", &app.account)
                .conn(link.label())
                .emit(&node.metrics);
            return link.send(&frames::error(
                Some(code::UNAUTHORIZED),
                "Invalid signature: the auth does not sign user_data for this socket",
            ));
        }
        let Some(id) = user_id(user_data) else {
            return link.send(&frames::error(
                Some(code::UNAUTHORIZED),
                &format!("user_data must be a JSON object with an id of 1-{MAX_USER_ID} bytes"),
            ));
        };
        if matches!(self.state, State::Signing) {
            return link.send(&frames::error(None, "a sign-in is under way"));
        }
        // A connection signed in already is charged all the same (each
        // layer charges every attempt that reaches it), then told so.
        let count = matches!(self.state, State::Out) && app.user_max_connections > 0;
        if matches!(self.state, State::Out) {
            self.state = State::Signing;
        }
        let key: Arc<str> = names::user_key(&app.id, &id).into();
        let limits = link.limits();
        let dry = limits.is_dry_run(LimitName::Handshake);
        let store = node.limiter_store.clone();
        let charged = store.handshake(&key, &limits);
        let max = scale_cap(app.user_max_connections, store.account_share(&key));
        let user_data = user_data.to_owned();
        let socket_id: Arc<str> = socket_id.into();
        let (tx, rx) = tokio::sync::oneshot::channel();
        // Detached, so a connection closed meanwhile cannot drop a count
        // the bridge made: the undelivered verdict's `Counted` gives it back.
        actix_rt::spawn(async move {
            let outcome = match charged.wait().await {
                Err(wait) if !dry => Err(Refused::RateLimited(wait)),
                _ if !count => Ok(None),
                _ => match store.reserve_connection(&key, max).wait().await {
                    Ok(_) => Ok(Some(Counted { store, key })),
                    Err(cap) => Err(Refused::OverCap(cap)),
                },
            };
            let _ = tx.send(Verdict {
                socket_id,
                user_data,
                id,
                outcome,
            });
        });
        link.spawn(Box::pin(async move {
            match rx.await {
                Ok(v) => Box::new(v) as Box<dyn Any>,
                Err(_) => Box::new(()) as Box<dyn Any>,
            }
        }));
    }

    /// The connection opened: `user_authentication_timeout_s` starts.
    pub fn opened(&self, link: &mut dyn Link, app: &PusherApp) {
        watchlist::arm_signin_timeout(link, app);
    }

    /// A [`Verdict`] arrived: signed in (the socket's handle names the
    /// user and it comes online; once that is registered, in a cluster
    /// when Redis answered, `pusher:signin_success` and its watchlist), or
    /// refused; `user_authentication_timeout_s` rang: a connection not
    /// signed in is closed 4009; other work is handed back.
    pub fn done(
        &mut self,
        link: &mut dyn Link,
        app: &PusherApp,
        output: Box<dyn Any>,
    ) -> Result<(), Box<dyn Any>> {
        let output = match output.downcast::<SigninDue>() {
            Ok(_) => {
                self.signin_due(link, app);
                return Ok(());
            }
            Err(other) => other,
        };
        let output = match output.downcast::<Registered>() {
            Ok(_) => {
                self.welcome(link, app);
                return Ok(());
            }
            Err(other) => other,
        };
        let v = *output.downcast::<Verdict>()?;
        let node = link.node().clone();
        let signing = matches!(self.state, State::Signing);
        match v.outcome {
            Err(Refused::RateLimited(wait)) => {
                if signing {
                    self.state = State::Out;
                }
                Exceeded::new(
                    Layer::Handshake,
                    ErrorCode::HandshakeRateLimited.as_str(),
                    &app.account,
                )
                .conn(link.label())
                .reset(wait)
                .emit(&node.metrics);
                link.send(&frames::error(
                    Some(code::CLIENT_EVENT_REJECTED),
                    &format!(
                        "too many sign-ins for user {:?}: retry in {} ms",
                        v.id,
                        wait.as_millis()
                    ),
                ));
            }
            Err(Refused::OverCap(cap)) => {
                self.state = State::Out;
                Exceeded::new(
                    Layer::Connection,
                    ErrorCode::TooManyConnections.as_str(),
                    &app.account,
                )
                .conn(link.label())
                .emit(&node.metrics);
                let why = format!(
                    "user {:?} has {} of {} connections open",
                    v.id, cap.open, cap.max
                );
                link.send(&frames::error(Some(code::OVER_USER_CAP), &why));
                link.close(code::OVER_USER_CAP, "Over the user's connection limit");
            }
            Ok(counted) if signing => {
                let key: Arc<str> = names::user_key(&app.id, &v.id).into();
                if let Some(mut handle) = node.sockets.get_mut(&link.conn()) {
                    handle.user = Some(key);
                }
                let (online, registering) = watchlist::signed_in(link, app, &v.socket_id, &v.id);
                self.state = State::In(Box::new(SignedIn {
                    id: v.id,
                    _counted: counted,
                    online,
                    welcome: Some(v.user_data),
                }));
                match registering {
                    Pending::Ready(_) => self.welcome(link, app),
                    Pending::Later(f) => link.spawn(Box::pin(async move {
                        let _ = f.await;
                        Box::new(Registered) as Box<dyn Any>
                    })),
                }
            }
            Ok(_) => link.send(&frames::error(
                None,
                "this connection is signed in already; a user signs in once a connection",
            )),
        }
        Ok(())
    }
}

impl User {
    /// The sign-in's online status is registered: `pusher:signin_success`,
    /// then its watchlist is watched.
    fn welcome(&mut self, link: &mut dyn Link, app: &PusherApp) {
        let State::In(me) = &mut self.state else {
            return;
        };
        let Some(user_data) = me.welcome.take() else {
            return;
        };
        let data = json!({ "user_data": user_data }).to_string();
        link.send(&frames::event("pusher:signin_success", None, &data));
        watchlist::watch(link, app, &mut me.online, &user_data);
    }

    /// `user_authentication_timeout_s` rang: a connection not signed in
    /// (a sign-in still being charged included) is closed 4009, as Pusher
    /// and Sockudo close it.
    fn signin_due(&mut self, link: &mut dyn Link, app: &PusherApp) {
        if !matches!(self.state, State::In(_)) {
            Exceeded::new(Layer::Connection, "unauthorized", &app.account)
                .conn(link.label())
                .emit(&link.node().metrics);
            link.close(
                code::UNAUTHORIZED,
                "Connection not authorized within timeout",
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_data_needs_a_string_id() {
        assert_eq!(
            user_id(r#"{"id":"u1","name":"Ann"}"#).as_deref(),
            Some("u1")
        );
        for bad in [
            r#"{"id":1}"#,
            r#"{"id":""}"#,
            r#"{"name":"x"}"#,
            "[]",
            "not json",
            r#"{"id":"a\u0001"}"#,
        ] {
            assert_eq!(user_id(bad), None, "{bad}");
        }
        assert_eq!(user_id(&format!(r#"{{"id":"{}"}}"#, "x".repeat(129))), None);
    }
}
