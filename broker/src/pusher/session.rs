//! One `/app/{key}` connection: Pusher's protocol as a dialect of the
//! socket machinery (`dialect.rs`).
//!
//! Every client frame is charged to the connection's frame bucket before it
//! is read further (`pusher:ping` to its ping bucket, like a WebSocket
//! ping): a client event over it is dropped and answered `pusher:error`
//! 4301 at most once a second, a subscription over it is refused with
//! status 429; the connection stays open. The activity clock
//! (`activity.rs`) pings a silent client and closes 4201 when the pong does
//! not come; the user a `pusher:signin` names is `user.rs`'s. §15's hooks
//! decide subscribes and client events on the channels they cover (`hooked.rs`).

use std::any::Any;
use std::collections::HashSet;
use std::sync::Arc;

use actix_http::RequestHead;
use serde_json::{Value, json};

use super::activity::{Activity, Clock, PongDue};
use super::client_event::{self, Notices, Refused};
use super::frames::{self, Incoming};
use super::hooked::{self, Asked, Asker, PusherHooks, Ready};
use super::names;
use super::opening;
use super::presence::{self, ChannelData, PusherMembers};
use super::sink::{PusherSink, Replay};
use super::subscribe::{self, Sub};
use super::user::User;
use crate::admission::{Cap, subscription_cap};
use crate::cluster::{ChannelRead, Pending};
use crate::config::PusherApp;
use crate::dialect::{Dialect, Link, Refusal};
use crate::exceeded::Exceeded;
use crate::hooks::Decision;
use crate::hub::{self, Sink, Subscriber};
use crate::metrics::Layer;
use crate::metrics::pusher::AppTally;
use crate::node::Node;
use crate::presence::{Full, Pending as Joining};
use crate::protocol::CloseCode;
use crate::webhook::event::CACHE_MISS;

pub(super) fn open(node: &Arc<Node>, head: &RequestHead) -> Box<dyn Dialect> {
    let key = head.uri.path().strip_prefix(super::WS_PREFIX).unwrap_or("");
    let app = super::app_by_key(node, key);
    let refusal = opening::refusal(app.is_some(), key, head.uri.query().unwrap_or(""));
    Box::new(PusherWs {
        node: node.clone(),
        app,
        refusal: refusal.map(Box::new),
        socket_id: Arc::from(""),
        channels: HashSet::new(),
        clock: Clock::new(),
        notices: Notices::default(),
        tally: None,
        user: User::default(),
        hooks: PusherHooks::default(),
    })
}

pub(super) struct PusherWs {
    node: Arc<Node>,
    /// `None`: the key named no app (closed 4001 once open).
    app: Option<Arc<PusherApp>>,
    /// Why the connection is closed as soon as it opens (boxed: rare, and
    /// every connection holds this field).
    refusal: Option<Box<(u16, String)>>,
    socket_id: Arc<str>,
    /// By Pusher name ([`Sub`]'s `Borrow<str>`). Bounded by the plan's
    /// `max_subscriptions`: a subscribe past it is refused.
    channels: HashSet<Sub>,
    clock: Clock,
    /// `pusher:error` 4301, at most one a second.
    notices: Notices,
    /// The app's figures (`metrics/pusher.rs`), held from the open to the
    /// close so the connection is counted exactly once each way.
    tally: Option<Arc<AppTally>>,
    /// Signed in or not (`pusher:signin`).
    user: User,
    /// Subscribes and client events a §15 hook is asked about.
    hooks: PusherHooks,
}

/// A cache channel's last event was read (the hub's answer to the join
/// waits with it for the sink).
struct Cached(String, Arc<PusherSink>, hub::Joined, ChannelRead);
/// A subscription's join was answered (and its presence join, refused
/// when the channel is full).
struct Joined(String, Arc<PusherSink>, hub::Joined, Result<(), Full>);

impl PusherWs {
    fn app(&self) -> &PusherApp {
        self.app
            .as_deref()
            .expect("a refused connection reads no frame")
    }

    /// Asks a hook about `asked` on `channel` (`hooked.rs`): `Some`, none
    /// decides it, go on now.
    fn ask(&mut self, link: &mut dyn Link, channel: &str, asked: Asked) -> Option<Asked> {
        let asker = Asker {
            app: self.app.as_deref().expect("an open connection's app"),
            socket_id: &self.socket_id,
            user: self.user.id(),
        };
        self.hooks.ask(link, &asker, channel, asked)
    }

    /// A hook's answer whose turn came.
    fn hooked(&mut self, link: &mut dyn Link, ready: Ready) {
        let app = self.app.clone().expect("an open connection's app");
        let (channel, allowed) = (&*ready.channel, ready.decision.allows());
        match ready.asked {
            // Unsubscribed while the hook was asked: not joined.
            Asked::Subscribe(_) if ready.cancelled => {}
            Asked::Subscribe(me) if allowed => self.join(link, channel, me),
            Asked::Subscribe(_) => hooked::refuse_subscription(link, &app, channel, ready.decision),
            Asked::ClientEvent { event, data } => match ready.decision {
                Decision::Allowed { result, .. } => {
                    let data = result.get("data").unwrap_or(&data);
                    self.fan_out(link, channel, &event, data);
                }
                refused => hooked::refuse_event(link, &app, channel, refused),
            },
        }
    }

    fn frame(&mut self, link: &mut dyn Link, text: &str) {
        let costs = link.limits().costs.clone();
        let Ok(msg) = serde_json::from_str::<Incoming>(text) else {
            let why = "Invalid JSON: a frame is {\"event\",\"data\"}";
            return self.malformed(link, (costs.malformed, text.len()), why);
        };
        match msg.event.as_str() {
            "pusher:ping" => {
                if link.ping() {
                    link.send(&frames::event("pusher:pong", None, "{}"));
                }
            }
            "pusher:pong" => {}
            "pusher:subscribe" => self.subscribe(link, &msg.data, (costs.subscribe, text.len())),
            "pusher:signin" => {
                if link
                    .charge_account_frame(costs.subscribe, text.len())
                    .is_ok()
                {
                    let app = self.app.as_deref().expect("an open connection's app");
                    self.user.signin(link, app, &self.socket_id, &msg.data);
                }
            }
            "pusher:unsubscribe" => {
                if link
                    .charge_account_frame(costs.unsubscribe, text.len())
                    .is_ok()
                    && let Some(ch) = msg.data.get("channel").and_then(Value::as_str)
                {
                    self.hooks.cancel(ch);
                    if let Some(sub) = self.channels.take(ch) {
                        self.leave(&sub);
                    }
                }
            }
            e if e.starts_with("client-") => self.client_event(link, &msg, text.len()),
            _ => {
                let why = format!("Unknown event {:?}", msg.event);
                self.malformed(link, (costs.malformed, text.len()), &why);
            }
        }
    }

    /// A frame that is not Pusher's: charged, counted, answered.
    fn malformed(&self, link: &mut dyn Link, (units, bytes): (u32, usize), why: &str) {
        if link.charge_account_frame(units, bytes).is_ok() {
            self.refused(link, "bad_request");
            link.send(&frames::error(None, why));
        }
    }

    /// A refusal on this connection, counted under `layer="connection"` as
    /// a `/v1/ws` socket's (`bad_request`, `forbidden`, the caps).
    fn refused(&self, link: &mut dyn Link, reason: &'static str) {
        let account = self.app.as_deref().map_or("", |a| &a.account);
        Exceeded::new(Layer::Connection, reason, account)
            .conn(link.label())
            .emit(&self.node.metrics);
    }

    fn refuse_sub(&self, link: &mut dyn Link, channel: &str, kind: &str, error: &str, status: u16) {
        link.send(&frames::subscription_error(channel, kind, error, status));
    }

    fn subscribe(&mut self, link: &mut dyn Link, data: &Value, (units, bytes): (u32, usize)) {
        let channel = data.get("channel").and_then(Value::as_str).unwrap_or("");
        if let Err(r) = link.charge_account_frame(units, bytes) {
            let wait = r.retry_after.as_millis();
            let why = format!("subscribing too fast: retry in {wait} ms");
            return self.refuse_sub(link, channel, "LimitReached", &why, 429);
        }
        if let Some(id) = names::user_of(channel) {
            if !self.user.holds(id) {
                let why =
                    "#server-to-user- is the channel of the user this connection signed in as";
                return self.refuse_sub(link, channel, "AuthError", why, 403);
            }
        } else if !names::valid(channel) {
            let r = subscribe::invalid_name();
            self.refused(link, "bad_request");
            return self.refuse_sub(link, channel, r.kind, &r.error, r.status);
        }
        if self.repeated(link, channel) {
            return;
        }
        let limits = link.limits();
        // Subscribes a hook is asked about count: the cap holds meanwhile.
        let cap = subscription_cap(&limits, self.channels.len() + self.hooks.pending() + 1);
        if cap.is_over() {
            let over = "too_many_subscriptions";
            let e = Exceeded::new(Layer::Connection, over, &self.app().account);
            e.conn(link.label())
                .dry_run(cap.is_dry_run())
                .emit(&self.node.metrics);
        }
        if let Cap::Refused { max } = cap {
            let why = format!("a connection may hold at most {max} subscriptions");
            return self.refuse_sub(link, channel, "LimitReached", &why, 429);
        }
        let me = match subscribe::check(self.app(), &self.socket_id, channel, data) {
            Ok(me) => me,
            Err(r) => {
                self.refused(link, r.reason);
                return self.refuse_sub(link, channel, r.kind, &r.error, r.status);
            }
        };
        if let Some(Asked::Subscribe(me)) = self.ask(link, channel, Asked::Subscribe(me)) {
            self.join(link, channel, me);
        }
    }

    /// Pusher answers a repeated subscribe as a first one.
    fn repeated(&self, link: &mut dyn Link, channel: &str) -> bool {
        let held = self.channels.contains(channel);
        let ok = "pusher_internal:subscription_succeeded";
        held.then(|| link.send(&frames::event(ok, Some(channel), "{}")))
            .is_some()
    }

    /// Joins a subscription that passed its checks (and its hook).
    fn join(&mut self, link: &mut dyn Link, channel: &str, me: Option<ChannelData>) {
        if self.repeated(link, channel) {
            return;
        }
        let internal: Arc<str> = names::internal(&self.app().id, channel).into();
        let conn = self.node.next_conn();
        let sink = PusherSink::new(conn, internal.clone(), self.socket_id.clone(), &*link);
        let sub = Subscriber {
            conn,
            sink: Sink::Render(sink.clone()),
            gauge: link.gauge(),
        };
        let members = me.map(|me| PusherMembers::new(channel, me, sink.clone()));
        let rule = presence::rule(self.app());
        let presence = members.as_ref().map(|m| {
            let member = m.member(&self.socket_id);
            self.node.presence.join(&internal, rule, member, m.clone())
        });
        let hub = self.node.broker.subscribe(&internal, sub, None);
        let entry = Sub {
            sink: sink.clone(),
            members,
        };
        self.channels.replace(entry);
        // The hub's answer goes on to the sink, which holds what arrives
        // until `subscription_succeeded` is queued (`succeed`).
        match (hub, presence) {
            (Pending::Ready(j), None) => self.joined(link, Joined(channel.into(), sink, j, Ok(()))),
            (Pending::Ready(j), Some(Joining::Ready(r))) => {
                self.joined(link, Joined(channel.into(), sink, j, r))
            }
            (hub, presence) => {
                let channel = channel.to_owned();
                link.spawn(Box::pin(async move {
                    let joined = hub.wait().await;
                    let r = match presence {
                        Some(p) => p.wait().await,
                        None => Ok(()),
                    };
                    Box::new(Joined(channel, sink, joined, r)) as Box<dyn Any>
                }))
            }
        }
    }

    fn joined(&mut self, link: &mut dyn Link, Joined(channel, sink, joined, presence): Joined) {
        // Unsubscribed (and perhaps subscribed again) meanwhile.
        let ours = self.channels.get(channel.as_str());
        if !ours.is_some_and(|s| Arc::ptr_eq(&s.sink, &sink)) {
            return;
        }
        if presence.is_err() {
            if let Some(sub) = self.channels.take(channel.as_str()) {
                self.leave(&sub);
            }
            self.refused(link, "presence_full");
            return self.refuse_sub(link, &channel, "LimitReached", "presence_full", 403);
        }
        if !names::is_cache(&channel) {
            return self.succeed(link, &channel, &sink, joined, None);
        }
        // The last event, read once the subscription is live: what is
        // published from here on waits in the sink behind it.
        match self.node.broker.read_channel(&sink.channel, 1, 0) {
            Pending::Ready(read) => self.succeed(link, &channel, &sink, joined, Some(read)),
            Pending::Later(read) => link.spawn(Box::pin(async move {
                Box::new(Cached(channel, sink, joined, read.await)) as Box<dyn Any>
            })),
        }
    }

    /// `subscription_succeeded`, then on a cache channel its last event or
    /// `pusher:cache_miss` (and the app's `cache_miss` webhook), then what
    /// the channel published meanwhile (the sink goes live with `joined`,
    /// the hub's answer to the join).
    fn succeed(
        &mut self,
        link: &mut dyn Link,
        channel: &str,
        sink: &Arc<PusherSink>,
        joined: hub::Joined,
        cached: Option<ChannelRead>,
    ) {
        // Unsubscribed (and perhaps subscribed again) meanwhile.
        let Some(sub) = self
            .channels
            .get(channel)
            .filter(|s| Arc::ptr_eq(&s.sink, sink))
        else {
            return;
        };
        let data = sub.members.as_ref().and_then(|m| m.succeeded());
        link.send(&frames::event(
            "pusher_internal:subscription_succeeded",
            Some(channel),
            data.as_deref().unwrap_or("{}"),
        ));
        let Some(mut read) = cached else {
            return sink.go_live(joined);
        };
        if sink.go_live_cached(joined, read.held.pop()) == Replay::Miss {
            link.send(&frames::event("pusher:cache_miss", Some(channel), "{}"));
            let id = &*self.socket_id;
            self.node.webhooks.pusher_event(
                &sink.channel,
                CACHE_MISS,
                || json!({"name": CACHE_MISS, "channel": channel, "socket_id": id}),
            );
        }
    }

    fn leave(&self, sub: &Sub) {
        sub.leave(&self.node, &self.socket_id);
    }

    /// `client-*` on a private or presence channel this socket holds, when
    /// the app allows them; never echoed to the sender.
    fn client_event(&mut self, link: &mut dyn Link, msg: &Incoming, bytes: usize) {
        let channel = msg.channel.as_deref().unwrap_or("");
        let data = frames::data_string(&msg.data);
        let costs = link.limits().costs.clone();
        let units = crate::pricing::publish(&costs, data.len(), 0);
        if let Err(r) = link.charge_account_frame(units, bytes) {
            let wait = r.retry_after.as_millis();
            return self.notices.send(
                link,
                &format!("client event rejected: over the rate limit, retry in {wait} ms"),
            );
        }
        let held = self.channels.contains(channel);
        if let Err(r) = client_event::check(self.app(), held, channel) {
            self.refused(link, "forbidden");
            return match r {
                Refused::Notice(why) => self.notices.send(link, why),
                Refused::Error(why) => link.send(&frames::error(None, &why)),
            };
        }
        let asked = Asked::ClientEvent {
            event: msg.event.clone(),
            data: msg.data.clone(),
        };
        if let Some(Asked::ClientEvent { event, data }) = self.ask(link, channel, asked) {
            self.fan_out(link, channel, &event, &data);
        }
    }

    /// A client event to the channel's other subscribers; dropped if
    /// unsubscribed meanwhile.
    fn fan_out(&mut self, link: &mut dyn Link, channel: &str, event: &str, data: &Value) {
        if let Some(sub) = self.channels.get(channel) {
            let (node, tally) = (&*self.node, self.tally.as_deref());
            client_event::send_on(
                (link, node, tally),
                (sub, channel, &self.socket_id),
                event,
                data,
            );
        }
    }
}

impl Dialect for PusherWs {
    fn opened(&mut self, link: &mut dyn Link) {
        if let Some((code, message)) = self.refusal.take().map(|r| *r) {
            return opening::refuse(&self.node, self.app.as_deref(), link, code, &message);
        }
        self.tally = self.node.metrics.pusher.app(&self.app().id);
        if let Some(t) = &self.tally {
            t.connection(true);
        }
        let config = self.node.config.load();
        self.socket_id = names::socket_id(&config.node.id, link.conn()).into();
        let app = self.app.clone().expect("an open connection's app");
        link.send(&frames::connection_established(
            &self.socket_id,
            app.activity_timeout_s,
        ));
        self.clock.start(link, &app);
        self.user.opened(link, &app);
    }

    fn text(&mut self, link: &mut dyn Link, text: &str) {
        self.clock.heard();
        self.frame(link, text);
    }

    fn binary(&mut self, link: &mut dyn Link, _len: usize) {
        link.send(&frames::error(
            None,
            "binary frames are not part of the protocol",
        ));
    }

    fn done(&mut self, link: &mut dyn Link, output: Box<dyn Any>) {
        let output = match output.downcast::<Joined>() {
            Ok(j) => return self.joined(link, *j),
            Err(other) => other,
        };
        let output = match output.downcast::<Cached>() {
            Ok(c) => return self.succeed(link, &c.0, &c.1, c.2, Some(c.3)),
            Err(other) => other,
        };
        let output = match self.hooks.done(output) {
            Ok(ready) => return ready.into_iter().for_each(|r| self.hooked(link, r)),
            Err(other) => other,
        };
        let Some(app) = self.app.clone() else { return };
        let output = match self.user.done(link, &app, output) {
            Ok(()) => return,
            Err(other) => other,
        };
        if output.is::<Activity>() {
            self.clock.tick(link, &app);
        } else if output.is::<PongDue>() {
            self.clock.pong_due(link, &self.node, &app);
        }
    }

    fn admitted(&mut self, _link: &mut dyn Link, _verdict: Result<(), Refusal>) {}

    fn drained(&mut self, _link: &mut dyn Link, _dropped: u64) {}

    fn stopping(&mut self, _node: &Node) {
        if let Some(t) = self.tally.take() {
            t.connection(false);
        }
        for sub in std::mem::take(&mut self.channels) {
            self.leave(&sub);
        }
        // Its count toward `user_max_connections` is given back.
        self.user = User::default();
    }

    /// In Pusher's words (`frames::close_code`).
    fn close_code(&self, c: CloseCode) -> u16 {
        frames::close_code(c)
    }

    fn transport(&self) -> &'static str {
        "pusher"
    }
}
