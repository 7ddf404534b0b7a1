//! The load generator against the real broker: a short fan-out and a short
//! handshake run, and a fan-out beside the minimal relay, asserting the
//! shape of the JSON result (never a timing).
//!
//! Needs the release broker: `cargo build --release -p tidegate` (the
//! project's test script builds it first), or `TIDEGATE_BIN=path`.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn tidegate_bin() -> PathBuf {
    match tidegate_bench::procs::find_tidegate_bin() {
        Some(p) if p.is_file() => p,
        other => panic!(
            "no release Tidegate binary (looked for {other:?}, TIDEGATE_BIN, <target>/release/tidegate): \
             run `cargo build --release -p tidegate` first, or set TIDEGATE_BIN"
        ),
    }
}

fn run(args: &[&str]) -> Value {
    run_beside("none", args)
}

/// `args` with `peer` measured beside Tidegate.
fn run_beside(peer: &str, args: &[&str]) -> Value {
    let out = tempfile_path(&format!("{}-{peer}", args[0]));
    let output = Command::new(env!("CARGO_BIN_EXE_tidegate-load"))
        .arg("--tidegate-bin")
        .arg(tidegate_bin())
        .args(["--peer", peer, "--no-pin", "--out"])
        .arg(&out)
        .args(args)
        .output()
        .expect("tidegate-load runs");
    assert!(
        output.status.success(),
        "tidegate-load {args:?} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let printed: Value =
        serde_json::from_slice(&output.stdout).expect("stdout is one JSON document");
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(&out).expect("--out written")).unwrap();
    let _ = std::fs::remove_file(&out);
    assert_eq!(printed, written, "--out holds what was printed");
    for key in ["scenario", "machine", "params", "results"] {
        assert!(printed.get(key).is_some(), "missing {key}: {printed}");
    }
    assert!(printed["machine"]["cpu_model"].is_string());
    assert!(printed["machine"]["cores"].as_u64().unwrap() >= 1);
    printed
}

fn tempfile_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "tidegate-bench-smoke-{name}-{}.json",
        std::process::id()
    ))
}

#[test]
fn fanout_delivers_and_reports_its_fields() {
    let r = run(&[
        "fanout",
        "--subscribers",
        "10",
        "--payload",
        "64",
        "--warmup",
        "0.3",
        "--duration",
        "1",
        "--idle",
        "0.2",
    ]);
    assert_eq!(r["scenario"], "fanout");
    let cell = &r["results"]["cells"][0];
    assert_eq!(cell["broker"], "tidegate");
    assert_eq!(cell["subscribers"], 10);
    assert_eq!(cell["payload_bytes"], 64);
    assert!(cell["published"].as_u64().unwrap() > 0, "{cell}");
    assert!(cell["delivered"].as_u64().unwrap() > 0, "{cell}");
    assert!(cell["acks"].as_u64().unwrap() > 0, "{cell}");
    assert_eq!(cell["subscriber_closes"], 0, "{cell}");
    for key in [
        "delivered_per_sec",
        "lost",
        "loss_ratio",
        "broker_rss_mib_max",
        "broker_idle_cpu_cores",
        "broker_cpu_us_per_publish_net",
    ] {
        assert!(cell[key].is_number(), "missing {key}: {cell}");
    }
    // Publishing costs the broker CPU, so the per-publish figure is there.
    assert!(
        cell["broker_cpu_us_per_publish"].as_f64().unwrap() > 0.0,
        "{cell}"
    );
    let latency = &cell["latency"];
    assert!(latency["count"].as_u64().unwrap() > 0, "{latency}");
    for key in ["p50_us", "p99_us", "p999_us", "max_us"] {
        assert!(latency[key].is_u64(), "missing {key}: {latency}");
    }
}

#[test]
fn handshakes_complete_and_are_counted() {
    let r = run(&[
        "handshakes",
        "--concurrency",
        "4",
        "--duration",
        "0.5",
        "--tokens",
        "100",
    ]);
    let run = &r["results"]["runs"][0];
    assert_eq!(run["broker"], "tidegate");
    assert!(run["completed"].as_u64().unwrap() > 0, "{run}");
    assert!(
        run["refusals"].is_object() && run["errors"].is_object(),
        "{run}"
    );
}

/// A short fan-out with `peer` beside Tidegate: the peer's cell delivered
/// with no closed subscriber and no error, and `comparison` (the report's
/// key comparing the two) has one cell with a ratio. Returns the report
/// and the peer's cell.
fn fanout_beside(peer: &str, comparison: &str) -> (Value, Value) {
    let r = run_beside(
        peer,
        &[
            "fanout",
            "--subscribers",
            "10",
            "--payload",
            "64",
            "--warmup",
            "0.3",
            "--duration",
            "1",
        ],
    );
    assert_eq!(
        r["params"]["brokers"],
        serde_json::json!(["tidegate", peer])
    );
    let cells = r["results"]["cells"].as_array().unwrap();
    let cell = cells
        .iter()
        .find(|c| c["broker"] == peer)
        .unwrap_or_else(|| panic!("no {peer} cell: {cells:?}"))
        .clone();
    assert!(cell["delivered"].as_u64().unwrap() > 0, "{cell}");
    assert_eq!(cell["subscriber_closes"], 0, "{cell}");
    assert_eq!(cell["errors"], serde_json::json!({}), "{cell}");
    let vs = r["results"][comparison].as_array().unwrap();
    assert_eq!(vs.len(), 1, "{vs:?}");
    assert!(vs[0]["delivered_per_sec_ratio"].is_number(), "{vs:?}");
    (r, cell)
}

/// The relay (src/relay.rs) speaks enough of Tidegate's protocol for the
/// same fan-out: welcome, subscribe/ack, publish/ack, message frames.
#[test]
fn fanout_drives_the_minimal_relay_unchanged() {
    let (_, relay) = fanout_beside("relay", "tidegate_vs_relay");
    assert!(relay["acks"].as_u64().unwrap() > 0, "{relay}");
}

/// GraphQL subscribers (`graphql-transport-ws`, §12) get the same fan-out
/// as `/v1/ws` subscribers in one run, and the report compares the two.
#[test]
fn fanout_over_graphql_subscriptions_is_compared_with_ws() {
    fanout_beside("graphql", "graphql_vs_ws");
}

/// SSE subscribers (`GET /v1/sse`, §14) get the same fan-out as `/v1/ws`
/// subscribers in one run, and the report compares the two.
#[test]
fn fanout_over_sse_streams_is_compared_with_ws() {
    let (r, _) = fanout_beside("sse", "sse_vs_ws");
    assert_eq!(r["results"]["graphql_vs_ws"], serde_json::json!([]));
    assert_eq!(r["results"]["sse_vs_ws_rounds"][0]["rounds"], 1);
}

/// Pusher subscribers (`/app/{key}`, §16) with Pusher publishers (client
/// events) beside `/v1/ws` in one run, and the report compares the two.
#[test]
fn fanout_over_the_pusher_wire_is_compared_with_ws() {
    // The publishers' client events reached the subscribers (delivered,
    // no close, no error: `fanout_beside` checks the cell).
    let (r, pusher) = fanout_beside("pusher", "pusher_vs_ws");
    assert_eq!(r["results"]["sse_vs_ws"], serde_json::json!([]));
    assert!(pusher["published"].as_u64().unwrap() > 0, "{pusher}");
}

#[test]
fn idle_pusher_connections_are_measured_beside_sockets() {
    let r = run_beside("pusher", &["idle", "--connections", "20", "--hold", "0.2"]);
    let runs = r["results"]["runs"].as_array().unwrap();
    let brokers: Vec<&str> = runs.iter().map(|r| r["broker"].as_str().unwrap()).collect();
    assert_eq!(brokers, ["tidegate", "pusher"], "{runs:?}");
    for run in runs {
        assert_eq!(run["still_open"], true, "{run}");
        assert!(run["rss_per_conn_bytes"].is_u64(), "{run}");
    }
    assert!(
        r["results"]["pusher_vs_ws"]["rss_per_conn_ratio"].is_number(),
        "{r}"
    );
}

/// `--rounds 2` runs the two cells twice, interleaved, pairs them by
/// round and gives the median of the two ratios.
#[test]
fn fanout_rounds_pair_cells_by_round() {
    let r = run_beside(
        "sse",
        &[
            "fanout",
            "--subscribers",
            "5",
            "--warmup",
            "0.2",
            "--duration",
            "0.5",
            "--rounds",
            "2",
        ],
    );
    let cells = r["results"]["cells"].as_array().unwrap();
    let order: Vec<(&str, u64)> = (cells.iter())
        .map(|c| (c["broker"].as_str().unwrap(), c["round"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        order,
        [("tidegate", 1), ("sse", 1), ("tidegate", 2), ("sse", 2)]
    );
    let vs = r["results"]["sse_vs_ws"].as_array().unwrap();
    let rounds: Vec<u64> = vs.iter().map(|c| c["round"].as_u64().unwrap()).collect();
    assert_eq!(rounds, [1, 2], "{vs:?}");
    let summary = &r["results"]["sse_vs_ws_rounds"][0];
    assert_eq!(summary["rounds"], 2, "{summary}");
    let ratio = |c: &Value| c["delivered_per_sec_ratio"].as_f64().unwrap();
    let (low, high) = (
        ratio(&vs[0]).min(ratio(&vs[1])),
        ratio(&vs[0]).max(ratio(&vs[1])),
    );
    assert_eq!(summary["delivered_per_sec_ratio_lowest"], low, "{summary}");
    assert_eq!(
        summary["delivered_per_sec_ratio_highest"], high,
        "{summary}"
    );
    let median = summary["delivered_per_sec_ratio_median"].as_f64().unwrap();
    assert!((low..=high).contains(&median), "{summary}");
    for c in cells {
        assert_eq!(c["subscriber_closes"], 0, "{c}");
        assert_eq!(c["errors"], serde_json::json!({}), "{c}");
    }
}

/// Idle SSE streams are held open beside idle sockets, RSS per stream.
#[test]
fn idle_sse_streams_are_measured_beside_sockets() {
    let r = run_beside("sse", &["idle", "--connections", "20", "--hold", "0.2"]);
    let runs = r["results"]["runs"].as_array().unwrap();
    let brokers: Vec<&str> = runs.iter().map(|r| r["broker"].as_str().unwrap()).collect();
    assert_eq!(brokers, ["tidegate", "sse"], "{runs:?}");
    for run in runs {
        assert_eq!(run["still_open"], true, "{run}");
        assert!(run["rss_per_conn_bytes"].is_u64(), "{run}");
    }
    assert!(
        r["results"]["sse_vs_ws"]["rss_per_conn_ratio"].is_number(),
        "{r}"
    );
}

/// `--polite` closes as RFC 6455 §7.1.1 has it (close frame, then wait
/// for the server's end of stream): every handshake must end that way.
#[test]
fn polite_handshakes_see_the_server_close_first() {
    let r = run(&[
        "handshakes",
        "--concurrency",
        "4",
        "--duration",
        "0.5",
        "--tokens",
        "100",
        "--polite",
    ]);
    assert_eq!(r["params"]["polite"], true);
    let run = &r["results"]["runs"][0];
    assert!(run["completed"].as_u64().unwrap() > 0, "{run}");
    assert_eq!(run["errors"], serde_json::json!({}), "{run}");
}

#[test]
fn grpc_publish_runs_every_transport_to_the_subscribers() {
    let r = run(&["grpc-publish", "--subscribers", "20", "--duration", "0.5"]);
    assert_eq!(r["scenario"], "grpc-publish");
    let phases = r["results"]["phases"].as_array().expect("phases");
    let transports: Vec<&str> = phases
        .iter()
        .map(|p| p["transport"].as_str().unwrap())
        .collect();
    assert_eq!(transports, ["http", "graphql", "grpc_unary", "grpc_stream"]);
    for p in phases {
        assert!(p["published"].as_u64().unwrap() > 0, "{p}");
        assert!(p["delivered"].as_u64().unwrap() > 0, "{p}");
        assert_eq!(p["errors"], 0, "{p}");
        for key in [
            "publishes_per_sec",
            "deliveries_per_sec",
            "broker_cpu_cores",
        ] {
            assert!(p[key].is_number(), "missing {key}: {p}");
        }
    }
}

#[test]
fn keyed_publish_runs_every_phase_on_one_node_and_on_redis() {
    let r = run(&[
        "keyed-publish",
        "--subscribers",
        "10",
        "--duration",
        "0.3",
        "--rounds",
        "2",
    ]);
    assert_eq!(r["scenario"], "keyed-publish");
    for mode in ["memory", "redis"] {
        let m = &r["results"][mode];
        let phases: Vec<&str> = m["phases"]
            .as_array()
            .unwrap_or_else(|| panic!("{mode}: {m}"))
            .iter()
            .map(|p| p["phase"].as_str().unwrap())
            .collect();
        assert_eq!(phases, ["http", "http_keyed", "ws", "ws_keyed"], "{mode}");
        for p in m["phases"].as_array().unwrap() {
            assert!(p["publishes_per_sec"].as_f64().unwrap() > 0.0, "{p}");
            assert!(p["deliveries_per_sec"].as_f64().unwrap() > 0.0, "{p}");
            assert_eq!(p["errors"], 0, "{p}");
            // Redis's own CPU a publish, only where there is a Redis.
            let redis_cpu = p["redis_cpu_us_per_publish"].as_f64();
            assert_eq!(redis_cpu.is_some(), mode == "redis", "{p}");
            assert!(redis_cpu.is_none_or(|us| us > 0.0), "{p}");
        }
        for t in ["http", "ws"] {
            assert!(m["key_cost_pct"][t].is_number(), "{mode}: {m}");
            assert!(m["key_cost_pct_median"][t].is_number(), "{mode}: {m}");
            assert!(m["key_cpu_pct_median"][t].is_number(), "{mode}: {m}");
            // One cost per round: the second round ran its pairs keyed first.
            let by_round = m["key_cost_pct_by_round"][t].as_array();
            assert_eq!(by_round.map(Vec::len), Some(2), "{mode}: {m}");
        }
    }
}

/// A small storm with bystanders: every client comes back, the broker's
/// counter is sampled, and the bystanders report what they saw (shapes
/// only; the numbers are the bench README's).
#[test]
fn storm_reports_bystanders_and_the_brokers_accepts() {
    let r = run(&[
        "storm",
        "--clients",
        "200",
        "--mode",
        "jitter",
        "--jitter-ms",
        "500",
        "--bystanders",
        "5",
    ]);
    let run = &r["results"]["runs"][0];
    assert_eq!(run["reconnected"], 200, "{run}");
    let broker = &run["broker_accepts"];
    assert!(broker["samples"].as_u64().unwrap() > 0, "{broker}");
    assert!(broker["accepted"].as_f64().unwrap() >= 200.0, "{broker}");
    let b = &run["bystanders"];
    assert_eq!(b["bystanders"], 5, "{b}");
    assert_eq!(b["closed"], 0, "{b}");
    for key in [
        "heartbeats",
        "missed_heartbeats",
        "max_heartbeat_gap_ms",
        "pings",
        "max_pong_rtt_ms",
        "published",
        "delivered",
        "max_delivery_ms",
    ] {
        assert!(b[key].is_number(), "missing {key}: {b}");
    }
    assert!(b["pings"].as_u64().unwrap() > 0, "{b}");
}

/// `--peer sockudo` without Sockudo's binary (CI has none) stops before
/// the first cell, naming the flag, rather than after Tidegate's cells;
/// the config it would run Sockudo with is checked by the unit tests of
/// `target::sockudo`.
#[test]
fn the_sockudo_peer_without_its_binary_fails_first_and_says_so() {
    for sockudo_bin in [None, Some("/nonexistent/sockudo")] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tidegate-load"));
        cmd.env_remove("SOCKUDO_BIN")
            .args(["--peer", "pusher,sockudo", "--no-pin"]);
        if let Some(bin) = sockudo_bin {
            cmd.args(["--sockudo-bin", bin]);
        }
        let output = cmd
            .args(["idle", "--connections", "2"])
            .output()
            .expect("tidegate-load runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{stderr}");
        assert!(stderr.contains("--sockudo-bin"), "{stderr}");
        assert!(output.stdout.is_empty(), "no result was printed");
        assert!(!stderr.contains("idle: tidegate"), "no cell ran: {stderr}");
    }
}
