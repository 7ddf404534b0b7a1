//! A real three-master Redis Cluster on free loopback ports, started by the
//! test that needs it: three `redis-server --cluster-enabled yes`, slots
//! assigned and nodes introduced with `CLUSTER ADDSLOTSRANGE`/`CLUSTER MEET`
//! (so `redis-cli` is not needed), ready once every node reports
//! `cluster_state:ok`. Dropping it kills exactly its processes.

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

pub struct RedisCluster {
    pub ports: Vec<u16>,
    children: Vec<Child>,
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
        let dir = std::env::temp_dir().join(format!(
            "tidegate-redis-cluster-{}-{}",
            std::process::id(),
            rand_suffix()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let mut cluster = RedisCluster {
            ports: Vec::new(),
            children: Vec::new(),
            dir,
        };
        for _ in 0..3 {
            let port = free_port_pair();
            cluster.spawn(port);
            cluster.ports.push(port);
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
        for port in &cluster.ports[1..] {
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
        cluster
    }

    fn spawn(&mut self, port: u16) {
        let mut child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--cluster-enabled", "yes"])
            .args(["--cluster-config-file", &format!("nodes-{port}.conf")])
            .args(["--cluster-node-timeout", "2000"])
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
        self.children.push(child);
        assert!(
            rx.recv_timeout(Duration::from_secs(10)).is_ok(),
            "redis-server (cluster) did not become ready on {port}"
        );
    }

    /// Polls every node (with a deadline) until it reports the cluster
    /// whole: all three masters known and every slot served.
    fn wait_ok(&self) {
        let deadline = Instant::now() + PATIENCE * 3;
        for port in &self.ports {
            loop {
                let info: String = query(*port, redis::cmd("CLUSTER").arg("INFO")).unwrap();
                if info.contains("cluster_state:ok") && info.contains("cluster_known_nodes:3") {
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

fn rand_suffix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
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
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
