//! The fan-out report's comparisons and chart.

use anyhow::Result;
use serde_json::json;

use super::FanoutCell;
use crate::report;

/// Tidegate over `peer`, cell by cell (empty when `peer` did not run).
pub(super) fn compare(cells: &[FanoutCell], peer: &str) -> Vec<serde_json::Value> {
    let mut comparisons = Vec::new();
    for t in cells.iter().filter(|c| c.broker == "tidegate") {
        if let Some(n) = cells.iter().find(|c| c.broker == peer && same_cell(c, t)) {
            comparisons.push(json!({
                "round": t.round,
                "subscribers": t.subscribers,
                "payload_bytes": t.payload_bytes,
                "delivered_per_sec_ratio": report::ratio(t.delivered_per_sec, n.delivered_per_sec),
                "p99_ratio": report::ratio(t.latency.p99_us as f64, n.latency.p99_us as f64),
                "tidegate_lost": t.lost,
                format!("{peer}_lost"): n.lost,
            }));
        }
    }
    comparisons
}

/// `peer`'s subscribers (`graphql`, `sse`) over `/v1/ws` subscribers,
/// cell by cell (empty without `--peer <peer>`): the goals are at least
/// 0.9 for GraphQL, 0.8 for SSE (issue 28).
pub(super) fn compare_with_ws(cells: &[FanoutCell], peer: &str) -> Vec<serde_json::Value> {
    compare_cells(cells, peer, "tidegate", "ws")
}

/// `peer`'s cells over `base`'s (`pusher` over `sockudo`: Tidegate's
/// Pusher wire over Sockudo's, issue 40's goal being at least 1), cell by
/// cell, in [`compare_with_ws`]'s shape.
pub(super) fn compare_between(
    cells: &[FanoutCell],
    peer: &str,
    base: &str,
) -> Vec<serde_json::Value> {
    compare_cells(cells, peer, base, base)
}

fn compare_cells(
    cells: &[FanoutCell],
    peer: &str,
    base: &str,
    base_label: &str,
) -> Vec<serde_json::Value> {
    let mut comparisons = Vec::new();
    for g in cells.iter().filter(|c| c.broker == peer) {
        if let Some(w) = cells.iter().find(|c| c.broker == base && same_cell(c, g)) {
            comparisons.push(json!({
                "round": g.round,
                "subscribers": g.subscribers,
                "payload_bytes": g.payload_bytes,
                "delivered_per_sec_ratio": report::ratio(g.delivered_per_sec, w.delivered_per_sec),
                "p99_ratio": report::ratio(g.latency.p99_us as f64, w.latency.p99_us as f64),
                "cpu_us_per_publish_ratio": report::ratio(g.broker_cpu_us_per_publish, w.broker_cpu_us_per_publish),
                format!("{peer}_lost"): g.lost,
                format!("{base_label}_lost"): w.lost,
            }));
        }
    }
    comparisons
}

/// The same cell of the same round.
fn same_cell(a: &FanoutCell, b: &FanoutCell) -> bool {
    a.round == b.round && a.subscribers == b.subscribers && a.payload_bytes == b.payload_bytes
}

/// A peer's per-round comparisons ([`compare_with_ws`]) summed up per
/// (subscribers, payload): the median, lowest and highest ratio over the
/// rounds. On two cores one pair of cells can land 20 % either side of
/// the next (the broker's batching follows its readers' pace), so a goal
/// is read off the median of interleaved rounds, not one pair.
pub(super) fn over_rounds(comparisons: &[serde_json::Value]) -> Vec<serde_json::Value> {
    let mut keys: Vec<(u64, u64)> = Vec::new();
    for c in comparisons {
        let key = (c["subscribers"].as_u64(), c["payload_bytes"].as_u64());
        if let (Some(s), Some(b)) = key
            && !keys.contains(&(s, b))
        {
            keys.push((s, b));
        }
    }
    // The middle value (the mean of the two middle ones), to 0.01.
    let median = |mut v: Vec<f64>| -> Option<f64> {
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let m = match n {
            0 => return None,
            _ if n % 2 == 1 => v[n / 2],
            _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        };
        Some(report::round2(m))
    };
    keys.into_iter()
        .map(|(s, b)| {
            let of = |field: &str| -> Vec<f64> {
                (comparisons.iter())
                    .filter(|c| c["subscribers"] == s && c["payload_bytes"] == b)
                    .filter_map(|c| c[field].as_f64())
                    .collect()
            };
            let ratios = of("delivered_per_sec_ratio");
            json!({
                "subscribers": s,
                "payload_bytes": b,
                "rounds": ratios.len(),
                "delivered_per_sec_ratio_median": median(ratios.clone()),
                "delivered_per_sec_ratio_lowest": ratios.iter().copied().reduce(f64::min),
                "delivered_per_sec_ratio_highest": ratios.iter().copied().reduce(f64::max),
                "cpu_us_per_publish_ratio_median": median(of("cpu_us_per_publish_ratio")),
            })
        })
        .collect()
}

/// Delivered messages/s and p99 per cell, one bar per broker (round 1's
/// cells when there are several rounds).
pub(super) fn chart(path: &std::path::Path, cells: &[FanoutCell]) -> Result<()> {
    use crate::chart::{Bars, Panel, Series, color_of, draw};
    let mut keys: Vec<(usize, usize)> = Vec::new();
    for c in cells {
        if !keys.contains(&(c.subscribers, c.payload_bytes)) {
            keys.push((c.subscribers, c.payload_bytes));
        }
    }
    let labels: Vec<String> = keys
        .iter()
        .map(|(s, b)| format!("{s} subs, {b} B"))
        .collect();
    let brokers = [
        "tidegate", "graphql", "sse", "pusher", "sockudo", "nats", "relay",
    ]
    .into_iter()
    .filter(|b| cells.iter().any(|c| c.broker == *b));
    let panel = |title: &str, y: &str, f: &dyn Fn(&FanoutCell) -> f64| {
        let series = brokers.clone().map(|b| {
            let at = |&(s, n): &(usize, usize)| {
                let cell = cells
                    .iter()
                    .find(|c| c.broker == b && c.subscribers == s && c.payload_bytes == n);
                cell.map_or(0.0, f)
            };
            Series::new(b, color_of(b), keys.iter().map(at).collect())
        });
        let (title, y_desc) = (title.into(), y.into());
        Panel::Bars(Bars {
            title,
            y_desc,
            categories: labels.clone(),
            series: series.collect(),
            hline: None,
        })
    };
    let rate = panel("Fan-out: delivered messages/s", "million msgs/s", &|c| {
        c.delivered_per_sec / 1e6
    });
    let p99 = panel("Fan-out: p99 publish→receive", "ms", &|c| {
        c.latency.p99_us as f64 / 1000.0
    });
    draw(path, (1200, 480), &[(600, rate), (600, p99)])
}
