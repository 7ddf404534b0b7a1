//! The binary as an operator drives it: settings from the environment and
//! flags, `check-config` saying where each value came from, SIGHUP on a
//! node without a file.

use std::process::{Command, Stdio};

use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStderr};

use crate::common::{Client, PATIENCE, metric_value};

const BIN: &str = env!("CARGO_BIN_EXE_tidegate");
const SECRET: &str = "an-operator-secret-0123456789";

/// `tidegate serve` with `args` and `env`; returns the child, its URL and
/// its stderr lines.
async fn serve(
    args: &[&str],
    env: &[(&str, &str)],
) -> (Child, String, Lines<BufReader<ChildStderr>>) {
    // This process's HTTP clients need the TLS provider installed.
    tidegate::tls::provider();
    let mut cmd = tokio::process::Command::new(BIN);
    cmd.arg("serve")
        .args(args)
        .env_remove("TIDEGATE_JWT_SECRET")
        // A free port for the gRPC API unless a test sets its own.
        .env("TIDEGATE_GRPC_LISTEN", "127.0.0.1:0")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(PATIENCE, lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .expect("the node printed its address");
    let url = line
        .strip_prefix("tidegate listening on ")
        .expect(&line)
        .to_owned();
    let stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    (child, url, stderr)
}

fn token(env: &[(&str, &str)]) -> String {
    let mut cmd = Command::new(BIN);
    cmd.args(["token", "--account", "acme", "--sub", "doc:*"])
        .env_remove("TIDEGATE_JWT_SECRET");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[tokio::test]
async fn a_node_off_loopback_takes_its_secret_and_address_from_the_environment() {
    // No file and no flag: what a container's environment gives.
    let env = [
        ("TIDEGATE_JWT_SECRET", SECRET),
        ("TIDEGATE_NODE_LISTEN", "0.0.0.0:0"),
    ];
    let (mut child, url, _stderr) = serve(&[], &env).await;
    assert!(url.starts_with("http://0.0.0.0:"), "{url}");
    let port = url.rsplit(':').next().unwrap();
    let ws = format!("ws://127.0.0.1:{port}/v1/ws");

    // `tidegate token` signs with the same variable, so its token works...
    let mut c = Client::connect(&ws, &token(&env)).await.unwrap();
    assert_eq!(c.next_json().await["type"], "welcome");
    // ...and one signed with the sample secret does not.
    match Client::connect(&ws, &token(&[])).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => assert_eq!(r.status(), 401),
        Err(e) => panic!("expected a 401, got {e}"),
        Ok(_) => panic!("a token signed with the sample secret was accepted"),
    }
    // The public sample API key is not accepted off loopback.
    let resp = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{port}/v1/publish"))
        .bearer_auth(tidegate::config::SAMPLE_API_KEY)
        .json(&serde_json::json!({"channel": "doc:1", "data": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    child.kill().await.unwrap();
}

#[test]
fn check_config_says_where_each_value_came_from_and_masks_secrets() {
    let dir = std::env::temp_dir().join(format!("tidegate-cli-env-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("node.toml");
    std::fs::write(
        &file,
        "[node]\nid = \"from-file\"\n[auth]\njwt_secret = \"file-secret-0123456789\"\n[plans.free]\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["check-config", "--listen", "127.0.0.1:7000"])
        .arg(&file)
        .env("TIDEGATE_CLUSTER_REDIS_URL", "redis://:hunter2@db:6379/")
        .env("TIDEGATE_HISTORY_SIZE", "5")
        .env_remove("TIDEGATE_JWT_SECRET")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in [
        "node.id = \"from-file\"  (file)",
        "node.listen = \"127.0.0.1:7000\"  (flag --listen)",
        "history.size = 5  (env TIDEGATE_HISTORY_SIZE)",
        "cluster.redis_url = \"redis://:********@db:6379/\"  (env TIDEGATE_CLUSTER_REDIS_URL)",
        "auth.jwt_secret = \"********\" (22 bytes)  (file)",
        "socket.heartbeat_interval_ms = 15000  (default)",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
    assert!(
        !text.contains("hunter2") && !text.contains("file-secret"),
        "{text}"
    );

    // A bad value from the environment names its variable.
    let out = Command::new(BIN)
        .arg("check-config")
        .env("TIDEGATE_SOCKET_CLIENT_TIMEOUT_MS", "soon")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("TIDEGATE_SOCKET_CLIENT_TIMEOUT_MS"));
}

#[test]
fn serve_help_shows_each_flag_and_its_variable() {
    let out = Command::new(BIN)
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for (flag, var) in [
        ("--config", "TIDEGATE_CONFIG"),
        ("--listen", "TIDEGATE_NODE_LISTEN"),
        ("--node-id", "TIDEGATE_NODE_ID"),
        ("--log-format", "TIDEGATE_LOG_FORMAT"),
        ("--log-level", "TIDEGATE_LOG_LEVEL"),
    ] {
        assert!(
            help.contains(flag) && help.contains(&format!("[env: {var}")),
            "{flag} {var}:\n{help}"
        );
    }
}

#[tokio::test]
async fn sighup_without_a_file_is_logged_and_ignored() {
    let (mut child, url, mut stderr) =
        serve(&["--listen", "127.0.0.1:0", "--log-format", "json"], &[]).await;
    let pid = child.id().unwrap().to_string();
    assert!(
        Command::new("kill")
            .args(["-HUP", &pid])
            .status()
            .unwrap()
            .success()
    );
    let logged = tokio::time::timeout(PATIENCE, async {
        while let Some(line) = stderr.next_line().await.unwrap() {
            let v: serde_json::Value = match serde_json::from_str(&line) {
                Ok(v) => v,
                Err(e) => {
                    let mut rest = Vec::new();
                    while let Ok(Some(l)) = stderr.next_line().await {
                        rest.push(l);
                    }
                    panic!("--log-format json: {e} in {line:?}; then {rest:?}");
                }
            };
            let message = v["fields"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            if message.contains("SIGHUP ignored") {
                return message;
            }
        }
        panic!("stderr closed: the node died on SIGHUP");
    })
    .await
    .unwrap();
    assert!(logged.contains("no --config file"), "{logged}");
    assert!(
        child.try_wait().unwrap().is_none(),
        "the node is still running"
    );
    let text = reqwest::get(format!("{url}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(
        metric_value(&text, r#"tidegate_config_reloads_total{outcome="ignored"}"#),
        1.0
    );
    child.kill().await.unwrap();
}
