//! A real `redis-server` on a free port, started by the test that needs it
//! (so it can also kill it), never the machine's shared one.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

pub struct RedisServer {
    pub port: u16,
    child: Option<Child>,
    dir: PathBuf,
    /// TLS only (`--tls-port`, no plaintext port): (certificate, key, CA).
    tls: Option<(PathBuf, PathBuf, PathBuf)>,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl RedisServer {
    pub fn start() -> RedisServer {
        RedisServer::launch(None)
    }

    /// A Redis that speaks TLS only, with this certificate and key; it
    /// asks clients for no certificate (`--tls-auth-clients no`).
    pub fn start_tls(cert: PathBuf, key: PathBuf, ca: PathBuf) -> RedisServer {
        RedisServer::launch(Some((cert, key, ca)))
    }

    fn launch(tls: Option<(PathBuf, PathBuf, PathBuf)>) -> RedisServer {
        let port = free_port();
        let dir =
            std::env::temp_dir().join(format!("tidegate-redis-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut r = RedisServer {
            port,
            child: None,
            dir,
            tls,
        };
        r.spawn();
        r
    }

    fn spawn(&mut self) {
        let mut cmd = Command::new("redis-server");
        match &self.tls {
            None => cmd.args(["--port", &self.port.to_string()]),
            Some((cert, key, ca)) => cmd
                .args(["--port", "0", "--tls-port", &self.port.to_string()])
                .arg("--tls-cert-file")
                .arg(cert)
                .arg("--tls-key-file")
                .arg(key)
                .arg("--tls-ca-cert-file")
                .arg(ca)
                .args(["--tls-auth-clients", "no"]),
        };
        let child = cmd
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .args(["--logfile", ""])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start redis-server ({e}); install it with `apt-get install -y redis-server` (scripts/ensure-deps does)")
            });
        let mut child = child;
        // Wait for the line Redis prints once it accepts connections, and
        // keep draining its log so it never blocks on a full pipe.
        let out = BufReader::new(child.stdout.take().unwrap());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                if line.contains("Ready to accept connections") {
                    let _ = tx.send(());
                }
            }
        });
        let ready = rx.recv_timeout(std::time::Duration::from_secs(10));
        assert!(
            ready.is_ok(),
            "redis-server did not become ready on {}",
            self.port
        );
        self.child = Some(child);
    }

    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://127.0.0.1:{}/", self.port)
    }

    /// SIGKILL: the abrupt outage.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// A fresh, empty Redis on the same port.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
