//! The lease (§13): every third of `cluster.lease_ms` a node renews its
//! member hashes (registering its members again where Redis lost them)
//! and re-reads every channel it has members or observers of, so a dead
//! node's vanished members become leaves and missed events are made up.
//!
//! Nothing here spans two channels in one command on Redis Cluster: a
//! channel's keys share its hash tag, and the node finds its own hashes
//! from the channels it holds in memory, one command per channel (sent
//! concurrently) instead of a pipeline or a script across slots. On one
//! Redis the renewals of up to 256 channels go in one pipeline.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::future::join_all;

use super::wire::Wire;
use super::{COMMAND_TIMEOUT, RedisPresence};
use crate::cluster::redis::Conn;
use crate::presence::Presence;
use crate::protocol::presence::Member;

/// Channels renewed per round (one pipeline on one Redis, this many
/// concurrent commands on Redis Cluster).
const CHUNK: usize = 256;

impl RedisPresence {
    /// Every third of the lease: renew this node's hashes and re-read
    /// each channel it has members or observers of.
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
                for channel in p.channel_names() {
                    self.reconcile(&p, &channel).await;
                }
            }
        }
    }

    /// Renews (or, if Redis lost it, registers again) this node's hash of
    /// every channel it has members of.
    async fn renew(&self, p: &Presence) -> redis::RedisResult<()> {
        let Some(mut conn) = self.conn().await else {
            return Err((redis::ErrorKind::Io, "Redis not reachable").into());
        };
        let channels: Vec<Arc<str>> = p
            .channel_names()
            .into_iter()
            .filter(|c| p.state(c).is_some_and(|s| !s.lock().local.is_empty()))
            .collect();
        if channels.is_empty() {
            let _: () = redis::cmd("PING").query_async(&mut conn).await?;
            self.rewrite.store(false, Ordering::Release);
            return Ok(());
        }
        let rewrite = self.rewrite.swap(false, Ordering::AcqRel);
        let result = self.renew_channels(p, &conn, &channels, rewrite).await;
        if result.is_err() {
            self.rewrite.store(true, Ordering::Release);
        }
        result
    }

    /// Renews `channels`' hashes of this node; with `rewrite` (or where
    /// Redis lost one) writes its members in full.
    async fn renew_channels(
        &self,
        p: &Presence,
        conn: &Conn,
        channels: &[Arc<str>],
        rewrite: bool,
    ) -> redis::RedisResult<()> {
        for chunk in channels.chunks(CHUNK) {
            let kept = self.expire(conn, chunk).await?;
            let again = chunk.iter().zip(kept).filter_map(|(c, kept)| {
                let local: Vec<Member> = p.state(c)?.lock().local.values().cloned().collect();
                ((kept != 1 || rewrite) && !local.is_empty()).then(|| self.register(c, &local))
            });
            // One slot each: a transaction per channel.
            let written = join_all(again.map(|pipe| {
                let mut conn = conn.clone();
                async move { pipe.query_async::<()>(&mut conn).await }
            }))
            .await;
            written
                .into_iter()
                .collect::<redis::RedisResult<Vec<()>>>()?;
        }
        Ok(())
    }

    /// `PEXPIRE` of this node's hash of each channel: 1 where it was
    /// there.
    async fn expire(&self, conn: &Conn, chunk: &[Arc<str>]) -> redis::RedisResult<Vec<i64>> {
        if !self.sharded {
            let mut pipe = redis::pipe();
            for c in chunk {
                pipe.cmd("PEXPIRE").arg(self.own_hash(c)).arg(self.lease_ms);
            }
            return pipe.query_async(&mut conn.clone()).await;
        }
        join_all(chunk.iter().map(|c| {
            let mut conn = conn.clone();
            let cmd = redis::cmd("PEXPIRE")
                .arg(self.own_hash(c))
                .arg(self.lease_ms)
                .to_owned();
            async move { cmd.query_async::<i64>(&mut conn).await }
        }))
        .await
        .into_iter()
        .collect()
    }

    /// This node's members of `channel` written in full, in one
    /// transaction on the channel's slot.
    fn register(&self, channel: &str, local: &[Member]) -> redis::Pipeline {
        let hash = self.own_hash(channel);
        let mut pipe = redis::pipe();
        pipe.atomic().del(&hash).ignore();
        for m in local {
            let value = serde_json::to_string(&Wire::from(m)).unwrap_or_default();
            pipe.hset(&hash, &*m.conn_id, value).ignore();
        }
        pipe.pexpire(&hash, self.lease_ms as i64).ignore();
        pipe.sadd(self.set_key(channel), &self.node).ignore();
        pipe
    }

    /// Brings this node's view of `channel` in line with Redis: members
    /// that vanished there (a dead node's) leave, missed ones join.
    async fn reconcile(&self, p: &Arc<Presence>, channel: &Arc<str>) {
        let Some(truth) = self.read(channel).await else {
            return;
        };
        let Some(state) = p.state(channel) else {
            return;
        };
        let (joins, leaves) = {
            let st = state.lock();
            let joins: Vec<Member> = truth
                .iter()
                .filter(|m| {
                    !st.roster
                        .members
                        .get(&m.user)
                        .is_some_and(|c| c.contains_key(&m.conn_id))
                })
                .collect();
            let leaves: Vec<Member> = st
                .roster
                .iter()
                .filter(|m| {
                    !st.local.contains_key(&m.conn_id)
                        && !truth
                            .members
                            .get(&m.user)
                            .is_some_and(|c| c.contains_key(&m.conn_id))
                })
                .collect();
            (joins, leaves)
        };
        if !joins.is_empty() || !leaves.is_empty() {
            p.remote(channel, joins, leaves);
        }
    }
}
