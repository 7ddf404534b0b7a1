//! Bringing a failed shard's slots back (Redis Cluster): once a down
//! slot's probe key answers again (its master came back, or a replica took
//! over and the cluster connection followed the new topology), this node
//! re-syncs what it holds there, as after a whole-Redis outage but for
//! that slot only: raises the channel counters above the `seq`s it knows
//! (a promoted replica may have missed the last writes), re-asserts its
//! connection counts and lease copies, re-subscribes the control topic if
//! it lives there, renews the node lease if that does. Only then are those channels and accounts shared again;
//! the subscription task then subscribes the slot's channels on the shard
//! now owning them and catches each up from history on what it missed
//! since the last `seq` this node saw (published on the promoted master
//! before this node listened there), before dispatching later pushes.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::future::{join_all, try_join_all};

use super::slots::slot_of;
use super::{COMMAND_TIMEOUT, Conn, RedisBridge, SubCmd};

/// Down slots re-synced concurrently.
const BURST: usize = 64;

/// What this node holds in one slot.
#[derive(Debug, Default)]
struct Held {
    /// Channels and the last `seq` this node knows of each.
    seqs: Vec<(Arc<str>, u64)>,
    /// Accounts and this node's connection count of each.
    accounts: Vec<(String, u32)>,
    /// Channels with local subscribers.
    interest: Vec<Arc<str>>,
    control: bool,
    lease: bool,
}

impl RedisBridge {
    /// Re-syncs down slots every lease third, or at once when one goes
    /// down (in case the shard is already back).
    pub(super) async fn recovery_loop(self: Arc<Self>) {
        let mut tick = tokio::time::interval(Duration::from_millis((self.lease_ms / 3).max(50)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = self.recover_now.notified() => {}
            }
            let connected =
                self.pubsub_ok.load(Ordering::Acquire) && self.cmd_ok.load(Ordering::Acquire);
            if !connected || !self.down.any() {
                continue;
            }
            let Some(conn) = self.conn.get().cloned() else {
                continue;
            };
            let down = self.down.snapshot();
            let mut held = self.held_in(&down);
            let work: Vec<(u16, String, Held)> = down
                .into_iter()
                .map(|(slot, probe)| (slot, probe, held.remove(&slot).unwrap_or_default()))
                .collect();
            let me: &RedisBridge = &self;
            for chunk in work.chunks(BURST) {
                join_all(chunk.iter().map(|(slot, probe, held)| {
                    let conn = conn.clone();
                    async move {
                        let fut = me.recover_slot(conn, probe, held);
                        if let Ok(Ok(())) = tokio::time::timeout(COMMAND_TIMEOUT * 5, fut).await {
                            me.down.clear(*slot);
                            let _ = me.cmds.send(SubCmd::Resume(*slot, held.interest.clone()));
                        }
                    }
                }))
                .await;
            }
            if !self.down.any() {
                tracing::info!("every Redis Cluster shard reachable again");
            }
            self.refresh_up();
        }
    }

    /// This node's state in the `down` slots, by slot.
    fn held_in(&self, down: &HashMap<u16, String>) -> HashMap<u16, Held> {
        let mut held: HashMap<u16, Held> = HashMap::new();
        for (channel, seq) in self.hub.seqs() {
            if let Some(h) = held_at(&mut held, down, &self.key("seq", &channel)) {
                h.seqs.push((channel, seq));
            }
        }
        for (account, n) in self.local.all_connections() {
            if let Some(h) = held_at(&mut held, down, &self.key("conns", &account)) {
                h.accounts.push((account, n));
            }
        }
        let interest: Vec<Arc<str>> = self.interest.lock().keys().cloned().collect();
        for channel in interest {
            if let Some(h) = held_at(&mut held, down, &self.topic(&channel)) {
                h.interest.push(channel);
            }
        }
        if let Some(h) = held_at(&mut held, down, &self.control_topic()) {
            h.control = true;
        }
        if let Some(h) = held_at(&mut held, down, &self.nodes_key()) {
            h.lease = true;
        }
        held
    }

    /// Probes one down slot, then re-syncs what this node holds there.
    async fn recover_slot(&self, conn: Conn, probe: &str, held: &Held) -> redis::RedisResult<()> {
        let mut c = conn.clone();
        redis::cmd("EXISTS")
            .arg(probe)
            .query_async::<i64>(&mut c)
            .await?;
        try_join_all(held.seqs.iter().map(|(channel, seq)| {
            let mut conn = conn.clone();
            let cmd = self.raise_seq(channel, *seq);
            async move { cmd.query_async::<i64>(&mut conn).await }
        }))
        .await?;
        try_join_all(held.accounts.iter().map(|(account, n)| {
            let mut conn = conn.clone();
            let inv = self.renew_invocation(account, Some(*n));
            async move { inv.invoke_async::<i64>(&mut conn).await }
        }))
        .await?;
        let Some(cluster) = self.pubsub.get() else {
            return Ok(());
        };
        if held.control {
            cluster.clone().subscribe(self.control_topic()).await?;
        }
        if held.lease {
            self.renew_node_lease(&mut conn.clone()).await?;
        }
        Ok(())
    }

    /// After `slot` came back and its channels were subscribed again
    /// (`subscribed`, by the subscription task): any whose interest
    /// changed meanwhile (or that were added while it was down) are
    /// touched again.
    pub(super) fn retouch(&self, slot: u16, subscribed: &[Arc<str>]) {
        let interest = self.interest.lock();
        let stale = subscribed
            .iter()
            .filter(|c| !interest.contains_key(*c))
            .chain(
                interest
                    .iter()
                    .filter(|(c, i)| !i.live && slot_of(&self.topic(c)) == slot)
                    .map(|(c, _)| c),
            );
        for c in stale {
            let _ = self.cmds.send(SubCmd::Touch(c.clone()));
        }
    }
}

/// The entry of the down slot holding `key`, if its slot is down.
fn held_at<'a>(
    held: &'a mut HashMap<u16, Held>,
    down: &HashMap<u16, String>,
    key: &str,
) -> Option<&'a mut Held> {
    let slot = slot_of(key);
    down.contains_key(&slot)
        .then(move || held.entry(slot).or_default())
}
