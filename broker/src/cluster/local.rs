//! The cluster-wide limits enforced by one node alone: all of them in
//! single-node mode, a share of each during a Redis outage (§7).
//!
//! With a share `s`: rates and bursts scale by `s` exactly, integer caps
//! round down but never below 1, and buckets start full.

use std::time::{Duration, Instant};

use dashmap::DashMap;
use dashmap::mapref::one::RefMut;

use super::{CapReached, Charged, KeyCharge};
use crate::config::Limits;
use crate::limiter::{KeyedBuckets, SampledBucket};
use crate::protocol::wire::BudgetView;

/// What an account's bucket shows a client after a charge.
fn view(bucket: &mut SampledBucket, now: Instant) -> BudgetView {
    BudgetView {
        remaining: bucket.remaining(now).max(0.0) as u64,
        capacity: bucket.capacity() as u64,
        refill_per_sec: bucket.rate(),
    }
}

/// `cap` scaled by `share`: rounded down, never below 1.
pub fn scale_cap(cap: u32, share: f64) -> u32 {
    ((f64::from(cap) * share).floor() as u32).max(1)
}

#[derive(Debug, Default)]
pub struct LocalLimits {
    accounts: DashMap<String, SampledBucket, foldhash::fast::RandomState>,
    conns: DashMap<String, u32>,
    identities: KeyedBuckets<String>,
    keys: KeyedBuckets<String>,
}

impl LocalLimits {
    /// One sampled charge of `units`, the first admitted at `since`. A
    /// missing bucket (first charge, or forgotten once full) is created
    /// full as of `since`, so the charge keeps the refill of its wait.
    pub fn charge_account(
        &self,
        account: &str,
        units: u32,
        since: Instant,
        limits: &Limits,
        share: f64,
        now: Instant,
    ) -> Charged {
        let mut bucket = self.account(account, limits, share, since.min(now), now);
        let result = bucket.charge(f64::from(units), since, now);
        Charged {
            allowed: result.is_ok(),
            retry_after: result.err().unwrap_or_default(),
            view: view(&mut bucket, now),
        }
    }

    /// Takes `units` from the account's budget even below zero (a debt:
    /// a recovery's history, `charge::recovery`); its charges after it are
    /// refused until the refill pays it off. Always `allowed`.
    pub fn owe_account(
        &self,
        account: &str,
        units: u32,
        limits: &Limits,
        share: f64,
        now: Instant,
    ) -> Charged {
        let mut bucket = self.account(account, limits, share, now, now);
        bucket.owe(f64::from(units), now);
        Charged {
            allowed: true,
            retry_after: Duration::ZERO,
            view: view(&mut bucket, now),
        }
    }

    /// The account's bucket at its plan's numbers times `share` (created
    /// full as of `created` when missing, reconfigured when the plan or the
    /// share changed).
    fn account(
        &self,
        account: &str,
        limits: &Limits,
        share: f64,
        created: Instant,
        now: Instant,
    ) -> RefMut<'_, String, SampledBucket> {
        let cap = f64::from(limits.account_burst) * share;
        let rate = limits.account_messages_per_sec * share;
        let mut bucket = match self.accounts.get_mut(account) {
            Some(b) => b,
            None => self
                .accounts
                .entry(account.to_owned())
                .or_insert_with(|| SampledBucket::new(cap, rate, created)),
        };
        if bucket.capacity() != cap || bucket.rate() != rate {
            bucket.reconfigure(cap, rate, now);
        }
        bucket
    }

    /// Open connections this node counts for `account`.
    pub fn connections(&self, account: &str) -> u32 {
        self.conns.get(account).map_or(0, |n| *n)
    }

    /// Every account with connections on this node, and how many.
    pub fn all_connections(&self) -> Vec<(String, u32)> {
        self.conns
            .iter()
            .map(|e| (e.key().clone(), *e.value()))
            .collect()
    }

    /// Counts a connection if under `max` (already scaled by the caller).
    pub fn reserve_connection(&self, account: &str, max: u32) -> Result<u32, CapReached> {
        let mut n = self.conns.entry(account.to_owned()).or_insert(0);
        if *n >= max {
            return Err(CapReached { open: *n, max });
        }
        *n += 1;
        Ok(*n)
    }

    /// Counts a connection unconditionally (the cluster already admitted it).
    pub fn count_connection(&self, account: &str) {
        *self.conns.entry(account.to_owned()).or_insert(0) += 1;
    }

    pub fn release_connection(&self, account: &str) {
        self.conns.remove_if_mut(account, |_, n| {
            *n = n.saturating_sub(1);
            *n == 0
        });
    }

    pub fn handshake(
        &self,
        account: &str,
        limits: &Limits,
        share: f64,
        now: Instant,
    ) -> Result<(), Duration> {
        self.identities.try_take(
            account,
            1.0,
            f64::from(limits.handshake_burst) * share,
            limits.handshake_refill_per_sec * share,
            now,
        )
    }

    pub fn charge_key(
        &self,
        key: &str,
        cost: f64,
        capacity: f64,
        rate: f64,
        share: f64,
        now: Instant,
    ) -> KeyCharge {
        let (cap, rate) = (capacity * share, rate * share);
        let result = self.keys.try_take(key, cost, cap, rate, now);
        let remaining = self.keys.remaining(key, cap, now);
        KeyCharge {
            allowed: result.is_ok(),
            limit: cap as u64,
            remaining: remaining.max(0.0) as u64,
            reset: Duration::try_from_secs_f64(((cap - remaining) / rate).max(0.0))
                .unwrap_or_default(),
            retry_after: result.err().unwrap_or_default(),
        }
    }

    /// [`LocalLimits::charge_key`] taken even below zero (a debt, as
    /// [`LocalLimits::owe_account`]). Always `allowed`.
    pub fn owe_key(
        &self,
        key: &str,
        cost: f64,
        capacity: f64,
        rate: f64,
        share: f64,
        now: Instant,
    ) -> KeyCharge {
        let (cap, rate) = (capacity * share, rate * share);
        self.keys.force_take(key, cost, cap, rate, now);
        let remaining = self.keys.remaining(key, cap, now);
        KeyCharge {
            allowed: true,
            limit: cap as u64,
            remaining: remaining.max(0.0) as u64,
            reset: Duration::try_from_secs_f64(((cap - remaining) / rate).max(0.0))
                .unwrap_or_default(),
            retry_after: Duration::ZERO,
        }
    }

    /// Gives `units` back to an account's budget (capped at its capacity);
    /// the balance after it.
    pub fn refund_account(&self, account: &str, units: f64, now: Instant) -> Option<u64> {
        let mut b = self.accounts.get_mut(account)?;
        b.refund(units, now);
        Some(b.remaining(now).max(0.0) as u64)
    }

    /// Gives `units` back to a key's bucket (capped at its capacity); the
    /// balance after it.
    pub fn refund_key(
        &self,
        key: &str,
        units: f64,
        capacity: f64,
        share: f64,
        now: Instant,
    ) -> u64 {
        self.keys.refund(key, units);
        self.keys.remaining(key, capacity * share, now).max(0.0) as u64
    }

    /// Forgets buckets that refilled.
    pub fn sweep(&self, now: Instant) {
        self.accounts.retain(|_, b| !b.is_idle(now));
        self.identities.sweep(now);
        self.keys.sweep(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refunds_give_back_up_to_capacity() {
        let now = Instant::now();
        let local = LocalLimits::default();
        let k = local.charge_key("k", 8.0, 10.0, 1.0, 1.0, now);
        assert_eq!(k.remaining, 2);
        assert_eq!(local.refund_key("k", 5.0, 10.0, 1.0, now), 7);
        assert_eq!(local.refund_key("k", 50.0, 10.0, 1.0, now), 10, "capped");
        let limits = Limits::default();
        local.charge_account("a", 150, now, &limits, 1.0, now);
        assert_eq!(local.refund_account("a", 100.0, now), Some(150));
        assert_eq!(local.refund_account("a", 100.0, now), Some(200), "capped");
        assert_eq!(local.refund_account("none", 1.0, now), None);
    }

    #[test]
    fn a_debt_goes_below_zero_and_refuses_until_the_refill_pays_it() {
        let now = Instant::now();
        let local = LocalLimits::default();
        // A key of 10 at 1/s owes 25: 15 below zero.
        assert!(local.owe_key("k", 25.0, 10.0, 1.0, 1.0, now).allowed);
        assert!(!local.charge_key("k", 1.0, 10.0, 1.0, 1.0, now).allowed);
        let later = now + Duration::from_secs(16);
        assert!(local.charge_key("k", 1.0, 10.0, 1.0, 1.0, later).allowed);
        // An account budget (200, 100/s by default) owes 500.
        let limits = Limits::default();
        let owed = local.owe_account("a", 500, &limits, 1.0, now);
        assert!(owed.allowed);
        assert_eq!(owed.view.remaining, 0, "shown as empty, not negative");
        assert!(!local.charge_account("a", 1, now, &limits, 1.0, now).allowed);
        let later = now + Duration::from_secs(4);
        assert!(
            local
                .charge_account("a", 1, later, &limits, 1.0, later)
                .allowed
        );
    }

    #[test]
    fn caps_round_down_but_never_below_one() {
        assert_eq!(scale_cap(8, 1.0), 8);
        assert_eq!(scale_cap(8, 0.5), 4);
        assert_eq!(scale_cap(8, 1.0 / 3.0), 2);
        assert_eq!(scale_cap(1, 0.25), 1);
    }

    #[test]
    fn a_share_scales_rates_and_bursts_exactly() {
        let local = LocalLimits::default();
        let limits = Limits::default();
        let now = Instant::now();
        let c = local.charge_account("a", 25, now, &limits, 0.5, now);
        assert!(c.allowed);
        assert_eq!((c.view.capacity, c.view.refill_per_sec), (100, 50.0));
        for _ in 0..3 {
            local.charge_account("a", 25, now, &limits, 0.5, now);
        }
        assert!(
            !local
                .charge_account("a", 25, now, &limits, 0.5, now)
                .allowed,
            "100 of 100 used"
        );
    }

    #[test]
    fn connections_count_and_release() {
        let local = LocalLimits::default();
        assert_eq!(local.reserve_connection("a", 2), Ok(1));
        assert_eq!(local.reserve_connection("a", 2), Ok(2));
        assert_eq!(
            local.reserve_connection("a", 2),
            Err(CapReached { open: 2, max: 2 })
        );
        local.release_connection("a");
        assert_eq!(local.connections("a"), 1);
        local.release_connection("a");
        assert!(local.all_connections().is_empty());
    }

    #[test]
    fn key_charge_reports_headers() {
        let local = LocalLimits::default();
        let now = Instant::now();
        let k = local.charge_key("k", 1.0, 10.0, 5.0, 1.0, now);
        assert_eq!((k.allowed, k.limit, k.remaining), (true, 10, 9));
        assert_eq!(k.reset, Duration::from_millis(200));
    }

    #[test]
    fn looping_identity_gets_its_burst_then_one_per_refill_interval() {
        let local = LocalLimits::default();
        let limits = Limits::default();
        let t0 = Instant::now();
        let mut admitted = Vec::new();
        // A reconnect loop: one attempt every 10 ms for 10 s (seed 002).
        for i in 0..1000u64 {
            let now = t0 + Duration::from_millis(i * 10);
            if local.handshake("acme", &limits, 1.0, now).is_ok() {
                admitted.push(i * 10);
            }
        }
        assert_eq!(
            &admitted[..10],
            &[0, 10, 20, 30, 40, 50, 60, 70, 80, 90],
            "burst of 10"
        );
        let after: Vec<_> = admitted[10..].windows(2).map(|w| w[1] - w[0]).collect();
        assert!(
            after.iter().all(|gap| *gap == 2000),
            "then one per 2 s: {after:?}"
        );
    }
}
