//! Wall-clock time as the cluster agrees on it: ban expiries, overview
//! samples and snapshots are Unix milliseconds, the same on every node.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch.
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
