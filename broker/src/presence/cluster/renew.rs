//! The lease (§13): every third of `cluster.lease_ms` a node renews its
//! lease on every channel it has members of (which gives each of the
//! channel's keys a lease more, `scripts.rs`), registers its members
//! again where Redis lost them or a change may not have reached it, and
//! brings every channel it sends diffs of in line with Redis
//! (`sync.rs`), so a dead node's members become leaves and missed events
//! are made up.
//!
//! Nothing here spans two channels in one command on Redis Cluster: a
//! channel's keys share its hash tag, and the node finds its channels in
//! memory, one script call per channel, sent concurrently (256 at a time;
//! on one Redis they share the connection's pipeline).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::future::join_all;

use super::reply::Reply;
use super::wire::{Wire, sort_key};
use super::{COMMAND_TIMEOUT, RedisPresence};
use crate::presence::Presence;
use crate::protocol::presence::Member;

/// Channels renewed per round.
const CHUNK: usize = 256;

impl RedisPresence {
    /// Every third of the lease: renew this node's leases and bring each
    /// channel it sends diffs of in line with Redis.
    pub(super) async fn renew_loop(self: Arc<Self>) {
        let every = Duration::from_millis((self.lease_ms / 3).max(50));
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(p) = self.presence.get().and_then(Weak::upgrade) else {
                return;
            };
            let ok = tokio::time::timeout(COMMAND_TIMEOUT * 5, self.renew(&p)).await;
            self.set_up(matches!(ok, Ok(Ok(()))));
            if self.is_up() {
                // Every channel this node sends diffs of (members with
                // `join_leave`, or observers), in rounds of concurrent calls.
                let diffed: Vec<_> = p
                    .channel_names()
                    .into_iter()
                    .filter_map(|c| {
                        let state = p.state(&c)?;
                        let join_leave = state.lock().rule.join_leave;
                        join_leave.then_some((c, state))
                    })
                    .collect();
                for chunk in diffed.chunks(CHUNK) {
                    join_all(chunk.iter().map(|(c, s)| p.sync(&self, c, s, false))).await;
                }
            }
        }
    }

    /// Renews this node's lease on every channel it has members of, and
    /// registers them again where Redis does not hold it (or on a
    /// rewrite).
    async fn renew(self: &Arc<Self>, p: &Presence) -> redis::RedisResult<()> {
        let Some(mut conn) = self.conn().await else {
            return Err((redis::ErrorKind::Io, "Redis not reachable").into());
        };
        let channels: Vec<Arc<str>> = p
            .channel_names()
            .into_iter()
            .filter(|c| p.state(c).is_some_and(|s| !s.lock().local.is_empty()))
            .collect();
        if channels.is_empty() {
            // One node, never a `PING` to every master (`Conn::ping_one`).
            conn.ping_one().await?;
            self.rewrite.store(false, Ordering::Release);
            return Ok(());
        }
        let rewrite = self.rewrite.swap(false, Ordering::AcqRel);
        let result = self.renew_channels(p, &channels, rewrite).await;
        if result.is_err() {
            self.rewrite.store(true, Ordering::Release);
        }
        result
    }

    async fn renew_channels(
        self: &Arc<Self>,
        p: &Presence,
        channels: &[Arc<str>],
        rewrite: bool,
    ) -> redis::RedisResult<()> {
        for chunk in channels.chunks(CHUNK) {
            let renewed = if rewrite {
                vec![0; chunk.len()]
            } else {
                let calls = chunk.iter().map(|c| self.renew_one(c));
                join_all(calls)
                    .await
                    .into_iter()
                    .collect::<redis::RedisResult<Vec<i64>>>()?
            };
            let again: Vec<(&Arc<str>, Vec<Member>)> = chunk
                .iter()
                .zip(renewed)
                .filter(|(_, status)| *status != 1)
                .filter_map(|(c, _)| {
                    let local: Vec<Member> = p.state(c)?.lock().local.values().cloned().collect();
                    (!local.is_empty()).then_some((c, local))
                })
                .collect();
            if again.is_empty() {
                continue;
            }
            // Odd while the registrations run: a join or leave crossing
            // them asks for the next rewrite (`settle`).
            self.registering.fetch_add(1, Ordering::AcqRel);
            let written = join_all(again.iter().map(|(c, local)| self.register(c, local))).await;
            self.registering.fetch_add(1, Ordering::AcqRel);
            written
                .into_iter()
                .collect::<redis::RedisResult<Vec<()>>>()?;
        }
        Ok(())
    }

    /// One channel's lease: 1 renewed, 0 not held by Redis.
    async fn renew_one(self: &Arc<Self>, channel: &str) -> redis::RedisResult<i64> {
        let mut conn = self
            .conn()
            .await
            .ok_or_else(|| redis::RedisError::from((redis::ErrorKind::Io, "not reachable")))?;
        let mut inv = self.scripts.renew.prepare_invoke();
        for k in self.keys(channel) {
            inv.key(k);
        }
        inv.arg(&self.node).arg(self.lease_ms);
        let value = inv.invoke_async::<redis::Value>(&mut conn).await?;
        let mut r = Reply::new(value);
        let status = r.int();
        self.gone(channel, r.members());
        Ok(status)
    }

    /// This node's members of `channel` written in full; its own that
    /// Redis still held but that left meanwhile are told as leaves.
    async fn register(self: &Arc<Self>, channel: &str, local: &[Member]) -> redis::RedisResult<()> {
        let mut conn = self
            .conn()
            .await
            .ok_or_else(|| redis::RedisError::from((redis::ErrorKind::Io, "not reachable")))?;
        let mut inv = self.scripts.register.prepare_invoke();
        for k in self.keys(channel) {
            inv.key(k);
        }
        inv.arg(&self.node).arg(self.lease_ms);
        for m in local {
            let stored = serde_json::to_string(&Wire::from(m)).unwrap_or_default();
            inv.arg(sort_key(&m.user, &m.conn_id)).arg(stored);
        }
        let value = inv.invoke_async::<redis::Value>(&mut conn).await?;
        let mut r = Reply::new(value);
        r.int();
        self.gone(channel, r.members());
        Ok(())
    }
}
