//! One Pusher subscription as the hub sees it: a subscriber of its own
//! (its own number) whose sink renders the Pusher frame out of each
//! message and queues it in the socket's outbox ([`Outlet`]), bounded by
//! the socket's gauge like every subscription of the socket.
//!
//! What this front publishes into the hub is `["<socket_id>",<frame>]`:
//! the socket to leave out (the HTTP API's `socket_id`, a client event's
//! sender; empty for none) and the Pusher frame the subscribers get, whole.
//! So a delivery parses nothing: the first Pusher subscriber of a fan-out
//! splits the message and renders the WebSocket frame ([`Renders`]), and
//! every one compares the socket id and queues that frame.
//!
//! It is a [`RenderSink`]: it reserves in the gauge the frame it queues,
//! once, rather than the hub reserving the hub's (larger) frame and the
//! sink recounting it per delivery; the socket left out reserves nothing.
//!
//! Where the subscription stands is the session layer's machine, the one
//! every front keeps ([`Subscription`], [`OnLoss::Continue`]): messages
//! that arrive while the join is answered (in a cluster, while delivery
//! from every node goes live) and the presence member events of the
//! meantime ([`PusherSink::push_own`]) wait in it, rendered and counted in
//! the gauge, in the order they came, until `subscription_succeeded` is
//! queued: nothing of a channel reaches pusher-js before it knows it is
//! subscribed. The machine holds the rendered frame (the bytes the gauge
//! counts), not the hub's. No recovery on this front: it joins without
//! `since`, so the machine goes straight from joining to live.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};

use bytes::Bytes;
use parking_lot::Mutex;

use crate::dialect::{Link, Outlet};
use crate::hub::{Joined, OutboundGauge, RenderSink, Renders, Reserve};
use crate::protocol::wire;
use crate::session::{Joining, Next, Offer, OnLoss, Phase, Subscription};

/// The keys this front's rendering, and the socket it leaves out, are
/// shared under in a fan-out.
static RENDER_KEY: LazyLock<Arc<[u8]>> = LazyLock::new(|| Arc::from(&b"pusher.frame"[..]));
static EXCLUDE_KEY: LazyLock<Arc<[u8]>> = LazyLock::new(|| Arc::from(&b"pusher.exclude"[..]));

/// What [`publish_data`] builds and [`split`] reads.
pub fn publish_data(exclude: &str, frame: &str) -> String {
    let mut out = String::with_capacity(frame.len() + exclude.len() + 6);
    out.push_str("[\"");
    out.push_str(exclude);
    out.push_str("\",");
    out.push_str(frame);
    out.push(']');
    out
}

/// The socket to leave out and the frame, from a published message's
/// `data` (`None`: not this front's).
pub fn split(data: &[u8]) -> Option<(&[u8], &[u8])> {
    let rest = data.strip_prefix(b"[\"")?;
    let end = rest.iter().position(|&b| b == b'"')?;
    let (exclude, rest) = rest.split_at(end);
    let frame = rest.strip_prefix(b"\",")?.strip_suffix(b"]")?;
    Some((exclude, frame))
}

/// What a new subscriber of a cache channel was given first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replay {
    /// The channel's last event.
    Sent,
    /// Nothing: the channel holds no event (`pusher:cache_miss`).
    Miss,
    /// A newer event arrived during the join and comes next anyway.
    Superseded,
    /// The subscription ended meanwhile.
    Gone,
}

/// A socket id as one fixed-size value: its bytes, zeros, its length last.
/// Every delivery compares the subscriber's id with the socket left out:
/// two of these compare in two vector instructions, where two strings
/// took a call to `memcmp` (at 5,000 subscribers, in a profile, as much as
/// the rest of the sink's work) and a load of the string from the heap.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Packed([u8; Packed::LEN]);

impl Packed {
    const LEN: usize = 32;

    /// `None` for an id longer than 31 bytes (`names::socket_id`'s fit
    /// up to an 11-character node id and 9-digit connection number).
    fn new(id: &[u8]) -> Option<Packed> {
        let len = u8::try_from(id.len())
            .ok()
            .filter(|&n| usize::from(n) < Self::LEN)?;
        let mut bytes = [0; Self::LEN];
        bytes[..id.len()].copy_from_slice(id);
        bytes[Self::LEN - 1] = len;
        Some(Packed(bytes))
    }
}

/// The subscriber's own `socket_id`, held in the sink itself.
enum OwnId {
    Packed(Packed),
    /// An id [`Packed`] cannot hold (a long node id's).
    Long(Arc<str>),
}

impl OwnId {
    fn new(id: Arc<str>) -> Self {
        match Packed::new(id.as_bytes()) {
            Some(p) => OwnId::Packed(p),
            None => OwnId::Long(id),
        }
    }

    /// Whether this is the socket `kept` ([`kept_exclude`]) names.
    #[inline]
    fn is(&self, kept: &[u8]) -> bool {
        match (self, <&[u8; Packed::LEN]>::try_from(kept)) {
            (OwnId::Packed(me), Ok(ex)) => me.0 == *ex,
            (OwnId::Long(me), Err(_)) => kept.strip_suffix(&[LONG]) == Some(me.as_bytes()),
            _ => false,
        }
    }
}

/// What ends a [`kept_exclude`] that is not [`Packed`] (so never 32 bytes).
const LONG: u8 = 0xff;

/// The socket a message leaves out as a fan-out keeps it in [`Renders`]:
/// [`Packed`], or its bytes and [`LONG`].
fn kept_exclude(exclude: &[u8]) -> Bytes {
    match Packed::new(exclude) {
        Some(p) => Bytes::copy_from_slice(&p.0),
        None => [exclude, &[LONG]].concat().into(),
    }
}

pub struct PusherSink {
    /// The hub subscriber's number (unique on the node).
    pub conn: u64,
    /// The hub's channel (the app's, `names::internal`).
    pub channel: Arc<str>,
    socket_id: OwnId,
    outlet: Arc<dyn Outlet>,
    /// The socket's gauge (the outlet's), held here so a delivery reaches
    /// it without a call through the outlet.
    gauge: Arc<OutboundGauge>,
    /// The session machine. While it joins, what waits is bounded by the
    /// socket's gauge: it is counted in it, and the hub's messages are
    /// dropped at its mark.
    sub: Mutex<Subscription>,
    /// `sub` is live with nothing to hand over: a delivery then queues
    /// without taking `sub`'s lock (a lock and an unlock a delivery, which
    /// a `/v1/ws` subscriber's path does not pay; a profile showed it at
    /// 5,000 subscribers).
    ///
    /// Why skipping the machine is sound: live and settled, it answers
    /// every message above its position [`Offer::Deliver`] and asks
    /// nothing of the front but to queue it. Above the position is every
    /// message from here on: the hub hands a subscriber each `seq` once,
    /// in order, under the channel's lock, and with no recovery on this
    /// front nothing else is queued by `seq`. A loss changes nothing in a
    /// [`OnLoss::Continue`] machine (the gauge counts the episode). So the
    /// fast path is the machine's own answer, left unrecorded: its
    /// position lags, and nothing reads it while the flag is set (frames
    /// of its own go out at once from a settled machine, whatever its
    /// position). The flag is set under the lock once what waited is
    /// queued, so a delivery never overtakes what waited for
    /// `subscription_succeeded`; and cleared under it before the machine
    /// ends, so a delivery after the end sees it ended.
    live: AtomicBool,
}

impl PusherSink {
    /// A subscription of `channel` queueing into `link`'s outbox.
    pub fn new(conn: u64, channel: Arc<str>, socket_id: Arc<str>, link: &dyn Link) -> Arc<Self> {
        Self::with(conn, channel, socket_id, link.outlet(), link.gauge())
    }

    fn with(
        conn: u64,
        channel: Arc<str>,
        socket_id: Arc<str>,
        outlet: Arc<dyn Outlet>,
        gauge: Arc<OutboundGauge>,
    ) -> Arc<Self> {
        Arc::new(PusherSink {
            conn,
            channel,
            socket_id: OwnId::new(socket_id),
            outlet,
            gauge,
            sub: Mutex::new(Subscription::new(OnLoss::Continue)),
            live: AtomicBool::new(false),
        })
    }

    /// The join is answered (`joined`, the hub's answer) and
    /// `subscription_succeeded` queued: what waited is queued after it, in
    /// the order it came, then every message as it comes.
    pub fn go_live(&self, joined: Joined) {
        let mut sub = self.sub.lock();
        if self.joined(&mut sub, joined) {
            self.pump(&mut sub, &mut |_, frame| self.outlet.push_frame(frame));
            self.open(&sub);
        }
    }

    /// [`PusherSink::go_live`] for a cache channel: `cached` (its newest
    /// held message, read once the subscription was live) is queued
    /// first, unless a message at least as new comes next anyway among
    /// what waited (the newest is what a cache channel promises). Says
    /// what the subscriber was given.
    ///
    /// What waited is pumped out of the machine first, so the decision
    /// is on what it hands over (a held message at or below the position
    /// the join answered is not handed over, so it supersedes nothing).
    pub fn go_live_cached(&self, joined: Joined, cached: Option<(u64, Bytes)>) -> Replay {
        let mut sub = self.sub.lock();
        if !self.joined(&mut sub, joined) {
            return Replay::Gone;
        }
        let (mut waited, mut newest) = (Vec::new(), None);
        self.pump(&mut sub, &mut |seq, frame| {
            newest = seq.or(newest);
            waited.push(frame);
        });
        let replay = match (cached, newest) {
            (Some((seq, frame)), n) if n.is_none_or(|n| n < seq) => {
                // Not offered by the hub: counted here, past the mark
                // like an answer (one frame), unless it leaves this
                // socket out.
                if let Some(rendered) = self.render(seq, &frame, &mut Renders::default()) {
                    self.gauge.add(rendered.len());
                    self.outlet.push_frame(rendered);
                }
                Replay::Sent
            }
            (None, None) => Replay::Miss,
            _ => Replay::Superseded,
        };
        waited.into_iter().for_each(|f| self.outlet.push_frame(f));
        self.open(&sub);
        replay
    }

    /// Hands the machine the join's answer: `false` if it ended meanwhile.
    fn joined(&self, sub: &mut Subscription, joined: Joined) -> bool {
        match sub.joined(joined) {
            Joining::Live => true,
            Joining::Ignored => false,
            // Not on this front: it joins without `since`.
            Joining::Recovering => {
                debug_assert!(false, "a Pusher subscription recovers nothing");
                true
            }
        }
    }

    /// Hands `queue` what waited, in the order it came (a hub message
    /// with its `seq`, a frame of this front's own with none), and
    /// releases what the machine does not hand over (at or below the
    /// position the join answered).
    fn pump(&self, sub: &mut Subscription, queue: &mut dyn FnMut(Option<u64>, Bytes)) {
        loop {
            match sub.pump(&mut |_| true) {
                Next::Live(h) => {
                    sub.queued(h.seq);
                    queue(Some(h.seq), h.frame);
                }
                Next::Own(frame) => queue(None, frame),
                Next::Release(h) => {
                    self.gauge.release(h.frame.len());
                }
                Next::Done => return,
                next @ (Next::Recovered { .. } | Next::Stalled | Next::Page) => {
                    debug_assert!(false, "a Pusher subscription recovers nothing: {next:?}");
                    return;
                }
            }
        }
    }

    /// What waited is queued: deliveries take the fast path from here on
    /// (see the `live` field), if the machine has nothing to hand over.
    fn open(&self, sub: &Subscription) {
        if sub.live_at().is_some() {
            self.live.store(true, Ordering::Release);
        }
    }

    /// Nothing more is queued; what waited is given back to the gauge.
    pub fn end(&self) {
        let mut sub = self.sub.lock();
        self.live.store(false, Ordering::Release);
        let left = sub.end();
        self.gauge.release(left.held + left.paged);
    }

    /// Queues a frame of this front's own on the channel (a presence
    /// member event), after `subscription_succeeded` and in order with
    /// the channel's messages ([`Subscription::hold_own`]). It is never
    /// dropped (pusher-js's member list must stay exact): one that takes
    /// the socket past its mark starts the slow-consumer grace instead,
    /// which closes a reader that stopped.
    pub fn push_own(&self, frame: &str) {
        let mut sub = self.sub.lock();
        if sub.phase() == Phase::Ended {
            return;
        }
        let rendered = wire::text(frame.as_bytes());
        if self.gauge.add_answer(rendered.len()) {
            self.outlet.congested();
        }
        match sub.hold_own(&rendered) {
            Offer::Deliver => self.outlet.push_frame(rendered),
            Offer::Held => {}
            Offer::Release => {
                self.gauge.release(rendered.len());
            }
        }
    }

    /// The WebSocket frame this subscriber gets for message `seq`
    /// (`frame`, the hub's), or `None` if the message leaves this socket
    /// out or is not this front's. The first subscriber of a fan-out
    /// splits and renders it; the rest find both in `renders` and pay a
    /// comparison and a reference count.
    #[inline]
    fn render(&self, seq: u64, frame: &Bytes, renders: &mut Renders) -> Option<Bytes> {
        if let (Some(exclude), Some(rendered)) =
            (renders.get(&EXCLUDE_KEY), renders.get(&RENDER_KEY))
        {
            return (!self.socket_id.is(exclude)).then(|| Bytes::clone(rendered));
        }
        let data = wire::message_data_slice(frame, &self.channel, seq);
        let (exclude, body) = split(data)?;
        let rendered = Arc::new(wire::text(body));
        // Past the memo's bound both stay unkept and the next subscriber
        // renders its own; the socket left out is kept first, so a kept
        // rendering always has it beside it.
        let exclude = Arc::new(kept_exclude(exclude));
        if renders.get(&EXCLUDE_KEY).is_none() {
            renders.keep(&EXCLUDE_KEY, &exclude);
        }
        renders.keep(&RENDER_KEY, &rendered);
        (!self.socket_id.is(&exclude)).then(|| Bytes::clone(&rendered))
    }
}

impl RenderSink for PusherSink {
    fn offer(
        &self,
        _channel: &Arc<str>,
        seq: u64,
        frame: &Bytes,
        renders: &mut Renders,
    ) -> Option<Reserve> {
        if self.live.load(Ordering::Acquire) {
            let rendered = self.render(seq, frame, renders)?;
            let reserved = self.gauge.try_reserve(rendered.len());
            if reserved == Reserve::Queued {
                self.outlet.push_frame(rendered);
            }
            return Some(reserved);
        }
        let mut sub = self.sub.lock();
        if sub.phase() == Phase::Ended {
            return None;
        }
        let rendered = self.render(seq, frame, renders)?;
        let reserved = self.gauge.try_reserve(rendered.len());
        if reserved == Reserve::Queued {
            match sub.offer(seq, &rendered, None) {
                Offer::Deliver => {
                    sub.queued(seq);
                    self.outlet.push_frame(rendered);
                }
                Offer::Held => {}
                Offer::Release => {
                    self.gauge.release(rendered.len());
                }
            }
        }
        Some(reserved)
    }

    fn congested(&self) {
        self.outlet.congested();
    }
}

#[cfg(test)]
mod tests;
