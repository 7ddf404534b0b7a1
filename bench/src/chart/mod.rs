//! SVG charts (plotters, SVG backend only): a small plotting interface
//! that knows no scenario. A scenario describes its figure as panels side
//! by side, each a [`Bars`] chart (one group per category, one bar per
//! series) or a [`Lines`] chart (series over time), and hands it to
//! [`draw`]; what to plot from its results is the scenario's business.

use std::path::Path;

use anyhow::{Result, anyhow};
use plotters::coord::Shift;
use plotters::prelude::*;

pub use plotters::style::RGBColor;

pub const TIDEGATE: RGBColor = RGBColor(0, 114, 178);
pub const NATS: RGBColor = RGBColor(230, 159, 0);
pub const THIRD: RGBColor = RGBColor(0, 158, 115);
pub const FOURTH: RGBColor = RGBColor(204, 121, 167);

fn err(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("chart: {e}")
}

/// The colour a broker has in every chart.
pub fn color_of(broker: &str) -> RGBColor {
    match broker {
        "nats" => NATS,
        "relay" | "sockudo" => THIRD,
        "graphql" | "sse" | "pusher" => FOURTH,
        _ => TIDEGATE,
    }
}

/// One series of bars: a value per category.
pub struct Series {
    pub name: String,
    pub color: RGBColor,
    pub values: Vec<f64>,
}

impl Series {
    pub fn new(name: impl Into<String>, color: RGBColor, values: Vec<f64>) -> Series {
        Series {
            name: name.into(),
            color,
            values,
        }
    }
}

/// A grouped bar chart, with an optional reference line (a target).
pub struct Bars {
    pub title: String,
    pub y_desc: String,
    pub categories: Vec<String>,
    pub series: Vec<Series>,
    pub hline: Option<(f64, String)>,
}

impl Bars {
    /// One category, one bar per broker's run, each in its broker's colour.
    pub fn per_broker<'r, R>(
        title: &str,
        y_desc: &str,
        category: &str,
        runs: impl IntoIterator<Item = (&'r str, &'r R)>,
        value: impl Fn(&R) -> f64,
    ) -> Bars
    where
        R: 'r,
    {
        let series = runs
            .into_iter()
            .map(|(broker, r)| Series::new(broker, color_of(broker), vec![value(r)]))
            .collect();
        Bars {
            title: title.into(),
            y_desc: y_desc.into(),
            categories: vec![category.into()],
            series,
            hline: None,
        }
    }
}

/// One line of a [`Lines`] chart.
pub struct Line {
    pub label: String,
    pub color: RGBColor,
    /// Stroke width in pixels.
    pub width: u32,
    pub points: Vec<(f64, f64)>,
}

impl Line {
    pub fn new(label: impl Into<String>, color: RGBColor, points: Vec<(f64, f64)>) -> Line {
        Line {
            label: label.into(),
            color,
            width: 2,
            points,
        }
    }
}

/// Where a chart's legend sits.
#[derive(Clone, Copy)]
pub enum Legend {
    UpperRight,
    LowerRight,
}

/// Lines over `0..x_max` × `0..y_max`, with optional horizontal reference
/// lines (a budget, a target).
pub struct Lines {
    pub title: String,
    pub x_desc: String,
    pub y_desc: String,
    pub x_max: f64,
    pub y_max: f64,
    pub lines: Vec<Line>,
    pub hlines: Vec<(f64, String)>,
    pub legend: Legend,
}

impl Lines {
    /// Lines over the time of a run: the axes fit the data (30 % of
    /// headroom above), the legend lower right.
    pub fn over_time(title: &str, y_desc: &str, lines: Vec<Line>) -> Lines {
        let x_max = lines
            .iter()
            .flat_map(|l| l.points.last().map(|p| p.0))
            .fold(1.0f64, f64::max);
        let y_max = lines
            .iter()
            .flat_map(|l| l.points.iter().map(|p| p.1))
            .fold(1.0f64, f64::max)
            * 1.3;
        Lines {
            title: title.into(),
            x_desc: "seconds".into(),
            y_desc: y_desc.into(),
            x_max,
            y_max,
            lines,
            hlines: Vec::new(),
            legend: Legend::LowerRight,
        }
    }
}

/// One panel of a figure.
pub enum Panel {
    Bars(Bars),
    Lines(Lines),
}

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// Draws `panels` side by side on a white SVG of `size` pixels at `path`,
/// each panel `width` pixels wide (the last one takes what is left).
pub fn draw(path: &Path, size: (u32, u32), panels: &[(u32, Panel)]) -> Result<()> {
    let root = SVGBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut rest = root.clone();
    for (i, (width, panel)) in panels.iter().enumerate() {
        let area = if i + 1 == panels.len() {
            rest.clone()
        } else {
            let (here, after) = rest.split_horizontally(*width);
            rest = after;
            here
        };
        match panel {
            Panel::Bars(b) => bars(&area, b)?,
            Panel::Lines(l) => lines(&area, l)?,
        }
    }
    root.present().map_err(err)?;
    Ok(())
}

fn legend_position(l: Legend) -> SeriesLabelPosition {
    match l {
        Legend::UpperRight => SeriesLabelPosition::UpperRight,
        Legend::LowerRight => SeriesLabelPosition::LowerRight,
    }
}

fn bars(area: &Area<'_>, b: &Bars) -> Result<()> {
    let n = b.categories.len().max(1);
    let top = b
        .series
        .iter()
        .flat_map(|s| s.values.iter().copied())
        .chain(b.hline.as_ref().map(|h| h.0))
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.15;
    let mut chart = ChartBuilder::on(area)
        .caption(&b.title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), 0f64..top)
        .map_err(err)?;
    let cats = b.categories.clone();
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
        .y_desc(&b.y_desc)
        .draw()
        .map_err(err)?;
    let width = 0.8 / b.series.len().max(1) as f64;
    for (k, s) in b.series.iter().enumerate() {
        let color = s.color;
        chart
            .draw_series(s.values.iter().enumerate().map(|(i, &v)| {
                let x0 = i as f64 - 0.4 + k as f64 * width;
                Rectangle::new([(x0, 0.0), (x0 + width * 0.92, v)], color.filled())
            }))
            .map_err(err)?
            .label(&s.name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    if let Some((y, label)) = &b.hline {
        chart
            .draw_series(LineSeries::new(
                [(-0.5, *y), (n as f64 - 0.5, *y)],
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

fn lines(area: &Area<'_>, l: &Lines) -> Result<()> {
    let mut chart = ChartBuilder::on(area)
        .caption(&l.title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..l.x_max, 0f64..l.y_max)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(&l.x_desc)
        .y_desc(&l.y_desc)
        .draw()
        .map_err(err)?;
    for line in &l.lines {
        let style = line.color.stroke_width(line.width);
        chart
            .draw_series(LineSeries::new(line.points.iter().copied(), style))
            .map_err(err)?
            .label(&line.label)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 14, y)], style));
    }
    for (y, label) in &l.hlines {
        chart
            .draw_series(LineSeries::new(
                [(0.0, *y), (l.x_max, *y)],
                BLACK.stroke_width(1),
            ))
            .map_err(err)?
            .label(label)
            .legend(|(x, y)| PathElement::new([(x, y), (x + 14, y)], BLACK));
    }
    chart
        .configure_series_labels()
        .position(legend_position(l.legend))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    Ok(())
}

/// `c` at half strength on the white canvas (a secondary line).
pub fn faded(c: RGBColor) -> RGBColor {
    let half = |v: u8| ((u16::from(v) + 255) / 2) as u8;
    RGBColor(half(c.0), half(c.1), half(c.2))
}
