//! Graceful drain on SIGTERM (§7): `/readyz` answers 503 at once, new
//! handshakes get 503 `draining`, open sockets are closed with 1012 in
//! staggered batches over the drain window so their reconnects land spread
//! out on the other nodes, stragglers get 1001 at the end, then the server
//! stops (earlier if every socket is already gone). gRPC streams end on
//! their own within the same spread (`grpc/drain.rs`).

use std::time::{Duration, Instant};

use crate::account::{CloseWith, Control};
use crate::node::Node;
use crate::protocol::CloseCode;

/// Time between two batches.
const STEP: Duration = Duration::from_millis(100);
/// Batches are spread over this share of the window, leaving the rest for
/// the last closes to complete before stragglers get 1001.
pub const SPREAD: f64 = 0.8;

fn close(addrs: &[Control], code: CloseCode) {
    for a in addrs {
        a.close(CloseWith {
            code,
            notice: None,
            reason: None,
        });
    }
}

/// Waits until no socket is left or `deadline` passes.
async fn until_empty(node: &Node, deadline: Instant) {
    while !node.sockets.is_empty() && Instant::now() < deadline {
        actix_rt::time::sleep(Duration::from_millis(20)).await;
    }
}

pub async fn drain(node: &Node, window: Duration) {
    node.start_draining();
    let start = Instant::now();
    let end = start + window;
    let sockets: Vec<Control> = node.sockets.iter().map(|s| s.control.clone()).collect();
    tracing::info!(
        sockets = sockets.len(),
        window_ms = window.as_millis() as u64,
        "draining"
    );
    if !sockets.is_empty() {
        let spread = window.mul_f64(SPREAD);
        let batches = (spread.as_millis() / STEP.as_millis()).max(1) as usize;
        let per_batch = sockets.len().div_ceil(batches);
        for (i, batch) in sockets.chunks(per_batch).enumerate() {
            // Pace against the clock, not by accumulating sleeps.
            let at = start + STEP * i as u32;
            actix_rt::time::sleep_until(at.into()).await;
            close(batch, CloseCode::ServiceRestart);
        }
    }
    until_empty(node, end).await;
    let stragglers: Vec<Control> = node.sockets.iter().map(|s| s.control.clone()).collect();
    if !stragglers.is_empty() {
        tracing::info!(
            sockets = stragglers.len(),
            "drain window over; closing the rest with 1001"
        );
        close(&stragglers, CloseCode::GoingAway);
        let grace = Duration::from_millis(node.config.load().socket.close_timeout_ms) + STEP;
        until_empty(node, Instant::now() + grace).await;
    }
}
