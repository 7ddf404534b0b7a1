//! SVG charts of scenario results (plotters, SVG backend only); the
//! charts over time of one run are in `series.rs`.

mod series;

use std::path::Path;

use anyhow::{Result, anyhow};
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::scenario::behaviours::Outcome;
use crate::scenario::fanout::FanoutCell;
use crate::scenario::handshakes::HandshakeRun;
use crate::scenario::idle::IdleRun;
use crate::scenario::storm::{BIN_MS, StormRun};

pub use self::series::{slow, soak};

const TIDEGATE: RGBColor = RGBColor(0, 114, 178);
const NATS: RGBColor = RGBColor(230, 159, 0);
const THIRD: RGBColor = RGBColor(0, 158, 115);
const FOURTH: RGBColor = RGBColor(204, 121, 167);

fn err(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("chart: {e}")
}

fn color_of(broker: &str) -> RGBColor {
    match broker {
        "nats" => NATS,
        "relay" => THIRD,
        _ => TIDEGATE,
    }
}

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// A white SVG canvas of `size` pixels at `path`.
fn canvas(path: &Path, size: (u32, u32)) -> Result<Area<'_>> {
    let root = SVGBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    Ok(root)
}

/// A grouped bar chart: one group per category, one bar per series.
fn bars(
    area: &Area<'_>,
    title: &str,
    y_desc: &str,
    categories: &[String],
    series: &[(&str, RGBColor, Vec<f64>)],
    hline: Option<(f64, &str)>,
) -> Result<()> {
    let n = categories.len().max(1);
    let top = series
        .iter()
        .flat_map(|s| s.2.iter().copied())
        .chain(hline.map(|h| h.0))
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.15;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), 0f64..top)
        .map_err(err)?;
    let cats = categories.to_vec();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n)
        .x_label_formatter(&move |v| {
            let i = v.round();
            if (v - i).abs() < 0.01 && i >= 0.0 {
                cats.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc(y_desc)
        .draw()
        .map_err(err)?;
    let width = 0.8 / series.len().max(1) as f64;
    for (k, (name, color, values)) in series.iter().enumerate() {
        let color = *color;
        chart
            .draw_series(values.iter().enumerate().map(|(i, &v)| {
                let x0 = i as f64 - 0.4 + k as f64 * width;
                Rectangle::new([(x0, 0.0), (x0 + width * 0.92, v)], color.filled())
            }))
            .map_err(err)?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    if let Some((y, label)) = hline {
        chart
            .draw_series(LineSeries::new(
                [(-0.5, y), (n as f64 - 0.5, y)],
                BLACK.stroke_width(1),
            ))
            .map_err(err)?
            .label(label)
            .legend(|(x, y)| PathElement::new([(x, y), (x + 12, y)], BLACK));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    Ok(())
}

fn values_for(
    cells: &[FanoutCell],
    broker: &str,
    labels: &[(usize, usize)],
    f: impl Fn(&FanoutCell) -> f64,
) -> Vec<f64> {
    labels
        .iter()
        .map(|&(s, b)| {
            cells
                .iter()
                .find(|c| c.broker == broker && c.subscribers == s && c.payload_bytes == b)
                .map_or(0.0, &f)
        })
        .collect()
}

pub fn fanout(path: &Path, cells: &[FanoutCell]) -> Result<()> {
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
    let brokers: Vec<&str> = ["tidegate", "nats", "relay"]
        .into_iter()
        .filter(|b| cells.iter().any(|c| c.broker == *b))
        .collect();
    let root = canvas(path, (1200, 480))?;
    let (left, right) = root.split_horizontally(600);
    let rate: Vec<_> = brokers
        .iter()
        .map(|b| {
            (
                *b,
                color_of(b),
                values_for(cells, b, &keys, |c| c.delivered_per_sec / 1e6),
            )
        })
        .collect();
    bars(
        &left,
        "Fan-out: delivered messages/s",
        "million msgs/s",
        &labels,
        &rate,
        None,
    )?;
    let p99: Vec<_> = brokers
        .iter()
        .map(|b| {
            (
                *b,
                color_of(b),
                values_for(cells, b, &keys, |c| c.latency.p99_us as f64 / 1000.0),
            )
        })
        .collect();
    bars(
        &right,
        "Fan-out: p99 publish→receive",
        "ms",
        &labels,
        &p99,
        None,
    )?;
    root.present().map_err(err)?;
    Ok(())
}

pub fn idle(path: &Path, runs: &[IdleRun]) -> Result<()> {
    let root = canvas(path, (1000, 420))?;
    let (left, right) = root.split_horizontally(500);
    let labels = vec![format!(
        "{} idle subscribed connections",
        runs.first().map_or(0, |r| r.connections)
    )];
    let kib: Vec<_> = runs
        .iter()
        .map(|r| (r.broker, color_of(r.broker), vec![r.rss_per_conn_kib]))
        .collect();
    bars(
        &left,
        "Broker RSS per idle connection",
        "KiB",
        &labels,
        &kib,
        Some((8.0, "target 8 KiB")),
    )?;
    let rate: Vec<_> = runs
        .iter()
        .map(|r| (r.broker, color_of(r.broker), vec![r.connects_per_sec]))
        .collect();
    bars(
        &right,
        "Connect + subscribe rate",
        "connections/s",
        &labels,
        &rate,
        None,
    )?;
    root.present().map_err(err)?;
    Ok(())
}

pub fn handshakes(path: &Path, runs: &[HandshakeRun]) -> Result<()> {
    let root = canvas(path, (1000, 420))?;
    let (left, right) = root.split_horizontally(500);
    let labels = vec!["open + authenticate + close".to_string()];
    let rate: Vec<_> = runs
        .iter()
        .map(|r| (r.broker, color_of(r.broker), vec![r.handshakes_per_sec]))
        .collect();
    bars(&left, "Handshakes/s", "handshakes/s", &labels, &rate, None)?;
    let p99: Vec<_> = runs
        .iter()
        .map(|r| {
            (
                r.broker,
                color_of(r.broker),
                vec![r.latency.p99_us as f64 / 1000.0],
            )
        })
        .collect();
    bars(
        &right,
        "Handshake p99 (open → authenticated)",
        "ms",
        &labels,
        &p99,
        None,
    )?;
    root.present().map_err(err)?;
    Ok(())
}

pub fn behaviours(path: &Path, clients: &[(&str, &Outcome)]) -> Result<()> {
    let root = canvas(path, (900, 440))?;
    let labels: Vec<String> = clients.iter().map(|(n, _)| n.to_string()).collect();
    let pick = |f: &dyn Fn(&Outcome) -> f64| clients.iter().map(|(_, o)| f(o)).collect::<Vec<_>>();
    let series = vec![
        ("sent", TIDEGATE, pick(&|o| o.sent as f64)),
        ("acked", THIRD, pick(&|o| o.acked as f64)),
        ("dropped (rate_limited)", NATS, pick(&|o| o.dropped as f64)),
        ("sockets closed", FOURTH, pick(&|o| o.closes.total() as f64)),
    ];
    bars(
        &root,
        "Seed 000 behaviours against Tidegate defaults",
        "frames",
        &labels,
        &series,
        None,
    )?;
    root.present().map_err(err)?;
    Ok(())
}

pub fn storm(path: &Path, runs: &[StormRun]) -> Result<()> {
    let root = canvas(path, (1000, 460))?;
    let per_sec = (1000 / BIN_MS) as f64;
    let t_max = runs
        .iter()
        .map(|r| r.accepts_per_bin.len() as f64 * BIN_MS as f64 / 1000.0)
        .fold(1.0f64, f64::max);
    let y_max = runs
        .iter()
        .flat_map(|r| r.accepts_per_bin.iter())
        .map(|&v| v as f64 * per_sec)
        .fold(2500.0f64, f64::max)
        * 1.1;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "Reconnect storm: {} clients dropped at t=0 (accepts/s per 100 ms bin)",
                runs.first().map_or(0, |r| r.clients)
            ),
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..t_max, 0f64..y_max)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("seconds after the drop")
        .y_desc("accepted handshakes/s")
        .draw()
        .map_err(err)?;
    for (r, color) in runs.iter().zip([TIDEGATE, NATS, THIRD, FOURTH]) {
        let points: Vec<(f64, f64)> = r
            .accepts_per_bin
            .iter()
            .enumerate()
            .map(|(i, &v)| (i as f64 * BIN_MS as f64 / 1000.0, v as f64 * per_sec))
            .collect();
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(err)?
            .label(match r.all_back_secs {
                Some(s) => format!("{:?}: all back in {s} s", r.mode).to_lowercase(),
                None => format!("{:?}: not all back", r.mode).to_lowercase(),
            })
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 14, y)], color.stroke_width(2)));
        // The broker's own count, per sampling interval.
        let b = &r.broker_accepts;
        let scale = 1000.0 / b.sample_ms.max(1) as f64;
        let broker: Vec<(f64, f64)> = b
            .series
            .iter()
            .filter(|&&(t, _)| (0.0..=t_max).contains(&t))
            .map(|&(t, n)| (t, n * scale))
            .collect();
        chart
            .draw_series(LineSeries::new(broker, color.mix(0.5).stroke_width(1)))
            .map_err(err)?
            .label(format!("{:?}: as the broker counted (/metrics)", r.mode).to_lowercase())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 14, y)], color.mix(0.5)));
    }
    chart
        .draw_series(LineSeries::new(
            [(0.0, 2000.0), (t_max, 2000.0)],
            BLACK.stroke_width(1),
        ))
        .map_err(err)?
        .label("default node accept budget (2,000/s)")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 14, y)], BLACK));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}
