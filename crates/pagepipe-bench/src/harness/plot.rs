//! SVG charts (`--plot DIR`), drawn with plotters' SVG backend (text stays `<text>`, so no font
//! files are needed): `NAME.svg` has one panel per case with every arm's median and interval
//! and the ratio printed above it; `NAME-latency.svg` has one panel per case that recorded
//! latencies, their distributions as CDFs on a log axis.

use super::meta::Meta;
use super::report::{ArmStats, CaseResult};
use crate::stats::RatioCi;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::io;
use std::path::{Path, PathBuf};

type Draw<T> = Result<T, Box<dyn std::error::Error>>;
type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// Size of one panel in pixels.
const PANEL: (u32, u32) = (520, 380);
/// Height of the heading above the panels.
const HEADER: u32 = 64;
/// At most this many points per CDF line.
const CDF_POINTS: usize = 400;

/// Writes the charts of `results` into `dir`; returns the files written.
///
/// # Errors
/// A file cannot be written.
pub fn write(
    dir: &Path,
    name: &str,
    heading: &str,
    meta: &Meta,
    results: &[CaseResult],
) -> io::Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    if results.is_empty() {
        return Ok(written);
    }
    let path = dir.join(format!("{name}.svg"));
    grid(&path, heading, meta, results, medians_panel)?;
    written.push(path);
    let with_latency: Vec<&CaseResult> = results
        .iter()
        .filter(|r| r.arms.iter().any(|a| a.latency.is_some()))
        .collect();
    if !with_latency.is_empty() {
        let path = dir.join(format!("{name}-latency.svg"));
        grid(&path, heading, meta, &with_latency, cdf_panel)?;
        written.push(path);
    }
    Ok(written)
}

/// A page of panels, three across, under the heading and the reproduction line.
fn grid<R: std::borrow::Borrow<CaseResult>>(
    path: &Path,
    heading: &str,
    meta: &Meta,
    results: &[R],
    panel: fn(&Area, &CaseResult, &Colours) -> Draw<()>,
) -> io::Result<()> {
    let colours = Colours::of(results.iter().map(|r| r.borrow()));
    let cols = results.len().min(3);
    let rows = results.len().div_ceil(cols);
    let size = (PANEL.0 * cols as u32, HEADER + PANEL.1 * rows as u32);
    let draw = || -> Draw<()> {
        let root = SVGBackend::new(path, size).into_drawing_area();
        root.fill(&WHITE)?;
        let (top, body) = root.split_vertically(HEADER);
        top.draw(&Text::new(heading.to_string(), (10, 6), ("sans-serif", 16)))?;
        let grey = ("sans-serif", 11).into_font().color(&BLACK.mix(0.7));
        let machine = format!(
            "commit {} · Linux {} · {} ({} cores)",
            meta.commit, meta.kernel, meta.cpu, meta.cores
        );
        top.draw(&Text::new(machine, (10, 28), grey.clone()))?;
        top.draw(&Text::new(
            format!("{} · {}", meta.time, meta.cmdline),
            (10, 44),
            grey,
        ))?;
        for (area, r) in body.split_evenly((rows, cols)).iter().zip(results) {
            panel(area, r.borrow(), &colours)?;
        }
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| io::Error::other(format!("chart {}: {e}", path.display())))
}

/// Well-separated hues, grey first (the baseline, usually the kernel).
const COLOURS: [RGBColor; 7] = [
    RGBColor(90, 90, 90),
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(23, 190, 207),
];

/// One colour per transport name across every panel of a chart, in order of first appearance.
struct Colours(Vec<String>);

impl Colours {
    fn of<'a>(results: impl Iterator<Item = &'a CaseResult>) -> Colours {
        let mut names: Vec<String> = Vec::new();
        for arm in results.flat_map(|r| &r.arms) {
            if !names.contains(&arm.name) {
                names.push(arm.name.clone());
            }
        }
        Colours(names)
    }

    fn get(&self, arm: &ArmStats) -> RGBColor {
        let i = self.0.iter().position(|n| *n == arm.name).unwrap_or(0);
        COLOURS[i % COLOURS.len()]
    }
}

/// The primary metric of every arm: a point at the median, a whisker for its interval, and the
/// ratio with its interval above it.
fn medians_panel(area: &Area, r: &CaseResult, colours: &Colours) -> Draw<()> {
    let col = r.case.columns[0];
    let arms: Vec<Whisker> = r
        .arms
        .iter()
        .filter_map(|a| Whisker::of(a, col.metric, col.scale, colours))
        .collect();
    let top = arms.iter().map(|a| a.hi).fold(0.0, f64::max);
    let top = if top > 0.0 { top * 1.3 } else { 1.0 };
    let n = arms.len().max(1);
    let labels: Vec<String> = arms.iter().map(|a| a.label.clone()).collect();
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("{}: {}", r.case.title, col.label),
            ("sans-serif", 16),
        )
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(60)
        .build_cartesian_2d((0..n).into_segmented(), 0.0..top)?;
    let label_of = |v: &SegmentValue<usize>| match v {
        SegmentValue::CenterOf(i) => labels.get(*i).cloned().unwrap_or_default(),
        _ => String::new(),
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n)
        .x_label_formatter(&label_of)
        .y_desc(col.label)
        .draw()?;
    for (i, w) in arms.iter().enumerate() {
        let x = SegmentValue::CenterOf(i);
        let style = w.colour.stroke_width(2);
        chart.draw_series(std::iter::once(ErrorBar::new_vertical(
            x.clone(),
            w.lo,
            w.median,
            w.hi,
            style,
            14,
        )))?;
        let (line1, line2) = ratio_text(i, w.ratio.as_ref());
        let text = TextStyle::from(("sans-serif", 12).into_font())
            .pos(Pos::new(HPos::Center, VPos::Bottom));
        chart.draw_series(std::iter::once(
            EmptyElement::at((x, w.hi))
                + Text::new(line1, (0, -20), text.clone())
                + Text::new(line2, (0, -6), text),
        ))?;
    }
    Ok(())
}

/// One arm's primary metric, scaled to the column's unit.
struct Whisker {
    label: String,
    colour: RGBColor,
    median: f64,
    lo: f64,
    hi: f64,
    ratio: Option<RatioCi>,
}

impl Whisker {
    fn of(arm: &ArmStats, metric: &str, scale: f64, colours: &Colours) -> Option<Whisker> {
        let m = arm.metric(metric)?;
        Some(Whisker {
            label: arm.label.clone(),
            colour: colours.get(arm),
            median: m.ci.median / scale,
            lo: m.ci.lo / scale,
            hi: m.ci.hi / scale,
            ratio: m.ratio,
        })
    }
}

/// The two lines above a whisker: `2.41x` (with `(noise)`), `[2.20, 2.63]`.
fn ratio_text(i: usize, ratio: Option<&RatioCi>) -> (String, String) {
    match (i, ratio) {
        (0, _) => ("baseline".into(), String::new()),
        (_, None) => ("-".into(), String::new()),
        (_, Some(r)) => {
            let noise = if r.distinct() { "" } else { " (noise)" };
            (
                format!("{:.2}x{noise}", r.ratio),
                format!("[{:.2}, {:.2}]", r.lo, r.hi),
            )
        }
    }
}

/// The latency distribution of every arm (all runs merged) as a CDF, x in µs on a log axis.
fn cdf_panel(area: &Area, r: &CaseResult, colours: &Colours) -> Draw<()> {
    let lines: Vec<(&ArmStats, Vec<(f64, f64)>)> = r
        .arms
        .iter()
        .filter_map(|a| Some((a, a.latency.as_ref()?.cdf_points(CDF_POINTS))))
        .collect();
    let xs = lines.iter().flat_map(|l| l.1.iter().map(|p| p.0));
    let lo = xs.clone().fold(f64::INFINITY, f64::min).max(1.0) / 1e3;
    let hi = xs.fold(0.0, f64::max).max(2.0) / 1e3;
    let mut chart = ChartBuilder::on(area)
        .caption(format!("{}: latency CDF", r.case.title), ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(36)
        .y_label_area_size(50)
        .build_cartesian_2d((lo / 1.2..hi * 1.2).log_scale(), 0.0..1.0)?;
    chart
        .configure_mesh()
        .x_desc("µs (log scale)")
        .y_desc("fraction ≤ x")
        .draw()?;
    for (arm, points) in lines {
        let c = colours.get(arm);
        chart
            .draw_series(LineSeries::new(
                points.into_iter().map(|(ns, q)| (ns / 1e3, q)),
                c.stroke_width(2),
            ))?
            .label(arm.label.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK.mix(0.3))
        .draw()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::{Histogram, Record};
    use crate::harness::case::Run;
    use crate::harness::report::two_arm_fixture;
    use std::time::Duration;

    fn runs(mbps: &[f64], lat_ns: u64) -> Vec<Run> {
        mbps.iter()
            .map(|&v| {
                let mut record = Record::new("t", "x");
                record.metric("mbps", v);
                let mut latency = Histogram::default();
                for k in 1..100 {
                    latency.record(Duration::from_nanos(lat_ns * k));
                }
                Run {
                    record,
                    latency: Some(latency),
                }
            })
            .collect()
    }

    #[test]
    fn charts_show_every_arm_its_ratio_and_the_reproduction_line() {
        let mbps = [100.0, 104.0, 98.0, 101.0, 99.0, 102.0];
        let base = runs(&mbps, 1000);
        let fast = runs(&mbps.map(|x| 3.0 * x), 300);
        let result = two_arm_fixture(&base, &fast);
        let dir = std::env::temp_dir().join(format!("pagepipe-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let meta = Meta::collect();
        let written = write(&dir, "t", "a heading", &meta, &[result]).unwrap();
        assert_eq!(written.len(), 2);
        let svg = std::fs::read_to_string(&written[0]).unwrap();
        for needle in [
            "a heading",
            "kernel",
            "pagepipe",
            "baseline",
            "3.00x",
            &meta.commit,
        ] {
            assert!(svg.contains(needle), "{needle} missing from the chart");
        }
        let cdf = std::fs::read_to_string(&written[1]).unwrap();
        assert!(
            cdf.contains("latency CDF") && cdf.contains("<polyline"),
            "no CDF lines"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
