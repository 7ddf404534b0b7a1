//! Connections that have not sent their whole request yet (slowloris
//! defence, issues 15, 26 and 38). Each TCP connection is counted against
//! its peer IP while a request head or body is arriving, for its first
//! request and for every later one on a keep-alive connection; past
//! `handshake.ip_max_unfinished` a new connection is shut at once, and a
//! keep-alive connection that starts another head is dropped. Every head
//! must be whole within `handshake.request_timeout_ms` of its start (the
//! accept for the first, however slowly it trickles in, the TLS handshake
//! included: `tls.rs`): actix's request timeout bounds the first (408 and
//! dropped), [`Watched`] every later one and a TLS connection's first
//! (dropped). Both are counted as `tidegate_rejections_total{layer=
//! "handshake", reason="request_timeout"}`. A request with a body goes on
//! counting until the body is whole, which must be within
//! `http.body_timeout_ms` of its head (`body.rs`; dropped past it, counted
//! as `{layer="http", reason="body_timeout"}`), whether or not the route
//! reads it.

mod body;
pub mod tls;
mod watched;

use std::cell::{Cell, OnceCell};
use std::net::{IpAddr, Shutdown};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::dev::Extensions;

use crate::exceeded::Exceeded;
use crate::gate::IpSlot;
use crate::node::Node;

pub use body::middleware;
pub use watched::{Watched, WatchedStream};

/// Where a connection is in its request/response cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Phase {
    /// The first head is arriving (actix's request timeout bounds it).
    #[default]
    First,
    /// A head is whole and its request's body is arriving ([`Watched`]
    /// bounds it, with the body's deadline).
    Body,
    /// A head (and its body, if any) is whole; its request is being
    /// handled.
    Handling,
    /// The request is answered: the next byte starts a new head.
    Answered,
    /// A later head is arriving ([`Watched`] bounds it).
    Later,
    /// Not an HTTP/1 request stream any more (a WebSocket, HTTP/2), or
    /// refused at the accept: nothing to watch.
    Off,
}

/// A connection's request-head state, shared by its stream ([`Watched`])
/// and its connection data (this, cloned from the stream at the accept).
#[derive(Clone, Default)]
pub struct Unfinished(Rc<Watch>);

#[derive(Default)]
struct Watch {
    phase: Cell<Phase>,
    /// When the head now arriving started.
    since: Cell<Option<Instant>>,
    /// The IP's count, held while a head or a body is arriving.
    slot: Cell<Option<IpSlot>>,
    /// When the body arriving now must be whole (in [`Phase::Body`]).
    body_deadline: Cell<Option<Instant>>,
    /// Set at the accept.
    peer: OnceCell<Peer>,
    /// The connection's socket (not owned: valid while the connection
    /// is), for a response that must end its connection itself (an SSE
    /// stream whose reader stopped reading, `socket/sse/body.rs`). Set at
    /// the accept.
    fd: Cell<Option<std::os::fd::RawFd>>,
}

struct Peer {
    node: Arc<Node>,
    ip: IpAddr,
    deadline: Duration,
}

impl Unfinished {
    /// The request head is complete. A request without a body no longer
    /// counts; one with a body goes on counting until the body is whole
    /// ([`Unfinished::body_whole`]), which must be within
    /// `http.body_timeout_ms` from now.
    pub fn head_whole(&self, body: bool) {
        if self.0.phase.get() == Phase::Off {
            return;
        }
        let timeout = match (body, self.0.peer.get()) {
            (true, Some(peer)) => peer.node.config.load().http.body_timeout_ms,
            _ => {
                self.0.slot.take();
                self.0.phase.set(Phase::Handling);
                return;
            }
        };
        let now = Instant::now();
        self.0
            .body_deadline
            .set(Some(now + Duration::from_millis(timeout)));
        self.0.phase.set(Phase::Body);
    }

    /// The request's body is whole: the connection no longer counts.
    pub fn body_whole(&self) {
        if self.0.phase.get() == Phase::Body {
            self.0.slot.take();
            self.0.body_deadline.set(None);
            self.0.phase.set(Phase::Handling);
        }
    }

    /// The request has its response: what arrives next is a new head.
    /// `false` when its body is not whole (nobody read the rest): the
    /// connection goes on counting, under the body's deadline, until it
    /// closes, and must not take another request.
    pub fn answered(&self) -> bool {
        match self.0.phase.get() {
            Phase::Handling => {
                self.0.phase.set(Phase::Answered);
                true
            }
            Phase::Body => false,
            _ => true,
        }
    }

    /// The connection is no longer an HTTP/1 request stream (upgraded to
    /// a WebSocket, or HTTP/2): nothing to watch.
    pub fn off(&self) {
        self.0.slot.take();
        self.0.phase.set(Phase::Off);
    }

    fn phase(&self) -> Phase {
        self.0.phase.get()
    }

    /// When the body arriving now must be whole.
    fn body_deadline(&self) -> Option<Instant> {
        self.0.body_deadline.get()
    }

    /// Bytes arrived. When they start a new head, counts it against the
    /// IP and returns its deadline; an IP holding too many unfinished
    /// heads gets the connection dropped.
    fn bytes_arrived(&self) -> std::io::Result<Option<Instant>> {
        if self.phase() != Phase::Answered {
            return Ok(None);
        }
        let Some(peer) = self.0.peer.get() else {
            return Ok(None);
        };
        let config = peer.node.config.load();
        let Some(slot) = peer.node.gate.ip_unfinished(peer.ip, &config.handshake) else {
            too_many(&peer.node, peer.ip);
            self.off();
            return Err(std::io::Error::other(
                "too many connections from this address are sending a request head",
            ));
        };
        let now = Instant::now();
        self.0.slot.set(Some(slot));
        self.0.since.set(Some(now));
        self.0.phase.set(Phase::Later);
        Ok(Some(now + peer.deadline))
    }

    /// The connection's socket descriptor (see the field).
    pub fn fd(&self) -> Option<std::os::fd::RawFd> {
        self.0.fd.get()
    }
}

/// actix sets the deadline on its cached clock, which steps every 500 ms:
/// a connection may be cut off up to this much before the full timeout.
const ACTIX_CLOCK_STEP: Duration = Duration::from_millis(500);

impl Drop for Watch {
    fn drop(&mut self) {
        // Still counted when it closes: it never sent a whole head (or
        // body). Only the ones that ran out of time are the broker's doing.
        let (Some(peer), Some(since)) = (self.peer.get(), self.since.get()) else {
            return;
        };
        if self.slot.get_mut().is_none() {
            return;
        }
        let (layer, reason, timed_out) = match (self.phase.get(), self.body_deadline.get()) {
            (Phase::Body, Some(deadline)) => (
                crate::metrics::Layer::Http,
                "body_timeout",
                Instant::now() >= deadline,
            ),
            _ => (
                crate::metrics::Layer::Handshake,
                "request_timeout",
                since.elapsed() + ACTIX_CLOCK_STEP >= peer.deadline,
            ),
        };
        if timed_out {
            Exceeded::new(layer, reason, "").emit(&peer.node.metrics);
        }
    }
}

fn too_many(node: &Node, ip: IpAddr) {
    Exceeded::new(
        crate::metrics::Layer::Handshake,
        "ip_too_many_unfinished",
        "",
    )
    .conn(&ip.to_string())
    .emit(&node.metrics);
}

/// Counts a connection against its IP as it is accepted, or shuts it at
/// once when the IP holds too many unfinished ones already (`false`).
/// Done once: [`on_connect`] does it for a connection not counted yet.
pub fn accept(node: &Arc<Node>, watch: &Unfinished, tcp: &actix_web::rt::net::TcpStream) -> bool {
    let Ok(peer) = tcp.peer_addr() else {
        watch.off();
        return false;
    };
    let ip = peer.ip().to_canonical();
    let config = node.config.load();
    match node.gate.ip_unfinished(ip, &config.handshake) {
        Some(slot) => {
            let w = &watch.0;
            w.slot.set(Some(slot));
            w.since.set(Some(Instant::now()));
            w.fd.set(Some(std::os::fd::AsRawFd::as_raw_fd(tcp)));
            let _ = w.peer.set(Peer {
                node: node.clone(),
                ip,
                deadline: Duration::from_millis(config.handshake.request_timeout_ms),
            });
            true
        }
        None => {
            too_many(node, ip);
            watch.off();
            // Reading end-of-file, the server drops the connection.
            let _ = socket2::SockRef::from(tcp).shutdown(Shutdown::Both);
            false
        }
    }
}

/// Called for every connection the HTTP service serves: counts it
/// ([`accept`], unless the listener did already) and puts `watch`, the
/// connection's stream's state, into the connection's data for the
/// request handlers to update.
pub fn on_connect(
    node: &Arc<Node>,
    watch: &Unfinished,
    tcp: &actix_web::rt::net::TcpStream,
    data: &mut Extensions,
) {
    let counted = watch.0.peer.get().is_some() && watch.phase() != Phase::Off;
    if counted || (watch.phase() != Phase::Off && accept(node, watch, tcp)) {
        data.insert(watch.clone());
    }
}
