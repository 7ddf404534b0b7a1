//! Connections that have not sent their whole request head yet (slowloris
//! defence, issue 15). Each TCP connection is counted against its peer IP
//! from the accept until its first request head is complete; past
//! `handshake.ip_max_unfinished` a new one is shut at once. The deadline
//! itself is actix's request timeout (`handshake.request_timeout_ms`): the
//! head must be complete that long after the accept, however slowly it
//! trickles in; the connection is then answered 408 and dropped, and
//! counted here as `tidegate_rejections_total{layer="handshake",
//! reason="request_timeout"}`.

use std::cell::Cell;
use std::net::Shutdown;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::dev::Extensions;

use crate::exceeded::Exceeded;
use crate::gate::IpSlot;
use crate::metrics::{Layer, Metrics};
use crate::node::Node;

/// Stored in the connection's data until it closes; holds the IP's count
/// until the first request head is complete.
pub struct Unfinished {
    slot: Cell<Option<IpSlot>>,
    /// The connection's socket (not owned: valid while the connection
    /// is), for a response that must end its connection itself (an SSE
    /// stream whose reader stopped reading, `socket/sse/body.rs`).
    fd: std::os::fd::RawFd,
    accepted: Instant,
    deadline: Duration,
    metrics: Arc<Metrics>,
}

impl Unfinished {
    /// The request head is complete: the connection no longer counts.
    pub fn finish(&self) {
        self.slot.take();
    }

    /// The connection's socket descriptor (see the field).
    pub fn fd(&self) -> std::os::fd::RawFd {
        self.fd
    }
}

/// actix sets the deadline on its cached clock, which steps every 500 ms:
/// a connection may be cut off up to this much before the full timeout.
const ACTIX_CLOCK_STEP: Duration = Duration::from_millis(500);

impl Drop for Unfinished {
    fn drop(&mut self) {
        // Still counted when it closes: it never sent a whole head. Only
        // the ones that ran out of time are the broker's doing.
        let timed_out = self.accepted.elapsed() + ACTIX_CLOCK_STEP >= self.deadline;
        if self.slot.get_mut().is_some() && timed_out {
            Exceeded::new(Layer::Handshake, "request_timeout", "").emit(&self.metrics);
        }
    }
}

/// Called for every accepted TCP connection: count it against its IP, or
/// shut it at once when the IP holds too many unfinished ones already.
pub fn on_connect(node: &Arc<Node>, tcp: &actix_web::rt::net::TcpStream, data: &mut Extensions) {
    let Ok(peer) = tcp.peer_addr() else {
        return;
    };
    let ip = peer.ip().to_canonical();
    let config = node.config.load();
    match node.gate.ip_unfinished(ip, &config.handshake) {
        Some(slot) => {
            data.insert(Unfinished {
                slot: Cell::new(Some(slot)),
                fd: std::os::fd::AsRawFd::as_raw_fd(tcp),
                accepted: Instant::now(),
                deadline: Duration::from_millis(config.handshake.request_timeout_ms),
                metrics: node.metrics.clone(),
            });
        }
        None => {
            Exceeded::new(Layer::Handshake, "ip_too_many_unfinished", "")
                .conn(&ip.to_string())
                .emit(&node.metrics);
            // Reading end-of-file, the server drops the connection.
            let _ = socket2::SockRef::from(tcp).shutdown(Shutdown::Both);
        }
    }
}
