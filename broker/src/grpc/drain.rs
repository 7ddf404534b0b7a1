//! The gRPC side of the graceful drain (§7): new calls get `UNAVAILABLE`
//! (the service checks [`crate::node::Node::is_draining`]), and each open
//! stream ends at its own random moment before the drain deadline, so its
//! client's reconnects land spread out on the other nodes.

use tokio::sync::watch;
use tokio::time::Instant;

/// Resolves when this stream should end for the drain: at a random point
/// between the drain signal and its deadline. Never resolves otherwise.
pub async fn drained(mut rx: watch::Receiver<Option<Instant>>) {
    let deadline = loop {
        if let Some(d) = *rx.borrow_and_update() {
            break d;
        }
        if rx.changed().await.is_err() {
            // The server is gone without draining: nothing to wait for.
            std::future::pending::<()>().await;
        }
    };
    let left = deadline.saturating_duration_since(Instant::now());
    tokio::time::sleep(left.mul_f64(rand::random::<f64>())).await;
}
