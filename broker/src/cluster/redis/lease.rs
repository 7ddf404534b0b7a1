//! Leases and re-synchronisation: the node's lease renewal, and what a node
//! does before it reports itself up after (re)connecting.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{COMMAND_TIMEOUT, Conn, RedisBridge, SEQ_TTL_MS, scripts};

impl RedisBridge {
    /// After a (re)connection: raise every channel counter above the `seq`s
    /// this node knows, re-assert this node's connection counts, renew the
    /// lease. Only then is the node up.
    pub(super) async fn resync(&self) -> redis::RedisResult<()> {
        let Some(mut conn) = self.conn.get().cloned() else {
            return Err((redis::ErrorKind::Client, "not started").into());
        };
        if self.sharded {
            // No pipeline may cross slots: one command per key.
            return self.resync_sharded(&mut conn).await;
        }
        for chunk in self.hub.seqs().chunks(256) {
            let mut pipe = redis::pipe();
            for (channel, seq) in chunk {
                pipe.cmd("EVAL")
                    .arg(scripts::RAISE)
                    .arg(1)
                    .arg(self.key("seq", channel))
                    .arg(seq.to_string())
                    .arg(SEQ_TTL_MS.max(self.history().1))
                    .ignore();
            }
            pipe.query_async::<()>(&mut conn).await?;
        }
        let counts = self.local.all_connections();
        for chunk in counts.chunks(256) {
            let mut pipe = redis::pipe();
            for (account, n) in chunk {
                let key = self.key("conns", account);
                pipe.hset(&key, &self.member, *n).ignore();
                pipe.pexpire(&key, self.conns_ttl_ms() as i64).ignore();
            }
            pipe.query_async::<()>(&mut conn).await?;
        }
        self.renew_lease(&mut conn).await
    }

    /// The sorted set of node leases.
    pub(super) fn nodes_key(&self) -> String {
        format!("{}nodes", self.prefix)
    }

    pub(super) async fn renew_lease(&self, conn: &mut Conn) -> redis::RedisResult<()> {
        self.renew_node_lease(conn).await?;
        if self.sharded {
            self.renew_account_leases(conn).await?;
        } else {
            self.renew_conns_ttl(conn).await?;
        }
        Ok(())
    }

    /// How long an account's `conns:` hash outlives the last reserve or
    /// lease renewal of a node counting in it: three leases, so a live
    /// node's renewal always comes first and a dead cluster's counts do
    /// not stay forever.
    pub(super) fn conns_ttl_ms(&self) -> u64 {
        self.lease_ms.saturating_mul(3)
    }

    /// Refreshes the TTL of every `conns:` hash this node counts in (one
    /// pipeline per 256 accounts).
    async fn renew_conns_ttl(&self, conn: &mut Conn) -> redis::RedisResult<()> {
        for chunk in self.local.all_connections().chunks(256) {
            let mut pipe = redis::pipe();
            for (account, _) in chunk {
                pipe.pexpire(self.key("conns", account), self.conns_ttl_ms() as i64)
                    .ignore();
            }
            pipe.query_async::<()>(conn).await?;
        }
        Ok(())
    }

    /// This node's lease, and how many nodes are live.
    pub(super) async fn renew_node_lease(&self, conn: &mut Conn) -> redis::RedisResult<()> {
        let live: u32 = self
            .metrics
            .time_script(
                "lease",
                scripts::LEASE
                    .key(self.nodes_key())
                    .arg(&self.member)
                    .arg(self.lease_ms)
                    .invoke_async(conn),
            )
            .await?;
        self.live_nodes.store(live.max(1), Ordering::Release);
        self.metrics.live_nodes.set(i64::from(live.max(1)));
        Ok(())
    }

    /// Renews the lease every third of its length; after a failure, re-syncs
    /// before reporting the node up again.
    pub(super) async fn lease_loop(self: Arc<Self>) {
        let mut tick = tokio::time::interval(Duration::from_millis((self.lease_ms / 3).max(50)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(mut conn) = self.conn.get().cloned() else {
                continue;
            };
            if !self.pubsub_ok.load(Ordering::Acquire) {
                continue;
            }
            let result = if self.cmd_ok.load(Ordering::Acquire) {
                if self.sharded {
                    // A failure marks its slot down, never the whole
                    // cluster (slots.rs).
                    self.renew_leases_sharded(&conn).await;
                    continue;
                }
                tokio::time::timeout(COMMAND_TIMEOUT, self.renew_lease(&mut conn)).await
            } else {
                tokio::time::timeout(COMMAND_TIMEOUT * 5, self.resync()).await
            };
            match result {
                Ok(Ok(())) => {
                    if !self.cmd_ok.swap(true, Ordering::AcqRel) {
                        tracing::info!(
                            live_nodes = self.live_nodes.load(Ordering::Acquire),
                            "Redis reachable; cluster-wide limits shared again"
                        );
                    }
                    self.refresh_up();
                }
                Ok(Err(e)) => self.failed(&e),
                Err(_) => self.failed(&(redis::ErrorKind::Io, "timed out").into()),
            }
        }
    }
}
