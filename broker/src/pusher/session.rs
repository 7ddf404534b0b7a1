//! One `/app/{key}` connection: Pusher's protocol as a dialect of the
//! socket machinery (`node/dialect.rs`).
//!
//! Every client frame is charged to the connection's frame bucket before it
//! is read further (`pusher:ping` to its ping bucket, like a WebSocket
//! ping): a client event over it is dropped and answered `pusher:error`
//! 4301 at most once a second, a subscription over it is refused with
//! status 429; the connection stays open. The activity clock
//! (`activity.rs`) pings a silent client and closes 4201 when the pong does
//! not come; the user a `pusher:signin` names is `user.rs`'s.

use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_http::RequestHead;
use serde_json::{Value, json};

use super::activity::{Activity, Clock, PongDue};
use super::client_event::{self, ClientEvent};
use super::frames::{self, Incoming, code};
use super::names::{self, Kind};
use super::opening;
use super::presence::{self, PusherMembers};
use super::sink::{PusherSink, Replay};
use super::subscribe::{self, Sub};
use super::user::User;
use crate::admission::{Cap, subscription_cap};
use crate::cluster::{ChannelRead, Pending};
use crate::config::PusherApp;
use crate::exceeded::Exceeded;
use crate::hub::{Sink, Subscriber};
use crate::metrics::Layer;
use crate::metrics::pusher::AppTally;
use crate::node::Node;
use crate::node::dialect::{Dialect, Link, Refusal};
use crate::presence::{Full, Pending as Joining};
use crate::protocol::CloseCode;
use crate::webhook::event::CACHE_MISS;

/// At most one `pusher:error` 4301 a second (§3's `rate_limited`).
const NOTICE_INTERVAL: Duration = Duration::from_secs(1);

pub(super) fn open(node: &Arc<Node>, head: &RequestHead) -> Box<dyn Dialect> {
    let key = head.uri.path().strip_prefix(super::WS_PREFIX).unwrap_or("");
    let app = super::app_by_key(node, key);
    let refusal = opening::refusal(app.is_some(), key, head.uri.query().unwrap_or(""));
    Box::new(PusherWs {
        node: node.clone(),
        app,
        refusal,
        socket_id: Arc::from(""),
        channels: HashMap::new(),
        clock: Clock::new(),
        last_notice: None,
        tally: None,
        user: User::default(),
    })
}

struct PusherWs {
    node: Arc<Node>,
    /// `None`: the key named no app (closed 4001 once open).
    app: Option<Arc<PusherApp>>,
    /// Why the connection is closed as soon as it opens.
    refusal: Option<(u16, String)>,
    socket_id: Arc<str>,
    /// By Pusher name. Bounded by the plan's `max_subscriptions`: a
    /// subscribe past it is refused.
    channels: HashMap<String, Sub>,
    clock: Clock,
    /// When the last `pusher:error` 4301 went out.
    last_notice: Option<Instant>,
    /// The app's figures (`metrics/pusher.rs`), held from the open to the
    /// close so the connection is counted exactly once each way.
    tally: Option<Arc<AppTally>>,
    /// Signed in or not (`pusher:signin`).
    user: User,
}

/// A cache channel's last event was read.
struct Cached(String, Arc<PusherSink>, ChannelRead);
/// A subscription's join was answered (and its presence join, refused
/// when the channel is full).
struct Joined(String, Arc<PusherSink>, Result<(), Full>);

impl PusherWs {
    fn app(&self) -> &PusherApp {
        self.app
            .as_deref()
            .expect("a refused connection reads no frame")
    }

    /// A frame the connection's bucket refused: a client event is dropped
    /// with at most one `pusher:error` 4301 a second.
    fn notice(&mut self, link: &mut dyn Link, message: &str) {
        let now = Instant::now();
        if self
            .last_notice
            .is_some_and(|t| now.duration_since(t) < NOTICE_INTERVAL)
        {
            return;
        }
        self.last_notice = Some(now);
        link.send(&frames::error(Some(code::CLIENT_EVENT_REJECTED), message));
    }

    fn frame(&mut self, link: &mut dyn Link, text: &str) {
        let costs = link.limits().costs.clone();
        let Ok(msg) = serde_json::from_str::<Incoming>(text) else {
            if link
                .charge_account_frame(costs.malformed, text.len())
                .is_ok()
            {
                self.refused(link, "bad_request");
                link.send(&frames::error(
                    None,
                    "Invalid JSON: a frame is {\"event\",\"data\"}",
                ));
            }
            return;
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
                    let app = self
                        .app
                        .clone()
                        .expect("a refused connection reads no frame");
                    self.user.signin(link, &app, &self.socket_id, &msg.data);
                }
            }
            "pusher:unsubscribe" => {
                if link
                    .charge_account_frame(costs.unsubscribe, text.len())
                    .is_ok()
                    && let Some(ch) = msg.data.get("channel").and_then(Value::as_str)
                    && let Some(sub) = self.channels.remove(ch)
                {
                    self.leave(&sub);
                }
            }
            e if e.starts_with("client-") => self.client_event(link, &msg, text.len()),
            _ => {
                if link
                    .charge_account_frame(costs.malformed, text.len())
                    .is_ok()
                {
                    self.refused(link, "bad_request");
                    link.send(&frames::error(
                        None,
                        &format!("Unknown event {:?}", msg.event),
                    ));
                }
            }
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
        if self.channels.contains_key(channel) {
            // Pusher answers a repeated subscribe as a first one.
            link.send(&frames::event(
                "pusher_internal:subscription_succeeded",
                Some(channel),
                "{}",
            ));
            return;
        }
        let limits = link.limits();
        let cap = subscription_cap(&limits, self.channels.len() + 1);
        if cap.is_over() {
            Exceeded::new(
                Layer::Connection,
                "too_many_subscriptions",
                &self.app().account,
            )
            .conn(link.label())
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
        let internal: Arc<str> = names::internal(&self.app().id, channel).into();
        let conn = self.node.next_conn();
        let sink = PusherSink::new(
            conn,
            internal.clone(),
            self.socket_id.clone(),
            link.outlet(),
        );
        let sub = Subscriber {
            conn,
            sink: Sink::Socket(sink.clone()),
            gauge: link.gauge(),
        };
        let members = me.map(|me| PusherMembers::new(channel, me, sink.clone()));
        let rule = presence::rule(self.app());
        let presence = members.as_ref().map(|m| {
            let member = m.member(&self.socket_id);
            self.node.presence.join(&internal, rule, member, m.clone())
        });
        let hub = self.node.bridge.subscribe(&internal, sub, None);
        let entry = Sub {
            sink: sink.clone(),
            members,
        };
        self.channels.insert(channel.to_owned(), entry);
        match (hub, presence) {
            (Pending::Ready(_), None) => self.joined(link, channel.to_owned(), &sink, Ok(())),
            (Pending::Ready(_), Some(Joining::Ready(r))) => {
                self.joined(link, channel.to_owned(), &sink, r)
            }
            (hub, presence) => {
                let channel = channel.to_owned();
                link.spawn(Box::pin(async move {
                    if let Pending::Later(f) = hub {
                        f.await;
                    }
                    let r = match presence {
                        Some(p) => p.wait().await,
                        None => Ok(()),
                    };
                    Box::new(Joined(channel, sink, r)) as Box<dyn Any>
                }))
            }
        }
    }

    fn joined(
        &mut self,
        link: &mut dyn Link,
        channel: String,
        sink: &Arc<PusherSink>,
        presence: Result<(), Full>,
    ) {
        // Unsubscribed (and perhaps subscribed again) meanwhile.
        let ours = self.channels.get(&channel);
        if !ours.is_some_and(|s| Arc::ptr_eq(&s.sink, sink)) {
            return;
        }
        if presence.is_err() {
            if let Some(sub) = self.channels.remove(&channel) {
                self.leave(&sub);
            }
            self.refused(link, "presence_full");
            return self.refuse_sub(link, &channel, "LimitReached", "presence_full", 403);
        }
        if !names::is_cache(&channel) {
            return self.succeed(link, &channel, sink, None);
        }
        // The last event, read once the subscription is live: what is
        // published from here on waits in the sink behind it.
        match self.node.bridge.read_channel(&sink.channel, 1, 0) {
            Pending::Ready(read) => self.succeed(link, &channel, sink, Some(read)),
            Pending::Later(read) => {
                let sink = sink.clone();
                link.spawn(Box::pin(async move {
                    Box::new(Cached(channel, sink, read.await)) as Box<dyn Any>
                }))
            }
        }
    }

    /// `subscription_succeeded`, then on a cache channel its last event or
    /// `pusher:cache_miss` (and the app's `cache_miss` webhook), then what
    /// the channel published meanwhile.
    fn succeed(
        &mut self,
        link: &mut dyn Link,
        channel: &str,
        sink: &Arc<PusherSink>,
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
            return sink.go_live();
        };
        if sink.go_live_cached(read.held.pop()) == Replay::Miss {
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
            return self.notice(
                link,
                &format!("client event rejected: over the rate limit, retry in {wait} ms"),
            );
        }
        if !self.app().client_events {
            self.refused(link, "forbidden");
            return self.notice(link, "client events are disabled for this app");
        }
        let Some(sub) = self.channels.get(channel) else {
            self.refused(link, "forbidden");
            return link.send(&frames::error(
                None,
                &format!("client event on {channel:?}, which this socket is not subscribed to"),
            ));
        };
        if !matches!(
            names::kind(channel),
            Kind::Private | Kind::Encrypted | Kind::Presence
        ) {
            self.refused(link, "forbidden");
            return link.send(&frames::error(
                None,
                "client events are only for private and presence channels",
            ));
        }
        let event = ClientEvent {
            event: &msg.event,
            channel,
            internal: &sub.sink.channel,
            data: &data,
            socket_id: &self.socket_id,
            user: sub.members.as_ref().map(|m| &*m.me.user_id),
        };
        let tally = self.tally.as_deref();
        if let Pending::Later(f) = client_event::publish(&self.node, tally, &event) {
            link.spawn(Box::pin(async move {
                f.await;
                Box::new(()) as Box<dyn Any>
            }));
        }
    }
}

impl Dialect for PusherWs {
    fn opened(&mut self, link: &mut dyn Link) {
        if let Some((code, message)) = self.refusal.take() {
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
            Ok(j) => return self.joined(link, j.0, &j.1, j.2),
            Err(other) => other,
        };
        let output = match output.downcast::<Cached>() {
            Ok(c) => return self.succeed(link, &c.0, &c.1, Some(c.2)),
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
        for (_, sub) in std::mem::take(&mut self.channels) {
            self.leave(&sub);
        }
        // Its count toward `user_max_connections` is given back.
        self.user = User::default();
    }

    /// pusher-js retries 41xx after a backoff and 42xx at once; it never
    /// reconnects on 4000–4099. A slow reader, an operator's close and the
    /// account's budget are 4100 (never 4200: an immediate reconnect of
    /// every abusive connection would be a storm); the drain is 4200
    /// (reconnect, to another node).
    fn close_code(&self, c: CloseCode) -> u16 {
        match c {
            CloseCode::GoingAway | CloseCode::ServiceRestart => code::RECONNECT,
            CloseCode::InvalidUtf8 | CloseCode::MessageTooBig | CloseCode::ProtocolError => {
                c.code()
            }
            _ => code::OVER_CAPACITY,
        }
    }

    fn transport(&self) -> &'static str {
        "pusher"
    }
}
