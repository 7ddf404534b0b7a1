//! Issue 38: no Redis script's work is out of proportion to the units
//! charged for it. With a long history in Redis (2,000 messages of 3 KiB,
//! 6 MiB), a channel's `seq` and `history(last: 1)` over GraphQL and joins
//! with `since` at (or one before) the current `seq` over `/v1/ws` and
//! gRPC each make Redis read and send about what they return, as Redis's
//! own counters say: the bytes it sent (`INFO stats`), the list commands
//! it ran (`INFO commandstats`, which counts those a script runs), and how
//! long each script call took (`SLOWLOG`, as a shape: the median call on
//! the long history within a small factor of the one on a 20-message
//! history, where reading the list would make it a hundred times slower).

use futures_util::future::join_all;
use serde_json::json;
use tidegate::grpc::proto::subscribe_event::Event;

use crate::cluster::{bridge_up, node, prefix};
use crate::cluster_sharded::master;
use crate::common::{API_KEY, Broker};
use crate::graphql::query;
use crate::grpc::{authed, connect, subscribe_req};
use crate::grpc_subscribe::next;
use crate::redis_cluster::{Backend, on_both, on_owner};

on_both!(
    reads_of_a_long_redis_history_read_only_what_they_return,
    recovery_and_history_across_seq_jumps_return_exactly_what_follows_since,
);

/// The long history: messages, and each one's data.
const LONG: usize = 2000;
const SHORT: usize = 20;
const DATA: usize = 3 << 10;

/// What Redis (every master) says it did, summed.
#[derive(Debug, Default, Clone, Copy)]
struct Work {
    /// `total_net_output_bytes`: bytes sent to clients.
    sent: u64,
    /// Calls of the commands that read a list's elements.
    list_reads: u64,
}

async fn info(port: u16, section: &str) -> String {
    redis::cmd("INFO")
        .arg(section)
        .query_async(&mut master(port).await)
        .await
        .unwrap()
}

/// The `calls=` of `cmdstat_<cmd>` in an `INFO commandstats` text.
fn calls(text: &str, cmd: &str) -> u64 {
    let head = format!("cmdstat_{cmd}:calls=");
    text.lines()
        .find_map(|l| l.strip_prefix(&head))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

async fn work(redis: &impl Backend) -> Work {
    let mut w = Work::default();
    for port in redis.ports() {
        let stats = info(port, "stats").await;
        w.sent += stats
            .lines()
            .find_map(|l| l.strip_prefix("total_net_output_bytes:"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap();
        let cmds = info(port, "commandstats").await;
        w.list_reads += ["lrange", "lindex", "lpos", "lmpop", "sort"]
            .iter()
            .map(|c| calls(&cmds, c))
            .sum::<u64>();
    }
    w
}

/// Every master logs every command (`SLOWLOG` with no threshold), its log
/// emptied.
async fn log_everything(redis: &impl Backend) {
    for port in redis.ports() {
        let mut conn = master(port).await;
        for (k, v) in [
            ("slowlog-log-slower-than", "0"),
            ("slowlog-max-len", "8192"),
        ] {
            let () = redis::cmd("CONFIG")
                .arg("SET")
                .arg(k)
                .arg(v)
                .query_async(&mut conn)
                .await
                .unwrap();
        }
        let () = redis::cmd("SLOWLOG")
            .arg("RESET")
            .query_async(&mut conn)
            .await
            .unwrap();
    }
}

/// The median duration (µs) of the script calls on the channel's keys
/// that every master logged since [`log_everything`].
async fn median_script_us(redis: &impl Backend, seq_key: &str) -> u64 {
    let mut us = Vec::new();
    for port in redis.ports() {
        let log: Vec<redis::Value> = redis::cmd("SLOWLOG")
            .arg("GET")
            .arg(-1)
            .query_async(&mut master(port).await)
            .await
            .unwrap();
        for entry in log {
            let redis::Value::Array(fields) = entry else {
                continue;
            };
            let (Some(redis::Value::Int(d)), Some(redis::Value::Array(args))) =
                (fields.get(2), fields.get(3))
            else {
                continue;
            };
            let args: Vec<String> = args
                .iter()
                .filter_map(|a| match a {
                    redis::Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
                    _ => None,
                })
                .collect();
            if args
                .first()
                .is_some_and(|c| c.eq_ignore_ascii_case("evalsha"))
                && args.get(3).is_some_and(|k| k == seq_key)
            {
                us.push(*d as u64);
            }
        }
    }
    assert!(
        us.len() >= 5,
        "{} script calls on {seq_key} logged",
        us.len()
    );
    us.sort_unstable();
    us[us.len() / 2]
}

/// Publishes `n` messages of [`DATA`] bytes on `channel`; the last `seq`.
async fn fill(b: &Broker, channel: &str, n: usize) -> u64 {
    let data = format!("\"{}\"", "x".repeat(DATA - 2));
    let mut last = 0;
    for chunk in (0..n).collect::<Vec<_>>().chunks(100) {
        let seqs = join_all(
            chunk
                .iter()
                .map(|_| b.node.publish(channel, &data, "test", None)),
        )
        .await;
        let seqs = seqs.into_iter().map(|p| p.seq);
        last = last.max(seqs.into_iter().max().unwrap());
    }
    last
}

/// What one kind of read made Redis do, per read, with the median script
/// call on the channel.
struct PerRead {
    sent: u64,
    list_reads: u64,
    median_us: u64,
}

/// Starts measuring: every master logs every command from now on; what
/// Redis did so far.
async fn start(redis: &impl Backend) -> Work {
    log_everything(redis).await;
    work(redis).await
}

/// What Redis did per read for `n` reads since `before`, with the median
/// script call on the channel of `seq_key`.
async fn per_read(redis: &impl Backend, seq_key: &str, before: Work, n: u64) -> PerRead {
    let after = work(redis).await;
    PerRead {
        sent: (after.sent - before.sent) / n,
        list_reads: (after.list_reads - before.list_reads) / n,
        median_us: median_script_us(redis, seq_key).await,
    }
}

fn seq_key(redis: &impl Backend, p: &str, channel: &str) -> String {
    if redis.mode() == "redis" {
        format!("{p}seq:{channel}")
    } else {
        format!("{p}seq:{{{channel}}}")
    }
}

/// GraphQL's `Channel.seq` and `history(last: 1)` on `channel` (whose
/// last `seq` is `last`).
async fn graphql_reads(b: &Broker, channel: &str, last: u64) {
    let q = format!("{{ channel(name: \"{channel}\") {{ seq history(last: 1) {{ seq }} }} }}");
    let a = query(b, &q, json!({})).await;
    let ch = &a.body["data"]["channel"];
    assert_eq!(ch["seq"].as_u64(), Some(last), "{}", a.text);
    assert_eq!(ch["history"][0]["seq"].as_u64(), Some(last), "{}", a.text);
}

/// A socket's join with `since` (then its leave): recovers `expected`, in
/// order, at the channel's `last` seq.
async fn socket_join(
    c: &mut crate::common::Client,
    channel: &str,
    since: u64,
    expected: &[u64],
    last: u64,
) {
    let ack = c
        .call(
            json!({"type":"subscribe","channel":channel,"since":since}),
            1,
        )
        .await;
    assert_eq!(
        (ack["recovered"].as_bool(), ack["seq"].as_u64()),
        (Some(true), Some(last)),
        "{ack}"
    );
    for seq in expected {
        let m = c.until(|v| v["type"] == "message").await;
        assert_eq!(m["seq"].as_u64(), Some(*seq), "since {since}: {m}");
    }
    let ack = c
        .call(json!({"type":"unsubscribe","channel":channel}), 2)
        .await;
    assert_eq!(ack["type"], "ack", "{ack}");
}

/// A gRPC `Subscribe` with `since` at the channel's last `seq`.
async fn grpc_join(b: &Broker, channel: &str, last: u64) {
    let mut c = connect(b).await;
    let mut s = c
        .subscribe(authed(subscribe_req(&[(channel, Some(last))]), API_KEY))
        .await
        .unwrap()
        .into_inner();
    match next(&mut s).await.unwrap() {
        Some(Event::Ack(a)) => assert_eq!((a.recovered, a.seq), (Some(true), last)),
        other => panic!("{other:?}"),
    }
}

async fn reads_of_a_long_redis_history_read_only_what_they_return(redis: &impl Backend) {
    let p = prefix();
    let config = "[history]\nsize = 2000\nttl_ms = 600000\n\
                  [plans.free]\nmessages_per_sec = 1000\nburst = 1000\n";
    let b = node(redis, "a", &p, config);
    bridge_up(&b, true).await;
    let (long, short) = ("doc:long", "doc:short");
    let long_last = fill(&b, long, LONG).await;
    let short_last = fill(&b, short, SHORT).await;
    let history = (LONG * DATA) as u64;
    // Each read returns at most one message: Redis may send a few times
    // that (the message, the bucket scripts' answers), never the list.
    let small = 4 * DATA as u64;
    let mut c = b.client("acme").await;

    // (what, on the long history, on the short one)
    let mut checks: Vec<(&str, PerRead, PerRead)> = Vec::new();
    const N: u64 = 8;
    for what in [
        "graphql",
        "ws since=seq",
        "ws since=seq-1",
        "grpc since=seq",
    ] {
        let mut per = Vec::new();
        for (channel, last) in [(long, long_last), (short, short_last)] {
            // A round counts only if Redis served all of it: a command
            // that timed out (a loaded machine, `COMMAND_TIMEOUT`) sends
            // the channel's shard into serving alone for a while, and
            // reads then never reach Redis. Such a round is run again.
            let mut tries = 0;
            let round = loop {
                tries += 1;
                bridge_up(&b, true).await;
                let outages = b.node.metrics.bridge_outages.get();
                let before = start(redis).await;
                for _ in 0..N {
                    match what {
                        "graphql" => graphql_reads(&b, channel, last).await,
                        "ws since=seq" => socket_join(&mut c, channel, last, &[], last).await,
                        "ws since=seq-1" => {
                            socket_join(&mut c, channel, last - 1, &[last], last).await
                        }
                        _ => grpc_join(&b, channel, last).await,
                    }
                }
                if b.node.metrics.bridge_outages.get() == outages || tries == 3 {
                    break per_read(redis, &seq_key(redis, &p, channel), before, N).await;
                }
            };
            per.push(round);
        }
        let short_r = per.pop().unwrap();
        let long_r = per.pop().unwrap();
        checks.push((what, long_r, short_r));
    }
    for (what, long_r, short_r) in &checks {
        assert!(
            long_r.sent <= small,
            "{what}: Redis sent {} bytes a read of a {history}-byte history",
            long_r.sent
        );
        assert!(
            long_r.list_reads <= 16,
            "{what}: {} list reads a read of a {LONG}-message history",
            long_r.list_reads
        );
        assert!(
            long_r.median_us <= 10 * short_r.median_us.max(1),
            "{what}: a script call on a {LONG}-message history took {} µs (median), \
             {} µs on a {SHORT}-message one",
            long_r.median_us,
            short_r.median_us
        );
    }
}

/// Raises the channel's counter in Redis by `by` (as a floor raised after
/// an outage or a failover's fence does), keeping its TTL.
async fn jump(redis: &impl Backend, key: &str, by: u64) {
    let cur: u64 = on_owner(redis, redis::cmd("GET").arg(key)).await;
    let () = on_owner(
        redis,
        redis::cmd("SET").arg(key).arg(cur + by).arg("KEEPTTL"),
    )
    .await;
}

async fn recovery_and_history_across_seq_jumps_return_exactly_what_follows_since(
    redis: &impl Backend,
) {
    let p = prefix();
    let config = "[plans.free]\nmessages_per_sec = 1000\nburst = 1000\n\
                  account_messages_per_sec = 100000\naccount_burst = 100000\n";
    let b = node(redis, "a", &p, config);
    bridge_up(&b, true).await;
    let channel = "doc:jumps";
    let key = seq_key(redis, &p, channel);
    // 30 messages, the counter jumping twice: by 1,000 after the 10th and
    // by 5 after the 20th.
    let mut seqs = Vec::new();
    for i in 0..30u64 {
        if i == 10 {
            jump(redis, &key, 1000).await;
        }
        if i == 20 {
            jump(redis, &key, 5).await;
        }
        seqs.push(
            b.node
                .publish(channel, &i.to_string(), "test", None)
                .await
                .seq,
        );
    }
    assert!(
        seqs[10] > seqs[9] + 1000 && seqs[20] > seqs[19] + 5,
        "{seqs:?}"
    );
    let last = seqs[29];
    let mut c = b.client("acme").await;
    let points = [
        seqs[0] - 1,
        seqs[0],
        seqs[4],
        seqs[9],
        seqs[9] + 500,
        seqs[10] - 1,
        seqs[10],
        seqs[19],
        seqs[20] - 1,
        seqs[25],
        last - 1,
        last,
    ];
    for since in points {
        let after: Vec<u64> = seqs.iter().copied().filter(|s| *s > since).collect();
        socket_join(&mut c, channel, since, &after, last).await;
        let q = format!(
            "{{ all: channel(name: \"{channel}\") {{ history(last: 50, since: {since}) {{ seq }} }} \
             few: channel(name: \"{channel}\") {{ history(last: 3, since: {since}) {{ seq }} }} }}"
        );
        let a = query(&b, &q, json!({})).await;
        let got = |alias: &str| -> Vec<u64> {
            a.body["data"][alias]["history"]
                .as_array()
                .unwrap_or_else(|| panic!("{}", a.text))
                .iter()
                .map(|m| m["seq"].as_u64().unwrap())
                .collect()
        };
        assert_eq!(got("all"), after, "since {since}");
        assert_eq!(
            got("few"),
            after[after.len().saturating_sub(3)..],
            "since {since}"
        );
    }
    // Below the oldest held message (but for the one just before it),
    // nothing is recovered.
    let ack = c
        .call(
            json!({"type":"subscribe","channel":channel,"since":seqs[0] - 2}),
            3,
        )
        .await;
    assert_eq!(ack["recovered"], false, "{ack}");
}
