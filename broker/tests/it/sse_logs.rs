//! The SSE stream's token may travel in the query string (§14: a
//! browser's `EventSource` cannot set headers), so it must never reach a
//! log, at any level: the broker as a process, at `trace`, through an
//! accepted stream, a refused one and a stream that ends.

use std::time::Instant;

use crate::common::PATIENCE;
use crate::sse_client::open;

const BIN: &str = env!("CARGO_BIN_EXE_tidegate");

#[tokio::test]
async fn the_query_token_never_reaches_the_log() {
    let dir = std::env::temp_dir().join(format!("tidegate-sse-log-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("broker.log");
    let mut child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg("exec \"$0\" serve --listen 127.0.0.1:0 --grpc-listen 127.0.0.1:0 >\"$1\" 2>&1")
        .arg(BIN)
        .arg(&log)
        .env("RUST_LOG", "trace")
        .env("TIDEGATE_CLUSTER_SECRET", crate::common::CLUSTER_SECRET)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + PATIENCE;
    let addr: std::net::SocketAddr = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(rest) = text.split("tidegate listening on http://").nth(1) {
            break rest
                .lines()
                .next()
                .unwrap()
                .trim_end_matches('/')
                .parse()
                .unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "the broker did not start:\n{text}"
        );
        tokio::task::yield_now().await;
    };
    let out = std::process::Command::new(BIN)
        .args(["token", "--account", "acme", "--sub", "doc:*"])
        .output()
        .unwrap();
    let token = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    assert_eq!(token.split('.').count(), 3, "{token}");
    let mut s = open(addr, &format!("/v1/sse?channel=doc:1&token={token}"), &[])
        .await
        .expect("opened");
    assert!(s.event().await.is("welcome"));
    let refused = open(
        addr,
        &format!("/v1/sse?channel=secret:1&token={token}"),
        &[],
    )
    .await;
    assert_eq!(refused.err().unwrap().0, 403);
    drop(s);
    child.kill().await.unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.lines().count() > 10, "trace logging is on:\n{text}");
    let signature = token.rsplit('.').next().unwrap();
    assert!(!text.contains(signature), "the token was logged:\n{text}");
    let _ = std::fs::remove_dir_all(&dir);
}
