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
//! Messages that arrive while the join is answered (in a cluster, while
//! delivery from every node goes live) wait, rendered and counted in the
//! gauge, until `subscription_succeeded` is queued: nothing of a channel
//! reaches pusher-js before it knows it is subscribed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};

use bytes::Bytes;
use parking_lot::Mutex;

use crate::hub::{OutboundGauge, RenderSink, Renders, Reserve};
use crate::node::dialect::{Link, Outlet};
use crate::protocol::wire;

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

/// What waits for `subscription_succeeded`: rendered frames, counted in
/// the gauge.
enum Held {
    /// A hub message: `(seq, frame)`.
    Hub(u64, Bytes),
    /// A frame of this front's own (a presence member event).
    Own(Bytes),
}

impl Held {
    fn frame(&self) -> &Bytes {
        match self {
            Held::Hub(_, f) | Held::Own(f) => f,
        }
    }
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

enum Pos {
    /// Waiting for the bridge. Bounded by the socket's gauge: what waits
    /// is counted in it, and the hub's messages are dropped at its mark.
    Joining(Vec<Held>),
    Live,
    Ended,
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
    pos: Mutex<Pos>,
    /// `pos` is `Live`: a delivery then queues without taking `pos`'s
    /// lock (a lock and an unlock a delivery, which a `/v1/ws`
    /// subscriber's path does not pay).
    /// Set under the lock once what waited is queued, cleared under it
    /// before the subscription ends, so a delivery never overtakes what
    /// waited for `subscription_succeeded`.
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
            pos: Mutex::new(Pos::Joining(Vec::new())),
            live: AtomicBool::new(false),
        })
    }

    /// The join is answered and `subscription_succeeded` queued: what
    /// waited is queued after it, then every message as it comes.
    pub fn go_live(&self) {
        let mut pos = self.pos.lock();
        if let Pos::Joining(held) = std::mem::replace(&mut *pos, Pos::Live) {
            for h in held {
                match h {
                    Held::Hub(_, frame) | Held::Own(frame) => self.outlet.push_frame(frame),
                }
            }
            self.live.store(true, Ordering::Release);
        } else {
            *pos = Pos::Ended;
        }
    }

    /// [`PusherSink::go_live`] for a cache channel: `cached` (its newest
    /// held message, read once the subscription was live) is queued
    /// first, unless a message at least as new already waits (that one
    /// comes next anyway, and the newest is what a cache channel
    /// promises). Says what the subscriber was given.
    pub fn go_live_cached(&self, cached: Option<(u64, Bytes)>) -> Replay {
        let pos = self.pos.lock();
        let Pos::Joining(held) = &*pos else {
            drop(pos);
            self.go_live();
            return Replay::Gone;
        };
        let newest_held = held
            .iter()
            .filter_map(|h| match h {
                Held::Hub(seq, _) => Some(*seq),
                Held::Own(_) => None,
            })
            .max();
        let replay = match (cached, newest_held) {
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
        drop(pos);
        self.go_live();
        replay
    }

    /// Nothing more is queued; what waited is given back to the gauge.
    pub fn end(&self) {
        let mut pos = self.pos.lock();
        self.live.store(false, Ordering::Release);
        if let Pos::Joining(held) = std::mem::replace(&mut *pos, Pos::Ended) {
            self.gauge
                .release(held.iter().map(|h| h.frame().len()).sum());
        }
    }

    /// Queues a frame of this front's own on the channel (a presence
    /// member event), after `subscription_succeeded` like every message
    /// of the channel. It is never dropped (pusher-js's member list must
    /// stay exact): one that takes the socket past its mark starts the
    /// slow-consumer grace instead, which closes a reader that stopped.
    pub fn push_own(&self, frame: &str) {
        let mut pos = self.pos.lock();
        if matches!(*pos, Pos::Ended) {
            return;
        }
        let rendered = wire::text(frame.as_bytes());
        if self.gauge.add_answer(rendered.len()) {
            self.outlet.congested();
        }
        match &mut *pos {
            Pos::Joining(held) => held.push(Held::Own(rendered)),
            _ => self.outlet.push_frame(rendered),
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
        let mut pos = self.pos.lock();
        let rendered = match &*pos {
            Pos::Ended => return None,
            _ => self.render(seq, frame, renders)?,
        };
        let reserved = self.gauge.try_reserve(rendered.len());
        if reserved == Reserve::Queued {
            match &mut *pos {
                Pos::Joining(held) => held.push(Held::Hub(seq, rendered)),
                _ => self.outlet.push_frame(rendered),
            }
        }
        Some(reserved)
    }

    fn congested(&self) {
        self.outlet.congested();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::hub::{HistoryLimits, Hub, Sink, Subscriber};
    use crate::metrics::Metrics;
    use crate::node::dialect::Backlog;

    /// A socket's outbox as far as this sink uses it: what was queued.
    struct Queued(Mutex<Vec<Bytes>>, Arc<OutboundGauge>);

    impl Outlet for Queued {
        fn push(&self, parts: &mut [Bytes]) {
            let mut q = self.0.lock();
            q.extend(parts.iter_mut().map(std::mem::take));
        }
        fn push_frame(&self, frame: Bytes) {
            self.0.lock().push(frame);
        }
        fn push_keyed(&self, _: &Arc<str>, _: Arc<str>, frame: Bytes) -> bool {
            self.push_frame(frame);
            true
        }
        fn gauge(&self) -> &OutboundGauge {
            &self.1
        }
        fn congested(&self) {}
        fn recover(&self, _: Arc<dyn Backlog>) {}
        fn forget(&self, _: &Arc<dyn Backlog>) {}
        fn page_room(&self, _: usize) -> Option<usize> {
            None
        }
        fn page_done(&self, _: usize) {}
        fn pump_backlogs(&self) {}
    }

    const CH: &str = "|1|private-x";

    /// A subscriber of [`CH`] on `hub` as socket `id`, with its queue.
    fn subscriber(hub: &Hub, conn: u64, id: &str, mark: usize) -> (Arc<PusherSink>, Arc<Queued>) {
        let gauge = Arc::new(OutboundGauge::new(mark));
        let queued = Arc::new(Queued(Mutex::default(), gauge.clone()));
        let sink = PusherSink::with(conn, CH.into(), id.into(), queued.clone(), gauge.clone());
        let sub = Subscriber {
            conn,
            sink: Sink::Render(sink.clone()),
            gauge,
        };
        hub.subscribe(CH, sub, None);
        (sink, queued)
    }

    fn frames(q: &Queued) -> Vec<Bytes> {
        q.0.lock().clone()
    }

    /// What the gauge counts: exactly the bytes queued (the rendered
    /// frames), never the hub's frames, with nothing left over.
    fn counted(q: &Queued) -> usize {
        frames(q).iter().map(Bytes::len).sum()
    }

    #[test]
    fn the_gauge_counts_the_rendered_frames_queued_and_the_sender_reserves_nothing() {
        let hub = Hub::new(
            HistoryLimits {
                size: 0,
                ttl: Duration::from_secs(60),
                max_bytes: usize::MAX,
            },
            Arc::new(Metrics::new()),
        );
        let (a, qa) = subscriber(&hub, 1, "1.1", 1 << 20);
        let (b, qb) = subscriber(&hub, 2, "2.2", 1 << 20);
        let one = r#"{"event":"client-m","channel":"private-x","data":"1"}"#;
        let two = r#"{"event":"client-m","channel":"private-x","data":"2"}"#;
        // While joining: held, rendered and counted; the sender's not.
        hub.publish(CH, &publish_data("2.2", one));
        assert!(frames(&qa).is_empty() && frames(&qb).is_empty());
        assert_eq!(a.gauge.pending(), wire::text(one.as_bytes()).len());
        assert_eq!(b.gauge.pending(), 0, "the sender reserved nothing");
        a.go_live();
        b.go_live();
        hub.publish(CH, &publish_data("", two));
        let (r1, r2) = (wire::text(one.as_bytes()), wire::text(two.as_bytes()));
        assert_eq!(frames(&qa), vec![r1, r2.clone()]);
        assert_eq!(frames(&qb), vec![r2]);
        assert_eq!(a.gauge.pending(), counted(&qa));
        assert_eq!(b.gauge.pending(), counted(&qb));
        // Ended: nothing more queued or counted.
        a.end();
        hub.publish(CH, &publish_data("", two));
        assert_eq!(frames(&qa).len(), 2);
        assert_eq!(a.gauge.pending(), counted(&qa));
        assert_eq!(b.gauge.pending(), counted(&qb));
    }

    #[test]
    fn at_the_mark_messages_are_dropped_and_what_waited_is_released_at_the_end() {
        let hub = Hub::new(
            HistoryLimits {
                size: 0,
                ttl: Duration::from_secs(60),
                max_bytes: usize::MAX,
            },
            Arc::new(Metrics::new()),
        );
        let (live, ql) = subscriber(&hub, 1, "1.1", 1);
        let (joining, qj) = subscriber(&hub, 2, "2.2", 1 << 20);
        live.go_live();
        let event = r#"{"event":"client-m","channel":"private-x","data":"1"}"#;
        hub.publish(CH, &publish_data("", event));
        hub.publish(CH, &publish_data("", event));
        assert_eq!(frames(&ql).len(), 1, "the second is past the mark");
        assert_eq!(live.gauge.pending(), counted(&ql));
        assert!(live.gauge.is_congested());
        assert!(joining.gauge.pending() > 0);
        joining.end();
        assert_eq!(joining.gauge.pending(), 0);
        assert!(frames(&qj).is_empty());
    }

    #[test]
    fn a_socket_is_left_out_by_its_own_id_only() {
        let longest = format!("{}.{}", u32::MAX, u64::MAX);
        let long = "9".repeat(40);
        let ids = ["", "1.2", "1.20", "12.0", &longest, &long[..32], &long];
        for me in ids {
            let own = OwnId::new(me.into());
            for ex in ids {
                assert_eq!(own.is(&kept_exclude(ex.as_bytes())), me == ex, "{me} {ex}");
            }
        }
        assert!(matches!(
            OwnId::new(longest.as_str().into()),
            OwnId::Packed(_)
        ));
        assert!(matches!(OwnId::new(long[..32].into()), OwnId::Long(_)));
    }

    #[test]
    fn split_reads_what_publish_data_wrote() {
        let d = publish_data("1.2", r#"{"event":"e","channel":"c","data":"\"x\""}"#);
        let (ex, frame) = split(d.as_bytes()).unwrap();
        assert_eq!(ex, b"1.2");
        assert_eq!(frame, br#"{"event":"e","channel":"c","data":"\"x\""}"#);
        let d = publish_data("", "{}");
        assert_eq!(split(d.as_bytes()), Some((&b""[..], &b"{}"[..])));
        assert_eq!(split(b"{\"type\":1}"), None);
    }
}
