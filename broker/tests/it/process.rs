//! The broker as a process: SIGHUP reloads, SIGTERM drains.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::common::{Client, Got, PATIENCE, metric_value};

const BIN: &str = env!("CARGO_BIN_EXE_tidegate");

pub(crate) struct Proc {
    child: Child,
    url: String,
    config: PathBuf,
}

impl Proc {
    pub(crate) async fn start(config_text: &str) -> Proc {
        Proc::start_limited(config_text, None).await
    }

    /// With `nofile`, the broker runs under that soft limit on open
    /// descriptors (`ulimit -n` in a shell that then execs it, so the PID
    /// is the broker's).
    pub(crate) async fn start_limited(config_text: &str, nofile: Option<u32>) -> Proc {
        let dir = std::env::temp_dir().join(format!(
            "tidegate-proc-{}-{}",
            std::process::id(),
            crate::common::unique()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("config.toml");
        std::fs::write(&config, config_text).unwrap();
        let mut cmd = match nofile {
            Some(n) => {
                let mut sh = Command::new("sh");
                sh.arg("-c")
                    .arg(format!("ulimit -n {n} && exec \"$0\" \"$@\""))
                    .arg(BIN);
                sh
            }
            None => Command::new(BIN),
        };
        // This process's HTTP clients need the TLS provider installed.
        tidegate::tls::provider();
        let mut child = cmd
            .env("TIDEGATE_CLUSTER_SECRET", crate::common::CLUSTER_SECRET)
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--grpc-listen",
                "127.0.0.1:0",
                "--config",
            ])
            .arg(&config)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = tokio::time::timeout(PATIENCE, lines.next_line())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let url = line
            .strip_prefix("tidegate listening on ")
            .unwrap()
            .to_owned();
        Proc { child, url, config }
    }

    pub(crate) fn signal(&self, sig: &str) {
        let pid = self.child.id().unwrap().to_string();
        let ok = std::process::Command::new("kill")
            .args([sig, &pid])
            .status()
            .unwrap()
            .success();
        assert!(ok);
    }

    /// The broker's process id (its `/proc/<pid>/status`).
    pub(crate) fn pid(&self) -> u32 {
        self.child.id().unwrap()
    }

    /// `http://…` or, with `[node] tls_cert_file`, `https://…`.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// The HTTP listener's address.
    pub(crate) fn addr(&self) -> std::net::SocketAddr {
        let hostport = self.url.split("://").nth(1).unwrap().trim_end_matches('/');
        hostport.parse().unwrap()
    }

    pub(crate) fn ws(&self) -> String {
        format!("{}/v1/ws", self.url.replace("http://", "ws://"))
    }

    pub(crate) async fn metrics(&self) -> String {
        reqwest::get(format!("{}/metrics", self.url))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// SIGKILL: the node dies without a goodbye.
    pub(crate) async fn kill9(&mut self) {
        self.child.kill().await.unwrap();
    }

    pub(crate) fn token(&self, account: &str) -> String {
        let out = std::process::Command::new(BIN)
            .args([
                "token",
                "--account",
                account,
                "--sub",
                "doc:*",
                "--pub",
                "doc:*",
                "--config",
            ])
            .arg(&self.config)
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }
}

/// The shipped config with exact pieces of text replaced.
pub(crate) fn shipped(edits: &[(&str, &str)]) -> String {
    let mut text = tidegate::config::DEFAULT_TOML.to_owned();
    for (from, to) in edits {
        assert!(text.contains(from), "config.toml no longer has {from:?}");
        text = text.replacen(from, to, 1);
    }
    text
}

const FREE_RATE: &str = "messages_per_sec = 20\nburst = 20\n";

#[tokio::test]
async fn sighup_and_file_changes_apply_new_limits_to_a_live_connection_and_a_bad_file_is_refused() {
    let p = Proc::start(tidegate::config::DEFAULT_TOML).await;
    let mut c = Client::connect(&p.ws(), &p.token("acme")).await.unwrap();
    assert_eq!(c.next_json().await["limits"]["burst"], 20);
    assert_eq!(
        c.call(json!({"type":"budget"}), 1).await["connection"]["capacity"],
        20
    );

    std::fs::write(
        &p.config,
        shipped(&[(FREE_RATE, "messages_per_sec = 50\nburst = 50\n")]),
    )
    .unwrap();
    p.signal("-HUP");
    let deadline = Instant::now() + PATIENCE;
    let mut id = 2;
    loop {
        let b = c.call(json!({"type":"budget"}), id).await;
        if b["connection"]["capacity"] == 50 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the reload never reached the socket"
        );
        id += 1;
        // Below the budget frames' own bucket (10/s).
        tokio::time::sleep(Duration::from_millis(150)).await;
    }

    // A broken file is refused; the running config and the socket stay.
    std::fs::write(&p.config, "[plans.free]\nburst = \"lots\"\n").unwrap();
    p.signal("-HUP");
    let deadline = Instant::now() + PATIENCE;
    loop {
        let text = reqwest::get(format!("{}/metrics", p.url))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if metric_value(&text, r#"tidegate_config_reloads_total{outcome="refused"}"#) >= 1.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the bad file was never looked at"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        c.call(json!({"type":"budget"}), 1000).await["connection"]["capacity"],
        50
    );

    // Saving the file is enough: no signal this time.
    std::fs::write(
        &p.config,
        shipped(&[(FREE_RATE, "messages_per_sec = 60\nburst = 60\n")]),
    )
    .unwrap();
    let deadline = Instant::now() + PATIENCE;
    let mut id = 2000;
    while c.call(json!({"type":"budget"}), id).await["connection"]["capacity"] != 60 {
        assert!(
            Instant::now() < deadline,
            "the file change was never picked up"
        );
        id += 1;
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_in_staggered_batches_then_exits_0() {
    let mut p = Proc::start(&shipped(&[("drain_ms = 10000", "drain_ms = 1500")])).await;
    let mut clients = Vec::new();
    for i in 0..20 {
        let mut c = Client::connect(&p.ws(), &p.token(&format!("u{i}")))
            .await
            .unwrap();
        c.next_json().await;
        clients.push(c);
    }
    let start = Instant::now();
    p.signal("-TERM");
    let waits: Vec<_> = clients
        .into_iter()
        .map(|mut c| {
            tokio::spawn(async move {
                let code = loop {
                    match c.next().await {
                        Got::Json(_) => continue,
                        Got::Close(code) => break code,
                        Got::Gone => break None,
                    }
                };
                (code, start.elapsed())
            })
        })
        .collect();

    // Not ready, and refusing handshakes, while it drains.
    let readyz = reqwest::get(format!("{}/readyz", p.url)).await.unwrap();
    assert_eq!(readyz.status(), 503);
    match crate::common::refusal(Client::connect(&p.ws(), &p.token("late")).await) {
        Err((status, body, retry)) => {
            assert_eq!(
                (status, body["error"].as_str(), retry),
                (503, Some("draining"), Some(1))
            );
        }
        Ok(_) => panic!("a handshake was accepted while draining"),
    }

    let mut times = Vec::new();
    for w in waits {
        let (code, at) = w.await.unwrap();
        assert_eq!(code, Some(1012));
        times.push(at);
    }
    times.sort();
    let spread = times[times.len() - 1] - times[0];
    assert!(
        spread >= Duration::from_millis(500),
        "closes spread over {spread:?}"
    );
    let status = tokio::time::timeout(PATIENCE, p.child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(0));
}
