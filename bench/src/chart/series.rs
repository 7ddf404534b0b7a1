//! Charts over the time of one run: the slow reader and the soak.

use super::*;
use crate::scenario::slow::SlowRun;
use crate::scenario::soak::Sample;

pub fn slow(path: &Path, runs: &[SlowRun]) -> Result<()> {
    let root = canvas(path, (1200, 460))?;
    let (left, right) = root.split_horizontally(700);
    let t_max = runs
        .iter()
        .flat_map(|r| r.rss_timeline.last().map(|p| p.0))
        .fold(1.0f64, f64::max);
    let y_max = runs
        .iter()
        .flat_map(|r| r.rss_timeline.iter().map(|p| p.1))
        .fold(1.0f64, f64::max)
        * 1.3;
    let mut chart = ChartBuilder::on(&left)
        .caption("Broker RSS under a flood", ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..t_max, 0f64..y_max)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("MiB")
        .draw()
        .map_err(err)?;
    for (r, color) in runs.iter().zip([THIRD, TIDEGATE]) {
        let label = if r.with_slow_subscriber {
            "with one non-reading subscriber"
        } else {
            "readers only"
        };
        chart
            .draw_series(LineSeries::new(
                r.rss_timeline.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(err)?
            .label(label)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 14, y)], color.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    let labels = vec!["p50".to_string(), "p99".to_string(), "p99.9".to_string()];
    let series: Vec<_> = runs
        .iter()
        .zip([THIRD, TIDEGATE])
        .map(|(r, color)| {
            let l = &r.readers_latency;
            (
                if r.with_slow_subscriber {
                    "with non-reader"
                } else {
                    "readers only"
                },
                color,
                vec![
                    l.p50_us as f64 / 1000.0,
                    l.p99_us as f64 / 1000.0,
                    l.p999_us as f64 / 1000.0,
                ],
            )
        })
        .collect();
    bars(
        &right,
        "Readers' publish→receive latency",
        "ms",
        &labels,
        &series,
        None,
    )?;
    root.present().map_err(err)?;
    Ok(())
}

/// A chart line: its label, colour and points.
type Line<'a> = (&'a str, RGBColor, Vec<(f64, f64)>);

/// One line chart of `series` on `area`.
fn lines(area: &Area<'_>, title: &str, y_desc: &str, series: &[Line<'_>]) -> Result<()> {
    let t_max = series
        .iter()
        .flat_map(|s| s.2.last().map(|p| p.0))
        .fold(1.0f64, f64::max);
    let y_max = series
        .iter()
        .flat_map(|s| s.2.iter().map(|p| p.1))
        .fold(1.0f64, f64::max)
        * 1.3;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..t_max, 0f64..y_max)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc(y_desc)
        .draw()
        .map_err(err)?;
    for (label, color, points) in series {
        let color = *color;
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(err)?
            .label(*label)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 14, y)], color.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)
}

/// The soak: memory on the left; descriptors, sockets and channels on the
/// right, over the run.
pub fn soak(path: &Path, samples: &[Sample]) -> Result<()> {
    let root = canvas(path, (1800, 420))?;
    let (left, rest) = root.split_horizontally(600);
    let (middle, right) = rest.split_horizontally(600);
    let pts = |f: fn(&Sample) -> f64| samples.iter().map(|s| (s.t_secs, f(s))).collect();
    lines(
        &left,
        "Broker RSS under churn",
        "MiB",
        &[("RSS", TIDEGATE, pts(|s| s.rss_bytes as f64 / 1048576.0))],
    )?;
    lines(
        &middle,
        "Descriptors, sockets, channels",
        "count",
        &[
            ("open fds", TIDEGATE, pts(|s| s.open_fds as f64)),
            ("sockets", THIRD, pts(|s| s.connections)),
            ("channels", FOURTH, pts(|s| s.channels)),
        ],
    )?;
    lines(
        &right,
        "Tasks and actors alive",
        "count",
        &[
            ("tokio tasks", TIDEGATE, pts(|s| s.tasks)),
            ("socket actors", THIRD, pts(|s| s.socket_actors)),
            ("account supervisors", FOURTH, pts(|s| s.supervisors)),
        ],
    )?;
    root.present().map_err(err)?;
    Ok(())
}
