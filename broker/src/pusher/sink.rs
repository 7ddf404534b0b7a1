//! One Pusher subscription as the hub sees it: a subscriber of its own
//! (its own number) whose sink takes the Pusher frame out of each message
//! and queues it in the socket's outbox ([`Outlet`]), bounded by the
//! socket's gauge like every subscription of the socket.
//!
//! What this front publishes into the hub is `["<socket_id>",<frame>]`:
//! the socket to leave out (the HTTP API's `socket_id`, a client event's
//! sender; empty for none) and the Pusher frame the subscribers get, whole.
//! So a delivery parses nothing: it compares the socket id and queues the
//! frame, rendered into a WebSocket frame once per fan-out ([`Renders`]).
//!
//! Messages that arrive while the join is answered (in a cluster, while
//! delivery from every node goes live) wait, counted in the gauge, until
//! `subscription_succeeded` is queued: nothing of a channel reaches
//! pusher-js before it knows it is subscribed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};

use bytes::Bytes;
use parking_lot::Mutex;

use crate::hub::{DirectSink, OutboundGauge, Renders};
use crate::node::dialect::Outlet;
use crate::protocol::wire;

/// The key this front's rendering is shared under in a fan-out.
static RENDER_KEY: LazyLock<Arc<[u8]>> = LazyLock::new(|| Arc::from(&b"pusher.frame"[..]));

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

/// What waits for `subscription_succeeded`, counted in the gauge.
enum Held {
    /// A hub message: `(seq, frame)`.
    Hub(u64, Bytes),
    /// A frame of this front's own (a presence member event), rendered.
    Own(Bytes),
}

impl Held {
    fn len(&self) -> usize {
        match self {
            Held::Hub(_, f) | Held::Own(f) => f.len(),
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
    /// is counted in it, and a socket past its mark is closed.
    Joining(Vec<Held>),
    Live,
    Ended,
}

pub struct PusherSink {
    /// The hub subscriber's number (unique on the node).
    pub conn: u64,
    /// The hub's channel (the app's, `names::internal`).
    pub channel: Arc<str>,
    socket_id: Arc<str>,
    outlet: Arc<dyn Outlet>,
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
    pub fn new(
        conn: u64,
        channel: Arc<str>,
        socket_id: Arc<str>,
        outlet: Arc<dyn Outlet>,
    ) -> Arc<Self> {
        Arc::new(PusherSink {
            conn,
            channel,
            socket_id,
            outlet,
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
                    Held::Hub(seq, frame) => self.queue(seq, &frame, &mut Renders::default()),
                    Held::Own(frame) => self.outlet.push_frame(frame),
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
                // Not reserved by the hub: counted here, then recounted
                // to the rendered size like a delivery.
                self.outlet.gauge().add(frame.len());
                self.queue(seq, &frame, &mut Renders::default());
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
            self.outlet
                .gauge()
                .release(held.iter().map(Held::len).sum());
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
        if self.outlet.gauge().add_answer(rendered.len()) {
            self.outlet.congested();
        }
        match &mut *pos {
            Pos::Joining(held) => held.push(Held::Own(rendered)),
            _ => self.outlet.push_frame(rendered),
        }
    }

    fn queue(&self, seq: u64, frame: &Bytes, renders: &mut Renders) {
        let gauge = self.outlet.gauge();
        let data = wire::message_data_slice(frame, &self.channel, seq);
        let Some((exclude, body)) = split(data) else {
            gauge.release(frame.len());
            return;
        };
        if exclude == self.socket_id.as_bytes() {
            gauge.release(frame.len());
            return;
        }
        // The fan-out's rendering is borrowed, not its `Arc` cloned: one
        // atomic increment and decrement fewer a delivery (`perf` had
        // them at a third of this function's time).
        if renders.get(&RENDER_KEY).is_none() {
            let r = Arc::new(wire::text(body));
            renders.keep(&RENDER_KEY, &r);
            if renders.get(&RENDER_KEY).is_none() {
                // The memo is full: this delivery's own rendering.
                recount(gauge, frame.len(), r.len());
                self.outlet.push_frame(Bytes::clone(&r));
                return;
            }
        }
        let Some(rendered) = renders.get(&RENDER_KEY) else {
            // Not reached: kept just above. Nothing stays counted.
            gauge.release(frame.len());
            return;
        };
        let rendered = Bytes::clone(rendered);
        recount(gauge, frame.len(), rendered.len());
        self.outlet.push_frame(rendered);
    }
}

/// The gauge holds what is queued, not what the hub reserved.
fn recount(gauge: &OutboundGauge, reserved: usize, len: usize) {
    if len >= reserved {
        gauge.add(len - reserved);
    } else {
        gauge.release(reserved - len);
    }
}

impl DirectSink for PusherSink {
    fn message(
        &self,
        _channel: &Arc<str>,
        seq: u64,
        frame: &Bytes,
        _key: Option<&Arc<str>>,
        renders: &mut Renders,
    ) {
        if self.live.load(Ordering::Acquire) {
            return self.queue(seq, frame, renders);
        }
        let mut pos = self.pos.lock();
        match &mut *pos {
            Pos::Live => self.queue(seq, frame, renders),
            Pos::Joining(held) => held.push(Held::Hub(seq, frame.clone())),
            Pos::Ended => {
                drop(pos);
                self.outlet.gauge().release(frame.len());
            }
        }
    }

    fn congested(&self) {
        self.outlet.congested();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
