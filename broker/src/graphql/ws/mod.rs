//! `graphql-transport-ws` on `/v1/graphql` (§12): the socket machinery
//! (`socket`, through `dialect`) with this protocol on top. The
//! protocol's rules are the state machine in `graphql/transport_ws.rs`;
//! this file drives it: the credential from `connection_init` (or the
//! upgrade's `Authorization`), then the §1 layers after it
//! ([`Link::admit`]); each `subscribe` charged one unit of the
//! connection's frame bucket, held to the subscription cap, then priced,
//! charged and run as over HTTP (`over_http::run`); a `messages`
//! subscription then lives in the hub as its own subscriber
//! ([`sink::OpSink`]) whose messages become `next` messages without the
//! executor ([`shape::Shape`]); a `presence` subscription watches its
//! channel's presence windows (`presence.rs`).
//!
//! Refusals of one operation are an `error` message for its id
//! (`RATE_LIMITED`, `QUERY_TOO_EXPENSIVE`, `FORBIDDEN`,
//! `TOO_MANY_SUBSCRIPTIONS`); the socket stays open. A token's operation
//! refused by the account budget closes the account's sockets with 1008,
//! as on `/v1/ws`.

mod presence;
mod recovery;
mod refuse;
mod shape;
mod sink;

use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use actix_web::http::StatusCode;
use async_graphql_value::Variables;

use super::admission::Start;
use super::caller::{Caller, Payer};
use super::operation::{self, Ran, Via};
use super::reply::Media;
use super::request::Params;
use super::transport_ws::{Action, INIT_TIMEOUT, SUBPROTOCOL, Session, SubscribePayload, message};
use crate::admission::{Cap, refusal_units, subscription_cap};
use crate::cluster::Pending;
use crate::dialect::{Dialect, Link, Refusal, Route};
use crate::exceeded::Exceeded;
use crate::hub::{Joined, Sink, Subscriber};
use crate::metrics::Layer;
use crate::node::Node;
use crate::protocol::{CloseCode, ErrorCode};
use refuse::{close_reason, error_payload, refusal};
use sink::OpSink;

/// `/v1/graphql` upgraded with `graphql-transport-ws`.
pub const ROUTE: Route = Route {
    path: super::PATH,
    prefix: false,
    subprotocol: Some(SUBPROTOCOL),
    credential: |_, _| None,
    open,
    refusal,
};

fn open(node: &Arc<Node>, head: &actix_http::RequestHead) -> Box<dyn Dialect> {
    let authorization = crate::dialect::authorization(head);
    Box::new(GraphqlWs {
        node: node.clone(),
        session: Session::new(Instant::now()),
        upgrade: authorization.map(str::to_owned),
        caller: None,
        ops: HashMap::new(),
        runs: 0,
    })
}

/// An operation of this connection, by id. Bounded by the plan's
/// `max_subscriptions`: a `subscribe` past it is refused.
enum Op {
    /// Being priced, charged and run: its run's number, so the answer of
    /// an earlier run under the same id (completed by the client, then
    /// the id sent again) is not taken for this one's.
    Running(u64),
    /// A `messages` subscription in the hub.
    Live(Arc<OpSink>),
    /// A `presence` subscription watching its channel.
    Presence(Arc<presence::PresenceOp>),
}

struct GraphqlWs {
    node: Arc<Node>,
    session: Session,
    /// The upgrade's `Authorization` header, used when `connection_init`
    /// names no credential.
    upgrade: Option<String>,
    /// Set once the credential is admitted.
    caller: Option<Caller>,
    ops: HashMap<String, Op>,
    /// Operations started on this connection: each run's number.
    runs: u64,
}

/// The `connection_init` deadline passed.
struct InitTimer;

/// An operation ran.
struct Finished {
    id: String,
    /// Its run's number ([`Op::Running`]).
    run: u64,
    ran: Ran,
    params: (String, Option<String>, Variables),
}

/// A subscription's join answered (in a cluster: delivery from every node
/// is live and the history after `since` read).
struct JoinedOp {
    id: String,
    conn: u64,
    joined: Joined,
}

impl GraphqlWs {
    fn act(&mut self, link: &mut dyn Link, action: Action) {
        match action {
            // The state machine's only unsolicited `Send` is a `pong`:
            // bounded by the ping bucket, the excess ignored.
            Action::Send(pong) => {
                if link.ping() {
                    link.send(&pong);
                }
            }
            Action::Close { code, reason } => self.close(link, code, &reason),
            Action::Authenticate { payload } => self.authenticate(link, payload),
            Action::Start { id, payload } => self.start(link, id, payload),
            Action::Stop { id } => self.stop(&id),
        }
    }

    fn close(&mut self, link: &mut dyn Link, code: u16, reason: &str) {
        let account = self.caller.as_ref().map_or("", |c| c.account.as_str());
        Exceeded::new(Layer::Graphql, close_reason(code), account)
            .conn(link.label())
            .emit(&self.node.metrics);
        link.close(code, reason);
    }

    /// `connection_init`: the payload's `authorization`, else the
    /// upgrade's; verified (a token's signature and plan, or an API key),
    /// then the socket's §1 layers after the credential.
    fn authenticate(&mut self, link: &mut dyn Link, payload: Option<serde_json::Value>) {
        let credential = payload
            .as_ref()
            .and_then(|p| p.get("authorization"))
            .and_then(|v| v.as_str())
            .map(str::to_owned)
            .or_else(|| self.upgrade.clone());
        match Caller::identify(&self.node, credential.as_deref()) {
            Ok(mut caller) => {
                caller.origin = Some(super::caller::Origin {
                    conn_id: link.label().into(),
                    ip: link.ip(),
                    transport: "graphql-ws",
                });
                let who = caller.who();
                self.caller = Some(caller);
                link.admit(who);
            }
            Err(e) => {
                Exceeded::new(Layer::Handshake, ErrorCode::Unauthorized.as_str(), "")
                    .conn(link.label())
                    .emit(&self.node.metrics);
                let _ = self.session.credential(false);
                link.close(
                    super::transport_ws::close::FORBIDDEN,
                    &format!("Forbidden: {e}"),
                );
            }
        }
    }

    fn send_error(&mut self, link: &mut dyn Link, id: &str, payload: &str) {
        link.send(&message("error", Some(id), Some(payload)));
        self.finish(id);
    }

    /// The operation ended (its `complete` or `error` is queued).
    fn finish(&mut self, id: &str) {
        self.ops.remove(id);
        self.session.finished(id);
    }

    /// A `subscribe`: the frame bucket, the cap, then priced, charged and
    /// run as over HTTP, on the connection's worker. Over the cap it costs
    /// a refusal's price (`admission::refusal_units`), not a subscription.
    fn start(&mut self, link: &mut dyn Link, id: String, payload: SubscribePayload) {
        let limits = link.limits();
        let cap = subscription_cap(&limits, self.ops.len() + 1);
        // A socket's `subscribe` frame's price (`recovery` is added below).
        let units = match cap {
            Cap::Refused { .. } => refusal_units(&limits.costs, ErrorCode::TooManySubscriptions),
            _ => crate::pricing::subscribe(&limits.costs, false),
        };
        if let Err(r) = link.charge_frame(units) {
            return self.send_error(link, &id, &refuse::frame(units, &r));
        }
        if cap.is_over() {
            let account = self.caller.as_ref().map_or("", |c| c.account.as_str());
            Exceeded::new(Layer::Graphql, "too_many_subscriptions", account)
                .conn(link.label())
                .dry_run(cap.is_dry_run())
                .emit(&self.node.metrics);
            if let Cap::Refused { max } = cap {
                let p = error_payload(
                    "TOO_MANY_SUBSCRIPTIONS",
                    &format!("a connection may run at most {max} operations at once"),
                    serde_json::json!({ "max": max }),
                );
                return self.send_error(link, &id, &p);
            }
        }
        let Some(caller) = self.caller.clone() else {
            // The state machine starts nothing before the ack.
            return self.close(
                link,
                super::transport_ws::close::UNAUTHORIZED,
                "Unauthorized",
            );
        };
        let variables = Variables::from_json(serde_json::Value::Object(
            payload.variables.unwrap_or_default(),
        ));
        let kept = (
            payload.query.clone(),
            payload.operation_name.clone(),
            variables.clone(),
        );
        let params = Params {
            query: payload.query,
            operation_name: payload.operation_name,
            variables,
        };
        self.runs += 1;
        let run = self.runs;
        self.ops.insert(id.clone(), Op::Running(run));
        let node = self.node.clone();
        link.spawn(Box::pin(async move {
            let started = Instant::now();
            let ran = operation::run(&node, caller, Media::Json, params, Via::Socket).await;
            node.metrics.graphql_done(ran.operation, started);
            Box::new(Finished {
                id,
                run,
                ran,
                params: kept,
            }) as Box<dyn Any>
        }));
    }

    /// The client completed `id`.
    fn stop(&mut self, id: &str) {
        if let Some(op) = self.ops.remove(id) {
            self.end(&op);
        }
    }

    /// Ends a live operation: nothing more is queued for it.
    fn end(&self, op: &Op) {
        match op {
            Op::Running(_) => {}
            Op::Live(sink) => {
                sink.end();
                self.node.broker.unsubscribe(&sink.channel, sink.conn);
            }
            Op::Presence(p) => {
                p.end();
                self.node.presence.unwatch(&p.channel, &p.key);
            }
        }
    }

    fn finished(&mut self, link: &mut dyn Link, f: Finished) {
        let Finished {
            id,
            run,
            ran,
            params,
        } = f;
        if !matches!(self.ops.get(&id), Some(Op::Running(r)) if *r == run) {
            // Completed by the client meanwhile (and perhaps started
            // again under the same id: that run answers for itself).
            return;
        }
        let reply = &ran.reply;
        if reply.status == StatusCode::TOO_MANY_REQUESTS
            && let Some(c) = &self.caller
            && matches!(c.payer, Payer::Account)
        {
            // A token's account budget is exhausted: every socket of the
            // account closes with 1008, here and on every node (§12).
            let account = c.account.clone();
            self.send_error(link, &id, &reply.errors_json());
            self.node.accounts.breach(&account);
            self.node.limiter_store.announce_breach(&account);
            return;
        }
        match ran.subscribe.clone() {
            Some(Start::Messages { channel, since }) => {
                self.subscribe(link, id, &channel, since, &ran, params)
            }
            Some(Start::Presence { channel, rule }) => {
                self.watch(link, id, (&channel, rule), &ran, params)
            }
            Some(Start::Disconnect { code, reason }) => link.close(code, &reason),
            // A subscription that did not start: its errors came before the
            // stream (the resolver refused), an `error` message.
            None if reply.data.is_some() && ran.operation != "subscription" => {
                let body = reply.body().unwrap_or_default();
                link.send(&message(
                    "next",
                    Some(&id),
                    Some(&String::from_utf8_lossy(&body)),
                ));
                link.send(&message("complete", Some(&id), None));
                self.finish(&id);
            }
            None => self.send_error(link, &id, &reply.errors_json()),
        }
    }

    /// A `messages` subscription that passed its charge and resolver: into
    /// the hub, recovering after `since`.
    fn subscribe(
        &mut self,
        link: &mut dyn Link,
        id: String,
        channel: &str,
        since: Option<u64>,
        ran: &Ran,
        (query, name, variables): (String, Option<String>, Variables),
    ) {
        let Ok(doc) = super::documents::parse(&query) else {
            return self.send_error(link, &id, &ran.reply.errors_json());
        };
        let Some(op) = super::pricing::operation(&doc, name.as_deref()) else {
            return self.send_error(link, &id, &ran.reply.errors_json());
        };
        if since.is_some() {
            // A subscription from a position costs `recovery` besides, as a
            // socket's `subscribe` with `since` does; known only now, and
            // the operation is paid for already, so it is owed, not refused
            // (the connection's next frames wait), unless the two together
            // are over `max_single`, which no wait can help.
            let limits = link.limits();
            let account = self.caller.as_ref().map_or("", |c| c.account.as_str());
            let counted = (Layer::Graphql, account, &*self.node.metrics);
            if let Err(r) = crate::charge::subscribe::price_counted(&limits, channel, true, counted)
            {
                let cost = crate::pricing::subscribe(&limits.costs, true);
                let p = refuse::too_expensive(&r.message, cost, limits.costs.max_single);
                return self.send_error(link, &id, &p);
            }
            link.owe_frame(limits.costs.recovery);
        }
        let shape = shape::Shape::compile(&doc, &op.node, &variables, &id, channel);
        let conn = self.node.next_conn();
        let sink = OpSink::new(
            conn,
            channel,
            shape,
            link.outlet(),
            ran.reply.extensions_json(),
        );
        let sub = Subscriber {
            conn,
            sink: Sink::Socket(sink.clone()),
            gauge: link.gauge(),
        };
        self.ops.insert(id.clone(), Op::Live(sink.clone()));
        match self.node.broker.subscribe(channel, sub, since) {
            Pending::Ready(joined) => self.joined(link, id, conn, joined),
            Pending::Later(f) => link.spawn(Box::pin(async move {
                Box::new(JoinedOp {
                    id,
                    conn,
                    joined: f.await,
                }) as Box<dyn Any>
            })),
        }
    }
}

impl Dialect for GraphqlWs {
    fn opened(&mut self, link: &mut dyn Link) {
        link.spawn(Box::pin(async {
            actix_rt::time::sleep(INIT_TIMEOUT).await;
            Box::new(InitTimer) as Box<dyn Any>
        }));
    }

    fn text(&mut self, link: &mut dyn Link, text: &str) {
        for action in self.session.receive(text) {
            self.act(link, action);
        }
    }

    fn binary(&mut self, link: &mut dyn Link, _len: usize) {
        // Not one of the protocol's messages (they are JSON text).
        if !self.session.is_closed() {
            let _ = self.session.receive("");
            self.close(
                link,
                super::transport_ws::close::INVALID_MESSAGE,
                "Invalid message received: binary",
            );
        }
    }

    fn done(&mut self, link: &mut dyn Link, output: Box<dyn Any>) {
        let output = match output.downcast::<Finished>() {
            Ok(f) => return self.finished(link, *f),
            Err(other) => other,
        };
        let output = match output.downcast::<JoinedOp>() {
            Ok(j) => return self.joined(link, j.id, j.conn, j.joined),
            Err(other) => other,
        };
        let output = match output.downcast::<recovery::Paid>() {
            Ok(p) => return self.paid(link, *p),
            Err(other) => other,
        };
        if output.is::<InitTimer>()
            && let Some(action) = self.session.tick(Instant::now())
        {
            self.act(link, action);
        }
    }

    fn admitted(&mut self, link: &mut dyn Link, verdict: Result<(), Refusal>) {
        match verdict {
            Ok(()) => {
                if let Action::Send(ack) = self.session.credential(true) {
                    link.send(&ack);
                }
            }
            Err(r) => {
                let _ = self.session.credential(false);
                self.caller = None;
                let code = match r.code {
                    ErrorCode::TooManyConnections => CloseCode::ConnectionCap.code(),
                    ErrorCode::HandshakeRateLimited => CloseCode::TryAgainLater.code(),
                    _ => super::transport_ws::close::FORBIDDEN,
                };
                link.close(code, &format!("{}: {}", r.code, r.message));
            }
        }
    }

    fn drained(&mut self, link: &mut dyn Link, _dropped: u64) {
        let broken: Vec<String> = self
            .ops
            .iter()
            .filter_map(|(id, op)| match op {
                Op::Live(sink) if sink.broken() => Some(id.clone()),
                Op::Presence(p) if p.broken() => Some(id.clone()),
                _ => None,
            })
            .collect();
        for id in broken {
            let sink = match self.ops.remove(&id) {
                Some(Op::Live(sink)) => sink,
                Some(Op::Presence(p)) => {
                    let dropped = p.end();
                    self.node.presence.unwatch(&p.channel, &p.key);
                    let msg = error_payload(
                        "SLOW_CONSUMER",
                        "presence diffs of this subscription were dropped because the \
                         connection was not reading; subscribe again for the members as they \
                         stand",
                        serde_json::json!({ "dropped": dropped }),
                    );
                    self.send_error(link, &id, &msg);
                    continue;
                }
                _ => continue,
            };
            let ended = sink.end();
            self.node.broker.unsubscribe(&sink.channel, sink.conn);
            let p = error_payload(
                "SLOW_CONSUMER",
                "messages of this subscription were dropped because the connection was not \
                 reading; subscribe again with since: lastSeq",
                serde_json::json!({"dropped": ended.dropped, "lastSeq": ended.last_seq}),
            );
            self.send_error(link, &id, &p);
        }
    }

    fn stopping(&mut self, _node: &Node) {
        for (_, op) in std::mem::take(&mut self.ops) {
            self.end(&op);
        }
    }
}
