//! The bridge's command connection: one Redis (a reconnecting manager) or
//! a Redis Cluster (a connection that routes each command to the shard
//! owning its key's slot and follows `MOVED`). The scripts run unchanged on
//! either. It is the node's only command connection: presence
//! (`presence/cluster/`) and the webhooks' shared queues
//! (`webhook/cluster.rs`) send theirs over it too, through [`Shared`].

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{Cmd, Pipeline, RedisFuture, Value};
use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::runtime::Handle;
use tokio::sync::Notify;

#[derive(Clone)]
pub enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Conn {
    /// Whether Redis answers, asked of one node. A plain `PING` is no
    /// such question on Redis Cluster: the cluster client sends it to
    /// every master, and to a master that just died over its broken link;
    /// that request's retry then finds no connection to the node and
    /// makes the client reconnect from its seed node, a recovery in which
    /// no command of any caller is sent. The bridge's publishes share
    /// this connection, so presence's idle check (every third of a lease)
    /// would pause every shard's publishes while one master is down.
    /// One node at random answers for "Redis reachable"; a command on a
    /// dead shard's keys fails on its own, as the bridge's do.
    pub async fn ping_one(&mut self) -> redis::RedisResult<()> {
        let ping = redis::cmd("PING");
        match self {
            Conn::Single(c) => ping.query_async(c).await,
            Conn::Cluster(c) => c
                .route_command(ping, RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random))
                .await
                .and_then(Value::extract_error)
                .map(drop),
        }
    }
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

/// The bridge's command connection as the services beside it reach it.
/// `Node::new` makes one and hands it to the bridge, presence and the
/// webhooks; the bridge fills it when it makes its connection (at start
/// on one Redis, at its first connect on Redis Cluster), so a node keeps
/// one command connection (one per shard on Redis Cluster) and one place
/// that reconnects it. A command sent before then waits for it, within
/// its caller's timeout.
#[derive(Clone, Default)]
pub struct Shared(Arc<Slot>);

#[derive(Default)]
struct Slot {
    conn: OnceLock<Conn>,
    /// The runtime the bridge started on (the actix system's, which lives
    /// as long as the server): see [`Shared::run`].
    home: OnceLock<Handle>,
    /// Wakes the calls waiting for `conn`.
    made: Notify,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Shared(made={})", self.0.conn.get().is_some())
    }
}

/// The error of a call that found no connection in time.
fn unreachable() -> redis::RedisError {
    (redis::ErrorKind::Io, "Redis not reachable").into()
}

impl Shared {
    /// The connection, once the bridge made it.
    pub fn get(&self) -> Option<&Conn> {
        self.0.conn.get()
    }

    /// Called by the bridge on the runtime it runs on, before it makes its
    /// connection.
    pub(super) fn set_home(&self, home: Handle) {
        let _ = self.0.home.set(home);
    }

    /// The bridge made its connection (once: later reconnections happen
    /// inside it).
    pub(super) fn set(&self, conn: Conn) {
        let _ = self.0.conn.set(conn);
        self.0.made.notify_waiters();
    }

    /// The connection, waiting up to `wait` for the bridge to make it.
    pub async fn conn(&self, wait: Duration) -> redis::RedisResult<Conn> {
        let made = async {
            loop {
                let notified = self.0.made.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if let Some(c) = self.0.conn.get() {
                    return c.clone();
                }
                notified.await;
            }
        };
        tokio::time::timeout(wait, made)
            .await
            .map_err(|_| unreachable())
    }

    /// Runs `call` on the connection within `timeout`, on the bridge's
    /// runtime: a caller on a runtime of its own (the webhooks') then
    /// never hosts the connection's driver. One Redis's manager makes its
    /// connection, and every reconnection, on the runtime of the call
    /// that needs it; a driver left on a runtime that stops would leave
    /// every user of the connection with an error until the next
    /// reconnection. The actix runtimes live as long as the server.
    pub async fn run<T, F, Fut>(&self, timeout: Duration, call: F) -> redis::RedisResult<T>
    where
        T: Send + 'static,
        F: FnOnce(Conn) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>> + Send + 'static,
    {
        let deadline = tokio::time::Instant::now() + timeout;
        // Waiting makes nothing: the bridge makes the connection, on its
        // runtime, which it recorded first.
        let conn = self.conn(timeout).await?;
        let home = self.0.home.get().ok_or_else(unreachable)?;
        let call = call(conn);
        let task = async move {
            tokio::time::timeout_at(deadline, call)
                .await
                .unwrap_or_else(|_| Err((redis::ErrorKind::Io, "Redis call timed out").into()))
        };
        // The runtime is gone only once the server stopped.
        home.spawn(task)
            .await
            .unwrap_or_else(|_| Err(unreachable()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A runtime on a thread of its own, as the bridge's is to the
    /// webhooks'; it runs until `stop` is sent or dropped.
    struct Home {
        handle: Handle,
        thread: std::thread::ThreadId,
        stop: tokio::sync::oneshot::Sender<()>,
        joined: std::thread::JoinHandle<()>,
    }

    fn runtime_thread() -> Home {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let joined = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            ready_tx
                .send((rt.handle().clone(), std::thread::current().id()))
                .unwrap();
            rt.block_on(async {
                let _ = stopped.await;
            });
        });
        let (handle, thread) = ready_rx.recv().unwrap();
        Home {
            handle,
            thread,
            stop,
            joined,
        }
    }

    /// A connection that never connects unless used (nothing listens on
    /// port 1).
    fn lazy_conn(home: &Handle) -> Conn {
        let _inside = home.enter();
        let client = redis::Client::open("redis://127.0.0.1:1").unwrap();
        Conn::Single(
            ConnectionManager::new_lazy_with_config(
                client,
                redis::aio::ConnectionManagerConfig::new(),
            )
            .unwrap(),
        )
    }

    #[tokio::test]
    async fn a_call_before_the_bridge_started_fails_within_its_timeout() {
        let shared = Shared::default();
        let done = shared
            .run(Duration::from_millis(20), |_conn| async { Ok(()) })
            .await;
        assert!(done.is_err());
        assert!(shared.conn(Duration::from_millis(20)).await.is_err());
    }

    #[tokio::test]
    async fn a_call_runs_on_the_bridges_runtime_once_it_made_the_connection() {
        let Home {
            handle: home,
            thread: home_thread,
            stop: _stop,
            ..
        } = runtime_thread();
        let shared = Shared::default();
        // A caller already waiting is woken by the bridge's connection.
        let waiting = tokio::spawn({
            let shared = shared.clone();
            async move {
                shared
                    .run(Duration::from_secs(5), |_conn| async {
                        Ok(std::thread::current().id())
                    })
                    .await
            }
        });
        shared.set_home(home.clone());
        shared.set(lazy_conn(&home));
        assert_eq!(waiting.await.unwrap().unwrap(), home_thread);
        let ran_on = shared
            .run(Duration::from_secs(5), |_conn| async {
                Ok(std::thread::current().id())
            })
            .await
            .unwrap();
        assert_eq!(ran_on, home_thread);
        assert_ne!(ran_on, std::thread::current().id());
        assert!(shared.conn(Duration::ZERO).await.is_ok());
    }

    #[tokio::test]
    async fn a_call_after_the_bridges_runtime_stopped_fails() {
        let home = runtime_thread();
        let shared = Shared::default();
        shared.set_home(home.handle.clone());
        shared.set(lazy_conn(&home.handle));
        let _ = home.stop.send(());
        home.joined.join().unwrap();
        let done = shared
            .run(Duration::from_secs(5), |_conn| async { Ok(()) })
            .await;
        // Not run on the caller's runtime instead: the node is stopping.
        assert!(done.is_err());
    }
}
