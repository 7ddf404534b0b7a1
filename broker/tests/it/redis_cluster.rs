//! A real three-master Redis Cluster on free loopback ports, started by the
//! test that needs it: three `redis-server --cluster-enabled yes`, slots
//! assigned and nodes introduced with `CLUSTER ADDSLOTSRANGE`/`CLUSTER MEET`
//! (so `redis-cli` is not needed), ready once every node reports
//! `cluster_state:ok`; with replicas (the failover test), one more server
//! per master joined with `CLUSTER REPLICATE`, ready once every replica's
//! link to its master is up. Slots stay served while a shard is down
//! (`cluster-require-full-coverage no`, what docs/scaling.md asks of
//! operators). Dropping it kills exactly its processes.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::PATIENCE;

/// What the cluster tests need from a Redis they run on: one server or a
/// Redis Cluster.
pub trait Backend {
    /// `cluster.mode` for the nodes.
    fn mode(&self) -> &'static str;
    /// `cluster.redis_url` (for a Redis Cluster, any one node).
    fn url(&self) -> String;
    /// The ports of every master.
    fn ports(&self) -> Vec<u16>;
}

impl Backend for crate::redis_server::RedisServer {
    fn mode(&self) -> &'static str {
        "redis"
    }
    fn url(&self) -> String {
        crate::redis_server::RedisServer::url(self)
    }
    fn ports(&self) -> Vec<u16> {
        vec![self.port]
    }
}

/// The test bodies that take a [`Backend`], run on one Redis and on a
/// three-master Redis Cluster: `on_both!(body, ...)` makes, for each body, a
/// test in `one_redis` and one in `redis_cluster`.
macro_rules! on_both {
    ($($name:ident),* $(,)?) => {
        mod one_redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(&crate::redis_server::RedisServer::start()).await;
                }
            )*
        }
        mod redis_cluster {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(&crate::redis_cluster::RedisCluster::start()).await;
                }
            )*
        }
    };
}
pub(crate) use on_both;

/// Runs `cmd` (on one key) on the master that owns the key: each master is
/// asked directly, and the others answer `MOVED` (an error).
pub async fn on_owner<T: redis::FromRedisValue>(redis: &impl Backend, cmd: &redis::Cmd) -> T {
    let mut last = None;
    for port in redis.ports() {
        let mut conn = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        match cmd.query_async(&mut conn).await {
            Ok(v) => return v,
            Err(e) => last = Some(e),
        }
    }
    panic!("no master answered: {last:?}");
}

pub struct RedisCluster {
    /// The masters' ports, in slot order (a failover does not change it).
    pub ports: Vec<u16>,
    /// The replicas' ports, one per master, in the same order.
    pub replica_ports: Vec<u16>,
    /// Every server, by port.
    children: Vec<(u16, Child)>,
    dir: PathBuf,
}

/// A free port whose cluster bus port (+10000) is free too.
fn free_port_pair() -> u16 {
    loop {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        if port < 55_000 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

fn query<T: redis::FromRedisValue>(port: u16, cmd: &redis::Cmd) -> redis::RedisResult<T> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?;
    let mut conn = client.get_connection()?;
    cmd.query(&mut conn)
}

impl RedisCluster {
    /// Three masters sharing the 16384 slots, ready.
    pub fn start() -> RedisCluster {
        RedisCluster::start_with(false)
    }

    /// Three masters, each with one replica that takes over when it dies.
    pub fn start_with_replicas() -> RedisCluster {
        RedisCluster::start_with(true)
    }

    fn start_with(replicas: bool) -> RedisCluster {
        let dir = std::env::temp_dir().join(format!(
            "tidegate-redis-cluster-{}-{}",
            std::process::id(),
            crate::common::unique()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let mut cluster = RedisCluster {
            ports: Vec::new(),
            replica_ports: Vec::new(),
            children: Vec::new(),
            dir,
        };
        for _ in 0..3 {
            let port = free_port_pair();
            cluster.spawn(port);
            cluster.ports.push(port);
        }
        if replicas {
            for _ in 0..3 {
                let port = free_port_pair();
                cluster.spawn(port);
                cluster.replica_ports.push(port);
            }
        }
        let ranges = [(0, 5460), (5461, 10922), (10923, 16383)];
        for (port, (from, to)) in cluster.ports.iter().zip(ranges) {
            query::<()>(
                *port,
                redis::cmd("CLUSTER").arg("ADDSLOTSRANGE").arg(from).arg(to),
            )
            .unwrap();
        }
        let first = cluster.ports[0];
        for port in cluster.ports[1..].iter().chain(&cluster.replica_ports) {
            query::<()>(
                *port,
                redis::cmd("CLUSTER")
                    .arg("MEET")
                    .arg("127.0.0.1")
                    .arg(first),
            )
            .unwrap();
        }
        cluster.wait_ok();
        if replicas {
            cluster.attach_replicas();
        }
        cluster
    }

    /// Every server (masters then replicas).
    fn all_ports(&self) -> Vec<u16> {
        self.ports
            .iter()
            .chain(&self.replica_ports)
            .copied()
            .collect()
    }

    /// `CLUSTER REPLICATE` each replica to its master, then waits (polling,
    /// with a deadline) until every replica's link is up and every server
    /// lists the three replicas (so the masters can vote a failover).
    fn attach_replicas(&self) {
        for (master, replica) in self.ports.iter().zip(&self.replica_ports) {
            let id: String = query(*master, redis::cmd("CLUSTER").arg("MYID")).unwrap();
            let deadline = Instant::now() + PATIENCE * 3;
            // The replica must have heard of its master through the bus.
            while let Err(e) =
                query::<()>(*replica, redis::cmd("CLUSTER").arg("REPLICATE").arg(&id))
            {
                assert!(Instant::now() < deadline, "CLUSTER REPLICATE: {e}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let deadline = Instant::now() + PATIENCE * 3;
        for port in self.all_ports() {
            loop {
                let nodes: String = query(port, redis::cmd("CLUSTER").arg("NODES")).unwrap();
                let replicas = nodes.lines().filter(|l| l.contains("slave")).count();
                let info: String = query(port, redis::cmd("INFO").arg("replication")).unwrap();
                let linked =
                    !self.replica_ports.contains(&port) || info.contains("master_link_status:up");
                if replicas == 3 && linked {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "replicas never attached on {port}: {nodes}"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    /// The port of the master serving `slot` now, as a live server says.
    pub fn master_of(&self, slot: u16) -> u16 {
        let live: Vec<u16> = self.children.iter().map(|(p, _)| *p).collect();
        for port in live {
            let Ok(slots) = query::<Vec<redis::Value>>(port, redis::cmd("CLUSTER").arg("SLOTS"))
            else {
                continue;
            };
            for range in slots {
                let redis::Value::Array(fields) = range else {
                    continue;
                };
                let (Some(redis::Value::Int(from)), Some(redis::Value::Int(to))) =
                    (fields.first(), fields.get(1))
                else {
                    continue;
                };
                if (*from..=*to).contains(&i64::from(slot))
                    && let Some(redis::Value::Array(master)) = fields.get(2)
                    && let Some(redis::Value::Int(p)) = master.get(1)
                {
                    return *p as u16;
                }
            }
        }
        panic!("no live server knows who serves slot {slot}");
    }

    /// SIGKILL the server on `port` (by its PID).
    pub fn kill(&mut self, port: u16) {
        let i = self
            .children
            .iter()
            .position(|(p, _)| *p == port)
            .expect("a server of this cluster");
        let (_, mut child) = self.children.remove(i);
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Waits (polling, with a deadline) until a server other than `dead`
    /// serves `slot` and the live servers report the cluster ok again.
    pub fn wait_failover(&self, slot: u16, dead: u16) -> u16 {
        let deadline = Instant::now() + PATIENCE * 6;
        loop {
            let owner = self.master_of(slot);
            let ok = self.children.iter().all(|(p, _)| {
                query::<String>(*p, redis::cmd("CLUSTER").arg("INFO"))
                    .is_ok_and(|i| i.contains("cluster_state:ok"))
            });
            if owner != dead && ok {
                return owner;
            }
            assert!(
                Instant::now() < deadline,
                "slot {slot} never failed over from {dead}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn spawn(&mut self, port: u16) {
        let mut child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--cluster-enabled", "yes"])
            .args(["--cluster-config-file", &format!("nodes-{port}.conf")])
            .args(["--cluster-node-timeout", "2000"])
            .args(["--cluster-require-full-coverage", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .args(["--logfile", ""])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start redis-server ({e}); install it with `apt-get install -y redis-server` (scripts/ensure-deps does)")
            });
        let out = BufReader::new(child.stdout.take().unwrap());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                if line.contains("Ready to accept connections") {
                    let _ = tx.send(());
                }
            }
        });
        self.children.push((port, child));
        assert!(
            rx.recv_timeout(Duration::from_secs(10)).is_ok(),
            "redis-server (cluster) did not become ready on {port}"
        );
    }

    /// Polls every node (with a deadline) until it reports the cluster
    /// whole: all three masters known and every slot served.
    fn wait_ok(&self) {
        let deadline = Instant::now() + PATIENCE * 3;
        let known = format!("cluster_known_nodes:{}", self.all_ports().len());
        for port in &self.all_ports() {
            loop {
                let info: String = query(*port, redis::cmd("CLUSTER").arg("INFO")).unwrap();
                if info.contains("cluster_state:ok") && info.contains(&known) {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "the Redis Cluster on {:?} never became ok: {info}",
                    self.ports
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

impl Backend for RedisCluster {
    fn mode(&self) -> &'static str {
        "redis-cluster"
    }
    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.ports[0])
    }
    fn ports(&self) -> Vec<u16> {
        self.ports.clone()
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for (_, c) in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
