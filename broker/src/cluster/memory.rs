//! Single-node mode: the hub is the whole cluster and every cluster-wide
//! limit is enforced here in full.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{
    Bridge, Broker, CapReached, ChannelRead, Charged, KeyCharge, LimiterStore, LocalLimits, Pending,
};
use crate::config::Limits;
use crate::hub::{Hub, Joined, Subscriber};
use crate::idempotency::{Keyed, Published};

#[derive(Debug)]
pub struct MemoryBridge {
    hub: Arc<Hub>,
    local: LocalLimits,
}

impl MemoryBridge {
    pub fn new(hub: Arc<Hub>) -> MemoryBridge {
        MemoryBridge {
            hub,
            local: LocalLimits::default(),
        }
    }

    pub fn sweep(&self) {
        self.local.sweep(Instant::now());
    }
}

impl Broker for MemoryBridge {
    /// One node: the node's idempotency table is the whole record of
    /// keys (it claimed `_key` before calling), so this always publishes.
    fn publish(&self, channel: &str, data: &str, _key: Option<Keyed<'_>>) -> Pending<Published> {
        Pending::Ready(Published::first(self.hub.publish(channel, data)))
    }

    fn subscribe(&self, channel: &str, sub: Subscriber, since: Option<u64>) -> Pending<Joined> {
        Pending::Ready(self.hub.subscribe(channel, sub, since))
    }

    fn unsubscribe(&self, channel: &str, conn: u64) {
        self.hub.unsubscribe(channel, conn);
    }

    fn subscribers(&self, channel: &str) -> u64 {
        self.hub.subscriber_count(channel)
    }

    fn read_channel(&self, channel: &str, last: usize, after: u64) -> Pending<ChannelRead> {
        let (seq, held) = self.hub.held(channel);
        Pending::Ready(ChannelRead::newest(seq, held, last, after))
    }

    fn occupied(&self, prefix: &str) -> Vec<(Arc<str>, u64)> {
        self.hub.occupied(prefix)
    }
}

impl LimiterStore for MemoryBridge {
    fn charge_account(
        &self,
        account: &str,
        units: u32,
        since: Instant,
        limits: &Limits,
    ) -> Pending<Charged> {
        Pending::Ready(self.local.charge_account(
            account,
            units,
            since,
            limits,
            1.0,
            Instant::now(),
        ))
    }

    fn announce_breach(&self, _: &str) {}

    fn reserve_connection(&self, account: &str, max: u32) -> Pending<Result<u32, CapReached>> {
        Pending::Ready(self.local.reserve_connection(account, max))
    }

    fn release_connection(&self, account: &str) {
        self.local.release_connection(account);
    }

    fn handshake(&self, account: &str, limits: &Limits) -> Pending<Result<(), Duration>> {
        Pending::Ready(self.local.handshake(account, limits, 1.0, Instant::now()))
    }

    fn charge_key(&self, key: &str, cost: f64, capacity: f64, rate: f64) -> Pending<KeyCharge> {
        Pending::Ready(
            self.local
                .charge_key(key, cost, capacity, rate, 1.0, Instant::now()),
        )
    }

    fn owe_key(&self, key: &str, cost: f64, capacity: f64, rate: f64) -> Pending<KeyCharge> {
        Pending::Ready(
            self.local
                .owe_key(key, cost, capacity, rate, 1.0, Instant::now()),
        )
    }

    fn owe_account(&self, account: &str, units: u32, limits: &Limits) -> Pending<Charged> {
        Pending::Ready(
            self.local
                .owe_account(account, units, limits, 1.0, Instant::now()),
        )
    }

    fn refund_key(&self, key: &str, units: f64, capacity: f64, _rate: f64) -> Pending<u64> {
        Pending::Ready(
            self.local
                .refund_key(key, units, capacity, 1.0, Instant::now()),
        )
    }

    fn refund_account(&self, account: &str, units: u32, limits: &Limits) -> Pending<u64> {
        Pending::Ready(
            self.local
                .refund_account(account, f64::from(units), Instant::now())
                .unwrap_or(u64::from(limits.account_burst)),
        )
    }

    fn share(&self) -> f64 {
        1.0
    }
}

impl Bridge for MemoryBridge {
    fn is_up(&self) -> bool {
        true
    }

    fn start(self: Arc<Self>) -> Pin<Box<dyn Future<Output = ()>>> {
        actix_rt::spawn(async move {
            let mut tick = actix_rt::time::interval(Duration::from_secs(10));
            loop {
                tick.tick().await;
                self.sweep();
            }
        });
        Box::pin(std::future::ready(()))
    }
}
