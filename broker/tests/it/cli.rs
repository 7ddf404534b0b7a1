//! The `tidegate` binary: serve, token, check-config.

use std::process::{Command, Stdio};

use tidegate::auth::Authenticator;
use tidegate::config::SAMPLE_JWT_SECRET;
use tokio::io::{AsyncBufReadExt, BufReader};

const BIN: &str = env!("CARGO_BIN_EXE_tidegate");

#[test]
fn check_config_reports_every_problem_and_fails() {
    let dir = std::env::temp_dir().join(format!("tidegate-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.toml");
    std::fs::write(
        &file,
        "[node]\nlisten = \"127.0.0.1:8080\"\nworkerz = 2\n[plans.free]\nburst = -1\n[plans.pro]\nmessages_per_sec = 0\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .arg("check-config")
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("node.workerz: unknown key"), "{err}");
    assert!(err.contains("plans.free.burst"), "{err}");
    assert!(
        err.contains("plans.pro.messages_per_sec: must be a positive number"),
        "{err}"
    );

    let repo_config = concat!(env!("CARGO_MANIFEST_DIR"), "/../config.toml");
    let out = Command::new(BIN)
        .arg("check-config")
        .arg(repo_config)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn token_mints_a_verifiable_dev_token() {
    let out = Command::new(BIN)
        .args([
            "token",
            "--account",
            "acme",
            "--sub",
            "doc:*",
            "--pub",
            "doc:*",
            "--pub",
            "chat:1",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let token = String::from_utf8(out.stdout).unwrap();
    let claims = Authenticator::new(SAMPLE_JWT_SECRET, 0)
        .unwrap()
        .verify(token.trim())
        .unwrap();
    assert_eq!(claims.sub, "acme");
    assert_eq!(claims.sub_channels, ["doc:*"]);
    assert_eq!(claims.pub_channels, ["doc:*", "chat:1"]);

    let out = Command::new(BIN)
        .args(["token", "--account", "a", "--plan", "gold"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("gold"));
}

#[test]
fn serve_refuses_the_sample_secret_off_loopback() {
    let out = Command::new(BIN)
        .args(["serve", "--listen", "0.0.0.0:0"])
        .env_remove("TIDEGATE_JWT_SECRET")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("TIDEGATE_JWT_SECRET"));
}

#[tokio::test]
async fn serve_announces_its_port_and_answers() {
    let mut child = tokio::process::Command::new(BIN)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--grpc-listen",
            "127.0.0.1:0",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(crate::common::PATIENCE, lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let url = line
        .strip_prefix("tidegate listening on ")
        .expect(&line)
        .to_owned();
    tidegate::tls::provider();
    let resp = reqwest::get(format!("{url}/healthz")).await.unwrap();
    assert_eq!(resp.status(), 200);
    child.kill().await.unwrap();
}

#[test]
fn the_crates_embedded_config_is_the_repo_roots() {
    let root =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../config.toml")).unwrap();
    assert!(
        root == tidegate::config::DEFAULT_TOML,
        "broker/config.toml (compiled in) differs from config.toml: cp config.toml broker/config.toml"
    );
}

#[tokio::test]
async fn healthcheck_exits_0_for_a_live_node_and_1_otherwise() {
    let broker = crate::common::Broker::start("");
    let ok = tokio::process::Command::new(BIN)
        .arg("healthcheck")
        .arg(broker.addr.to_string())
        .output()
        .await
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    let down = tokio::process::Command::new(BIN)
        .arg("healthcheck")
        .arg(addr.to_string())
        .output()
        .await
        .unwrap();
    assert_eq!(down.status.code(), Some(1));
}

#[test]
fn log_format_json_writes_one_json_object_per_line() {
    use std::io::BufRead;
    let dir = std::env::temp_dir().join(format!("tidegate-cli-log-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("json.toml");
    let repo_config = include_str!("../../../config.toml");
    let json_config = repo_config.replace("format = \"text\"", "format = \"json\"");
    assert_ne!(
        json_config, repo_config,
        "the shipped config has [log] format"
    );
    std::fs::write(&file, json_config).unwrap();
    let mut child = Command::new(BIN)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--grpc-listen",
            "127.0.0.1:0",
            "--config",
        ])
        .arg(&file)
        .env_remove("TIDEGATE_LOG_FORMAT")
        .env("RUST_LOG", "warn,tidegate=info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Every line is one JSON object; the gRPC thread may log before the
    // HTTP server does, so look for the server's line among the first few.
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    let (v, line) = loop {
        let line = lines.next().expect("the node logged its start").unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).expect("a JSON log line");
        if v["target"] == "tidegate::server" {
            break (v, line);
        }
        seen.push(line);
        assert!(seen.len() < 20, "no tidegate::server line in {seen:?}");
    };
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(v["target"], "tidegate::server", "{line}");
    assert_eq!(v["fields"]["message"], "serving");
    assert_eq!(v["level"], "INFO");
}
