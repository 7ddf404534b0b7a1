//! The bridge's command connection: one Redis (a reconnecting manager) or
//! a Redis Cluster (a connection that routes each command to the shard
//! owning its key's slot and follows `MOVED`). The scripts run unchanged on
//! either. The webhooks' shared queues use it too (`webhook/cluster.rs`).

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

#[derive(Clone)]
pub enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// A command connection made lazily and kept: a reconnecting manager on
/// one Redis, or (the redis crate has no lazy cluster connection) a
/// cluster client whose connection the first call makes; a failed attempt
/// is tried again by the next call, and once made it reconnects to a
/// shard by itself. Shared by the services that keep their own
/// connection beside the bridge's (webhooks' queues, presence).
pub enum Link {
    Single(ConnectionManager),
    Cluster {
        client: Box<redis::cluster::ClusterClient>,
        conn: tokio::sync::OnceCell<ClusterConnection>,
        /// How long the first call waits for the cluster connection.
        connect_timeout: std::time::Duration,
    },
}

impl Link {
    /// Every command times out after `timeout` and is retried once;
    /// making the cluster connection may take `connect_timeout`.
    pub fn new(
        target: &super::RedisTarget,
        sharded: bool,
        timeout: std::time::Duration,
        connect_timeout: std::time::Duration,
    ) -> redis::RedisResult<Link> {
        if sharded {
            let client = target
                .cluster_builder()
                .connection_timeout(timeout)
                .response_timeout(timeout)
                .retries(1)
                .build()?;
            return Ok(Link::Cluster {
                client: Box::new(client),
                conn: tokio::sync::OnceCell::new(),
                connect_timeout,
            });
        }
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(1)
            .set_max_delay(timeout);
        Ok(Link::Single(ConnectionManager::new_lazy_with_config(
            target.client.clone(),
            config,
        )?))
    }

    /// A connection for one call.
    pub async fn conn(&self) -> redis::RedisResult<Conn> {
        match self {
            Link::Single(c) => Ok(Conn::Single(c.clone())),
            Link::Cluster {
                client,
                conn,
                connect_timeout,
            } => {
                let c = conn
                    .get_or_try_init(|| async {
                        tokio::time::timeout(*connect_timeout, client.get_async_connection())
                            .await
                            .unwrap_or_else(|_| {
                                Err((redis::ErrorKind::Io, "Redis Cluster connection timed out")
                                    .into())
                            })
                    })
                    .await?;
                Ok(Conn::Cluster(c.clone()))
            }
        }
    }
}
