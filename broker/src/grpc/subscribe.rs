//! `Subscribe`: a socket's subscription for backend consumers (§2, §3).
//! The ack of each channel first, then its recovered messages (`since`),
//! then live ones, each `seq` once and in order; a consumer that stops
//! reading is a slow consumer with the socket's high-water mark and grace.
//!
//! The stream is the hub's subscriber: the hub reserves each message's
//! bytes in the stream's [`OutboundGauge`] and drops past the mark; the
//! bytes are released when tonic takes the message for the wire (after
//! that, HTTP/2 flow control bounds what waits: one window per stream).
//! A guard task does what must happen even while tonic is not polling the
//! stream: it ends it past the grace (leaving the hub at once, so a dead
//! consumer costs nothing more) and at its moment of the drain.

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::net::IpAddr;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_stream::Stream;
use tonic::Status;

use super::drain::drained;
use super::operator::{self, Kicks, Whose};
use super::proto::subscribe_event::Event;
use super::proto::{SlowConsumer, SubscribeAck, SubscribeEvent, SubscribeRequest};
use super::service::{BrokerService, Caller, OpenStream};
use super::status;
use super::stream_sink::{Grpc, Queued, StreamSink, Subs, event};
use crate::admission::Cap;
use crate::charge::{Balance, KeyState, Payer, Refusal};
use crate::config::Limits;
use crate::exceeded::Exceeded;
use crate::hub::{OutboundGauge, PageRead, Pages, Sink, Subscriber};
use crate::metrics::Layer;
use crate::node::Node;
use crate::protocol::{ErrorCode, channel};
use crate::session::{Episode, Held, Next, OnLoss, Render, Subscription};

/// The stream's place in the hub, left exactly once (when the stream is
/// dropped, or by the guard past the grace).
struct Membership {
    node: Arc<Node>,
    conn: u64,
    channels: Mutex<Vec<String>>,
    left: AtomicBool,
}

impl Membership {
    fn leave(&self) {
        if self.left.swap(true, Ordering::AcqRel) {
            return;
        }
        self.node.grpc_streams.remove(&self.conn);
        for ch in self.channels.lock().drain(..) {
            self.node.broker.unsubscribe(&ch, self.conn);
        }
    }
}

/// What goes out before live messages: each channel's ack, then what its
/// subscription hands over as it recovers (its history, then the live
/// messages held while it joined and recovered), converted only as tonic
/// takes them, so a call over many channels does not hold a second copy
/// of every history.
enum Prelude {
    Ack(SubscribeEvent),
    Recovering(Arc<str>),
}

/// The events of one `Subscribe` call, as tonic sends them.
pub struct Events {
    prelude: VecDeque<Prelude>,
    /// The call's subscriptions (shared with its hub sink).
    subs: Subs,
    /// The page of recovered history being read from a cluster's history:
    /// one at a time per call, of at most half the stream's mark (plus one
    /// message), read only once tonic asks for the next event, so a
    /// consumer that stops reading holds at most that one page here.
    reading: Option<(Arc<dyn Pages>, PageRead)>,
    /// Live messages a subscription held while it joined and recovered,
    /// handed over as it went live: reserved in the gauge, sent after the
    /// prelude and before the live queue. At most what the gauge holds.
    held: VecDeque<Queued>,
    live: mpsc::UnboundedReceiver<Queued>,
    /// Set by the guard: the status that ends the stream.
    end: Option<oneshot::Receiver<Status>>,
    ended: bool,
    gauge: Arc<OutboundGauge>,
    membership: Arc<Membership>,
    guard: Option<JoinHandle<()>>,
    /// For the trailers: what the call was charged, and the balance then.
    charge: Balance,
    cost: u64,
    _open: OpenStream,
}

impl Drop for Events {
    fn drop(&mut self) {
        if let Some(g) = self.guard.take() {
            g.abort();
        }
        self.membership.leave();
    }
}

impl Stream for Events {
    type Item = Result<SubscribeEvent, Status>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.ended {
            return Poll::Ready(None);
        }
        if let Some(end) = this.end.as_mut()
            && let Poll::Ready(result) = Pin::new(end).poll(cx)
        {
            this.end = None;
            if let Ok(mut s) = result {
                this.ended = true;
                status::balance(s.metadata_mut(), &this.charge, this.cost);
                return Poll::Ready(Some(Err(s)));
            }
        }
        if let Some(ev) = std::task::ready!(this.poll_prelude(cx)) {
            return Poll::Ready(Some(Ok(ev)));
        }
        if let Some(dropped) = Episode::end(&this.gauge)
            && dropped > 0
        {
            let lost = SlowConsumer { dropped };
            return Poll::Ready(Some(Ok(event(Event::SlowConsumer(lost)))));
        }
        let q = match this.held.pop_front() {
            Some(q) => q,
            None => match std::task::ready!(this.live.poll_recv(cx)) {
                Some(q) => q,
                None => {
                    this.ended = true;
                    return Poll::Ready(None);
                }
            },
        };
        this.gauge.release(q.frame.len());
        Poll::Ready(Some(Ok(Grpc.render(&q.channel, q.seq, &q.frame))))
    }
}

impl Events {
    /// The next event of the prelude (`None`: it is all sent): an ack, a
    /// recovered message, or messages that left a cluster's history before
    /// their page was read, reported as dropped (`SlowConsumer`) where they
    /// were lost, after which the recovery continues in order.
    fn poll_prelude(&mut self, cx: &mut Context<'_>) -> Poll<Option<SubscribeEvent>> {
        loop {
            let channel = match self.prelude.front() {
                None => return Poll::Ready(None),
                Some(Prelude::Ack(_)) => {
                    if let Some(Prelude::Ack(ev)) = self.prelude.pop_front() {
                        return Poll::Ready(Some(ev));
                    }
                    continue;
                }
                Some(Prelude::Recovering(channel)) => channel.clone(),
            };
            if let Some((source, read)) = self.reading.as_mut() {
                let page = std::task::ready!(read.as_mut().poll(cx));
                let source = source.clone();
                self.reading = None;
                let lost = match self.subs.lock().get_mut(&channel) {
                    Some(sub) => sub.filled(&source, page).lost,
                    None => 0,
                };
                if lost > 0 {
                    let lost = SlowConsumer { dropped: lost };
                    return Poll::Ready(Some(event(Event::SlowConsumer(lost))));
                }
                continue;
            }
            if let Some(ev) = self.pump(&channel) {
                return Poll::Ready(Some(ev));
            }
        }
    }

    /// Pumps `channel`'s subscription: its next recovered message, or
    /// `None` once it started a page read or is done (then the prelude
    /// moves on). Held messages it hands over wait in `held`.
    fn pump(&mut self, channel: &Arc<str>) -> Option<SubscribeEvent> {
        let mut subs = self.subs.lock();
        let Some(sub) = subs.get_mut(channel) else {
            self.prelude.pop_front();
            return None;
        };
        loop {
            // Tonic pulls: HTTP/2 flow control bounds what waits, so the
            // history has room whenever it is asked for.
            match sub.pump(&mut |_| true) {
                Next::Recovered { seq, frame, .. } => {
                    sub.queued(seq);
                    return Some(Grpc.render(channel, seq, &frame));
                }
                Next::Live(h) => {
                    sub.queued(h.seq);
                    self.held.push_back(Queued {
                        channel: channel.clone(),
                        seq: h.seq,
                        frame: h.frame,
                    });
                }
                // A stream holds no frames of its own: were one handed
                // over, it would be released like a held message.
                Next::Release(Held { frame, .. }) | Next::Own(frame) => {
                    self.gauge.release(frame.len());
                }
                Next::Page | Next::Stalled => {
                    let source = sub.source();
                    let read = sub.next_page(self.gauge.high_water() / 2);
                    match (source, read) {
                        (Some(source), Some(read)) => self.reading = Some((source, read)),
                        // Nothing to read: the history cannot move.
                        _ => {
                            self.prelude.pop_front();
                        }
                    }
                    return None;
                }
                Next::Done => {
                    self.prelude.pop_front();
                    return None;
                }
            }
        }
    }
}

/// A Subscribe call that passed [`check`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Checked {
    /// Its price: `subscribe` per channel plus `recovery` per channel with
    /// `since`.
    pub cost: u32,
    /// It names more channels than `max_subscriptions` and the plan has
    /// that limit in dry run: let through, counted as a dry-run
    /// `too_many_subscriptions`, as on `/v1/ws`, SSE and graphql-ws.
    pub over_cap: bool,
}

/// Checks every channel and prices the call: `subscribe` per channel plus
/// `recovery` per channel with `since`, each within `max_single`.
pub(crate) fn check(
    key: &KeyState,
    limits: &Limits,
    req: &SubscribeRequest,
) -> Result<Checked, (Refusal, Option<String>)> {
    if key.subscribe.is_empty() {
        return Err((
            Refusal::new(
                ErrorCode::Forbidden,
                "this API key has no sub_channels in the config: it may not subscribe",
            ),
            None,
        ));
    }
    let max = limits.max_subscriptions as usize;
    let n = req.channels.len();
    // The one decision of the cap and its dry run (`admission::cap`).
    let cap = crate::admission::subscription_cap(limits, n);
    if n == 0 || matches!(cap, Cap::Refused { .. }) {
        let code = if n == 0 {
            ErrorCode::BadRequest
        } else {
            ErrorCode::TooManySubscriptions
        };
        let msg = format!("a Subscribe call names 1 to {max} channels, this one names {n}");
        return Err((Refusal::new(code, msg), None));
    }
    let mut seen = HashSet::with_capacity(n);
    let mut cost = 0u32;
    for cs in &req.channels {
        let name = &cs.channel;
        let fail = |code, msg: String| Err((Refusal::new(code, msg), Some(name.clone())));
        if let Err(why) = channel::validate(name) {
            return fail(ErrorCode::BadRequest, why.to_owned());
        }
        if !seen.insert(name.as_str()) {
            return fail(ErrorCode::BadRequest, format!("{name:?} is named twice"));
        }
        if !key.subscribe.matches(name) {
            return fail(
                ErrorCode::Forbidden,
                format!("this API key may not subscribe to {name:?}"),
            );
        }
        let price = crate::charge::subscribe::price(limits, name, cs.since.is_some())
            .map_err(|r| (r, Some(name.clone())))?;
        cost = cost.saturating_add(price);
    }
    Ok(Checked {
        cost,
        over_cap: cap.is_dry_run(),
    })
}

pub async fn start(
    svc: &BrokerService,
    caller: Caller,
    ip: Option<IpAddr>,
    req: SubscribeRequest,
) -> Result<Events, Status> {
    let node = &svc.node;
    let account = caller.key.account.clone();
    let cost = match check(&caller.key, &caller.limits, &req) {
        Ok(Checked { cost, over_cap }) => {
            if over_cap {
                Exceeded::new(Layer::Grpc, "too_many_subscriptions", &account)
                    .dry_run(true)
                    .emit(&node.metrics);
            }
            cost
        }
        Err((r, ch)) => {
            return Err(svc
                .refuse_call(&caller, &r, ch.as_deref().unwrap_or(""))
                .await);
        }
    };
    let charge = match svc.charge(&caller, cost, None).await {
        Ok(admitted) => admitted.balance.unwrap_or_default(),
        Err(refused) => return Err(status::rate_limited(&refused, 0)),
    };

    let conn = node.next_conn();
    let gauge = Arc::new(OutboundGauge::new(caller.limits.outbound_high_water_bytes));
    let (tx, live) = mpsc::unbounded_channel();
    let congested = Arc::new(Notify::new());
    let subs: Subs = Arc::new(Mutex::new(HashMap::with_capacity(req.channels.len())));
    let sub = Subscriber {
        conn,
        sink: Sink::Render(Arc::new(StreamSink {
            subs: subs.clone(),
            live: tx,
            congested: congested.clone(),
            gauge: gauge.clone(),
        })),
        gauge: gauge.clone(),
    };
    let membership = Arc::new(Membership {
        node: node.clone(),
        conn,
        channels: Mutex::new(Vec::with_capacity(req.channels.len())),
        left: AtomicBool::new(false),
    });
    // Registered before joining (left by `leave`), so an operator's action
    // taken while the call joins still ends it.
    let whose = Whose { account, ip };
    let kick = operator::register(node, conn, &whose);
    let span = tracing::info_span!("grpc_subscribe", conn, account = %whose.account);
    let (end_tx, end_rx) = oneshot::channel();
    let mut events = Events {
        prelude: VecDeque::new(),
        subs: subs.clone(),
        reading: None,
        held: VecDeque::new(),
        live,
        end: Some(end_rx),
        ended: false,
        gauge: gauge.clone(),
        membership: membership.clone(),
        guard: None,
        charge,
        cost: u64::from(cost),
        _open: svc.open_stream(),
    };
    let mut recovered_bytes = 0usize;
    for cs in req.channels {
        let name: Arc<str> = Arc::from(cs.channel.as_str());
        // Joining before the hub knows it: what the hub hands over before
        // the bridge answers is held.
        subs.lock()
            .insert(name.clone(), Subscription::new(OnLoss::Continue));
        // Recorded before joining, so a call dropped mid-way leaves it.
        membership.channels.lock().push(cs.channel.clone());
        let joined = node
            .broker
            .subscribe(&cs.channel, sub.clone(), cs.since)
            .wait()
            .await;
        events
            .prelude
            .push_back(Prelude::Ack(event(Event::Ack(SubscribeAck {
                channel: cs.channel.clone(),
                recovered: joined.recovered,
                seq: joined.position(),
            }))));
        recovered_bytes += joined.backlog.bytes();
        // Live messages are exactly those above the position (§11); the
        // history, then what was held, goes out after the ack.
        if let Some(s) = subs.lock().get_mut(&name) {
            s.joined(joined);
        }
        events.prelude.push_back(Prelude::Recovering(name));
    }
    // The history recovered is paid for once known and before any of it is
    // sent, owed by the key and never refused: recovery's one meaning
    // (`charge::recovery`), as on `/v1/ws`, SSE and graphql-ws.
    let payer = Payer::Key {
        layer: Layer::Grpc,
        key: &caller.key,
        limits: &caller.limits,
    };
    let now = std::time::Instant::now();
    if let Some((units, admitted)) = node
        .ledger()
        .recovery(payer, recovered_bytes, now)
        .wait()
        .await
    {
        if let Some(b) = admitted.balance {
            events.charge = b;
        }
        events.cost += u64::from(units);
    }
    let grace = Duration::from_millis(caller.limits.outbound_grace_ms);
    events.guard = Some(tokio::spawn(guard(
        svc.clone(),
        whose,
        membership,
        (gauge, congested),
        kick,
        grace,
        end_tx,
    )));
    span.in_scope(|| tracing::debug!("grpc subscriber joined"));
    Ok(events)
}

/// Ends the stream past the slow-consumer grace, at its moment of the
/// drain, or at an operator's ban or disconnect, whichever comes first.
async fn guard(
    svc: BrokerService,
    whose: Whose,
    membership: Arc<Membership>,
    (gauge, congested): (Arc<OutboundGauge>, Arc<Notify>),
    mut kick: Kicks,
    grace: Duration,
    end: oneshot::Sender<Status>,
) {
    let account = &whose.account;
    let mut drain = pin!(drained(svc.drain.clone()));
    loop {
        tokio::select! {
            () = &mut drain => {
                let _ = end.send(status::draining());
                return;
            }
            Some(reason) = kick.recv() => {
                // Left before the status goes out: the client sees its
                // end only once the hub has forgotten it.
                let status = operator::end_status(&svc, &whose, reason);
                membership.leave();
                let _ = end.send(status);
                return;
            }
            () = congested.notified() => {}
        }
        tokio::select! {
            () = &mut drain => {
                let _ = end.send(status::draining());
                return;
            }
            Some(reason) = kick.recv() => {
                // Left before the status goes out: the client sees its
                // end only once the hub has forgotten it.
                let status = operator::end_status(&svc, &whose, reason);
                membership.leave();
                let _ = end.send(status);
                return;
            }
            () = tokio::time::sleep(grace) => {}
        }
        if gauge.is_congested() {
            svc.count(ErrorCode::SlowConsumer.as_str(), account, None);
            let _ = end.send(status::refused(
                ErrorCode::SlowConsumer,
                "this stream stayed above its high-water mark past the grace period",
                None,
            ));
            // Stop the work for a consumer that does not read.
            membership.leave();
            return;
        }
    }
}
