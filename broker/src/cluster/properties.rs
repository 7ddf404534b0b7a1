//! Property test of the outage share: during a Redis outage each of N live
//! nodes enforces 1/N of every cluster-wide limit by itself, and whatever
//! the nodes see, the fleet together never passes the whole budget.

use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::{LocalLimits, scale_cap};
use crate::config::Limits;

proptest! {
    #[test]
    fn outage_share_never_lets_the_fleet_exceed_the_whole_budget(
        nodes in 1usize..6,
        burst in 1u32..400,
        rate in 1.0f64..300.0,
        max_connections in 1u32..50,
        ops in prop::collection::vec((0usize..6, 0u64..5000, 1u32..50, 0u64..90_000, 0u8..4), 1..300),
    ) {
        let limits = Limits {
            account_burst: burst,
            account_messages_per_sec: rate,
            handshake_burst: burst,
            handshake_refill_per_sec: rate,
            ..Limits::default()
        };
        let share = 1.0 / nodes as f64;
        let fleet: Vec<LocalLimits> = (0..nodes).map(|_| LocalLimits::default()).collect();
        let t0 = Instant::now();
        let mut t = t0;
        let (mut charged, mut handshakes, mut keys) = (0.0, 0.0, 0.0);
        for (node, dt, units, waited_ms, what) in ops {
            t += Duration::from_millis(dt);
            let local = &fleet[node % nodes];
            match what {
                0 => {
                    // A sampled charge whose first unit came a while ago
                    // (never before the run started).
                    let since = t.checked_sub(Duration::from_millis(waited_ms)).unwrap_or(t0).max(t0);
                    if local.charge_account("acct", units, since, &limits, share, t).allowed {
                        charged += f64::from(units);
                    }
                }
                1 => {
                    if local.handshake("acct", &limits, share, t).is_ok() {
                        handshakes += 1.0;
                    }
                }
                2 => {
                    let cost = f64::from(units) / 10.0;
                    if local.charge_key("key", cost, f64::from(burst), rate, share, t).allowed {
                        keys += cost;
                    }
                }
                _ => local.sweep(t),
            }
            let whole = f64::from(burst) + rate * (t - t0).as_secs_f64() + 1e-6;
            prop_assert!(charged <= whole, "account: {charged} charged, budget {whole}");
            prop_assert!(handshakes <= whole, "handshakes: {handshakes}, budget {whole}");
            prop_assert!(keys <= whole, "API key: {keys}, budget {whole}");
        }
        // Connection caps round down, but never below one per node.
        let caps = scale_cap(max_connections, share) * nodes as u32;
        prop_assert!(caps <= max_connections.max(nodes as u32));
    }
}
