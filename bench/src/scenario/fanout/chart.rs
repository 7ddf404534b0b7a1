//! The fan-out report's comparisons and chart.

use anyhow::Result;
use serde_json::json;

use super::FanoutCell;
use crate::report;

/// Tidegate over `peer`, cell by cell (empty when `peer` did not run).
pub(super) fn compare(cells: &[FanoutCell], peer: &str) -> Vec<serde_json::Value> {
    let mut comparisons = Vec::new();
    for t in cells.iter().filter(|c| c.broker == "tidegate") {
        if let Some(n) = cells.iter().find(|c| {
            c.broker == peer && c.subscribers == t.subscribers && c.payload_bytes == t.payload_bytes
        }) {
            comparisons.push(json!({
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
    let mut comparisons = Vec::new();
    for g in cells.iter().filter(|c| c.broker == peer) {
        if let Some(w) = cells.iter().find(|c| {
            c.broker == "tidegate"
                && c.subscribers == g.subscribers
                && c.payload_bytes == g.payload_bytes
        }) {
            comparisons.push(json!({
                "subscribers": g.subscribers,
                "payload_bytes": g.payload_bytes,
                "delivered_per_sec_ratio": report::ratio(g.delivered_per_sec, w.delivered_per_sec),
                "p99_ratio": report::ratio(g.latency.p99_us as f64, w.latency.p99_us as f64),
                "cpu_us_per_publish_ratio": report::ratio(g.broker_cpu_us_per_publish, w.broker_cpu_us_per_publish),
                format!("{peer}_lost"): g.lost,
                "ws_lost": w.lost,
            }));
        }
    }
    comparisons
}

/// Delivered messages/s and p99 per cell, one bar per broker.
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
    let brokers = ["tidegate", "graphql", "sse", "nats", "relay"]
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
