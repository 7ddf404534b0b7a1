//! The process at its file-descriptor limit (issue 15): the broker, run
//! under a low `ulimit -n`, refuses new sockets with 503 `node_overloaded`
//! while it still has descriptors to answer with, keeps serving the open
//! ones, and takes new sockets again once some close.

use std::time::Instant;

use serde_json::json;

use crate::common::{Client, PATIENCE, metric_value, refusal};
use crate::process::{Proc, shipped};

const NOFILE: u32 = 100;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_descriptor_limit_new_sockets_are_refused_cleanly_and_open_ones_served() {
    // Every other limit out of the way: one account (on the free plan), one
    // IP, many sockets.
    let text = shipped(&[
        ("workers = 0", "workers = 1"),
        (
            "ip_handshakes_per_sec = 5\nip_handshake_burst = 20\nip_max_open = 50",
            "ip_handshakes_per_sec = 100000\nip_handshake_burst = 100000\nip_max_open = 100000",
        ),
        ("\nmax_connections = 8\n", "\nmax_connections = 1000\n"),
        ("\nhandshake_burst = 10\n", "\nhandshake_burst = 1000\n"),
    ]);
    let p = Proc::start_limited(&text, Some(NOFILE)).await;
    assert_eq!(
        metric_value(&p.metrics().await, "tidegate_process_max_fds"),
        f64::from(NOFILE)
    );
    let token = p.token("fd-test");

    // Open sockets until the node refuses: always with an HTTP answer (the
    // helper panics on a connection that fails without one).
    let mut open = Vec::new();
    let refused = loop {
        assert!(
            open.len() < NOFILE as usize,
            "{} sockets under a limit of {NOFILE} descriptors",
            open.len()
        );
        match refusal(Client::connect(&p.ws(), &token).await) {
            Ok(mut c) => {
                assert_eq!(c.next_json().await["type"], "welcome");
                open.push(c);
            }
            Err(r) => break r,
        }
    };
    assert_eq!(refused.0, 503, "{refused:?}");
    assert_eq!(refused.1["error"], "node_overloaded", "{refused:?}");
    assert!(!open.is_empty());

    // The open sockets are served, and so is /metrics.
    for (i, c) in open.iter_mut().enumerate() {
        let budget = c.call(json!({"type":"budget"}), i as u64 + 1).await;
        assert_eq!(budget["type"], "budget", "{budget}");
    }
    let text = p.metrics().await;
    assert!(metric_value(&text, "tidegate_process_open_fds") < f64::from(NOFILE));

    // Five close; once the node has seen them go, new sockets are taken.
    for mut c in open.drain(..5) {
        let _ = c.ws.close(None).await;
        c.closed().await;
    }
    let deadline = Instant::now() + PATIENCE;
    while metric_value(&p.metrics().await, "tidegate_connections{transport=\"ws\"}")
        != open.len() as f64
    {
        assert!(Instant::now() < deadline, "the closes were never seen");
    }
    for _ in 0..5 {
        let mut c = Client::connect(&p.ws(), &token)
            .await
            .expect("a socket again");
        assert_eq!(c.next_json().await["type"], "welcome");
        open.push(c);
    }
}
