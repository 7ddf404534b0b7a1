//! What the operator routes (§10) keep in Redis: the ban list (one key per
//! ban, expiring with it, so a node that starts later or comes back from an
//! outage reads the list in force), each node's overview snapshot (expiring
//! when the node stops renewing it), and operator actions sent to every
//! node over the control channel.

use redis::AsyncCommands;

use super::{COMMAND_TIMEOUT, Conn, RedisBridge};
use crate::cluster::Bridge;

/// The prefix of operator messages on the control channel.
pub const ADMIN_MESSAGE: &str = "admin:";
/// Keys per SCAN step.
const SCAN_COUNT: usize = 500;

/// A handle for the admin routes' Redis work; taken only while the bridge
/// is up.
#[derive(Clone)]
pub struct AdminStore {
    conn: Conn,
    prefix: String,
    control: String,
}

impl std::fmt::Debug for AdminStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AdminStore({})", self.prefix)
    }
}

fn timed_out() -> redis::RedisError {
    (redis::ErrorKind::Io, "Redis did not answer in time").into()
}

impl AdminStore {
    async fn timed<T>(
        &self,
        fut: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> redis::RedisResult<T> {
        tokio::time::timeout(COMMAND_TIMEOUT * 2, fut)
            .await
            .unwrap_or_else(|_| Err(timed_out()))
    }

    /// Sends an operator action to every node (this one receives it too).
    pub async fn broadcast(&self, payload: &str) -> redis::RedisResult<()> {
        let mut conn = self.conn.clone();
        let message = format!("{ADMIN_MESSAGE}{payload}");
        self.timed(conn.publish::<_, _, i64>(&self.control, message))
            .await
            .map(drop)
    }

    /// Stores a ban (its value: the expiry in Unix ms) expiring with it.
    pub async fn set_ban(&self, key: &str, expires_at: u64, ttl_ms: u64) -> redis::RedisResult<()> {
        let mut conn = self.conn.clone();
        let key = format!("{}ban:{key}", self.prefix);
        self.timed(async {
            redis::cmd("SET")
                .arg(&key)
                .arg(expires_at)
                .arg("PX")
                .arg(ttl_ms.max(1))
                .query_async::<()>(&mut conn)
                .await
        })
        .await
    }

    pub async fn del_ban(&self, key: &str) -> redis::RedisResult<()> {
        let mut conn = self.conn.clone();
        let key = format!("{}ban:{key}", self.prefix);
        self.timed(conn.del::<_, i64>(key)).await.map(drop)
    }

    /// Every ban in force: (key suffix, expiry in Unix ms).
    pub async fn bans(&self) -> redis::RedisResult<Vec<(String, u64)>> {
        let start = format!("{}ban:", self.prefix);
        let values = self.scan_values(&start).await?;
        Ok(values
            .into_iter()
            .filter_map(|(k, v)| Some((k, v.parse().ok()?)))
            .collect())
    }

    /// Publishes this node's overview snapshot for `ttl_ms`.
    pub async fn put_stats(&self, member: &str, json: &str, ttl_ms: u64) -> redis::RedisResult<()> {
        let mut conn = self.conn.clone();
        let key = format!("{}admin:node:{member}", self.prefix);
        self.timed(async {
            redis::cmd("SET")
                .arg(&key)
                .arg(json)
                .arg("PX")
                .arg(ttl_ms)
                .query_async::<()>(&mut conn)
                .await
        })
        .await
    }

    /// Every live node's snapshot (JSON).
    pub async fn stats(&self) -> redis::RedisResult<Vec<String>> {
        let start = format!("{}admin:node:", self.prefix);
        Ok(self
            .scan_values(&start)
            .await?
            .into_iter()
            .map(|(_, v)| v)
            .collect())
    }

    /// (key without `start`, value) of every key under `start`.
    async fn scan_values(&self, start: &str) -> redis::RedisResult<Vec<(String, String)>> {
        let mut conn = self.conn.clone();
        let pattern = format!("{start}*");
        self.timed(async {
            let mut keys: Vec<String> = Vec::new();
            let mut cursor: u64 = 0;
            loop {
                let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(SCAN_COUNT)
                    .query_async(&mut conn)
                    .await?;
                keys.extend(batch);
                cursor = next;
                if cursor == 0 {
                    break;
                }
            }
            keys.sort();
            keys.dedup();
            let mut out = Vec::with_capacity(keys.len());
            for chunk in keys.chunks(SCAN_COUNT) {
                let values: Vec<Option<String>> =
                    redis::cmd("MGET").arg(chunk).query_async(&mut conn).await?;
                for (k, v) in chunk.iter().zip(values) {
                    // A key that expired between SCAN and MGET is gone.
                    if let Some(v) = v {
                        out.push((k[start.len()..].to_owned(), v));
                    }
                }
            }
            Ok(out)
        })
        .await
    }
}

impl RedisBridge {
    pub(super) fn admin_store_impl(&self) -> Option<AdminStore> {
        // Bans and snapshots are scanned from one Redis; the operator
        // routes are refused with mode "redis-cluster" (config).
        if !self.is_up() || self.sharded {
            return None;
        }
        Some(AdminStore {
            conn: self.conn.get()?.clone(),
            prefix: self.prefix.clone(),
            control: self.control_topic(),
        })
    }

    /// This process's name in snapshots (the node id and a per-start
    /// suffix).
    pub fn member(&self) -> &str {
        &self.member
    }
}
