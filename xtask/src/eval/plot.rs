//! SVG figures of the evaluation, drawn with `plotters` (SVG backend only:
//! no fonts or system libraries needed), and `cargo xtask eval plot`, which
//! draws a replay's figure again from its CSV files.

use super::replay_rows::{self, Row};
use anyhow::{Result, anyhow};
use plotters::prelude::*;
use std::path::{Path, PathBuf};

/// Per commit of a replay: the share of tests selected (top) and the
/// end-to-end time of `cargo test` and of `cargo ekstazi test` (bottom), one
/// line per granularity.
pub fn replay_svg(path: &Path, project: &str, series: &[(String, Vec<Row>)]) -> Result<()> {
    draw(path, project, series).map_err(|e| anyhow!("cannot draw {}: {e}", path.display()))
}

fn draw(
    path: &Path,
    project: &str,
    series: &[(String, Vec<Row>)],
) -> Result<(), Box<dyn std::error::Error>> {
    // The commits, in order, from the longest series.
    let commits: Vec<String> = series
        .iter()
        .map(|(_, rows)| rows)
        .max_by_key(|rows| rows.len())
        .map(|rows| rows.iter().map(|r| r.commit.clone()).collect())
        .unwrap_or_default();
    let n = commits.len().max(1);
    let index = |commit: &str| commits.iter().position(|c| c == commit).map(|i| i as f64);
    let label = |x: &f64| {
        let i = x.round();
        if (x - i).abs() < 1e-6 && i >= 0.0 {
            commits.get(i as usize).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    let colors = [
        RGBColor(0, 114, 178),
        RGBColor(213, 94, 0),
        RGBColor(0, 158, 115),
    ];
    let grey = RGBColor(90, 90, 90);

    let root = SVGBackend::new(path, (1000, 760)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, bottom) = root.split_vertically(370);
    let x_range = -0.5f64..(n as f64 - 0.5);
    let label_font = ("sans-serif", 11)
        .into_font()
        .transform(FontTransform::Rotate90);

    let mut share = ChartBuilder::on(&top)
        .caption(
            format!("{project}: share of tests selected, per commit"),
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(70)
        .y_label_area_size(55)
        .build_cartesian_2d(x_range.clone(), 0f64..100f64)?;
    share
        .configure_mesh()
        .x_labels(n)
        .x_label_formatter(&label)
        .x_label_style(label_font.clone())
        .y_desc("% of tests selected")
        .draw()?;
    for (k, (granularity, rows)) in series.iter().enumerate() {
        let color = colors[k % colors.len()];
        let points: Vec<(f64, f64)> = rows
            .iter()
            .filter_map(|r| Some((index(&r.commit)?, r.share())))
            .collect();
        share
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
            .label(granularity.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
        share.draw_series(points.iter().map(|p| Circle::new(*p, 3, color.filled())))?;
    }
    share
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.85))
        .draw()?;

    let retest: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|(_, rows)| rows.iter())
        .filter_map(|r| Some((index(&r.commit)?, r.retest_total())))
        .collect();
    let highest = series
        .iter()
        .flat_map(|(_, rows)| rows.iter())
        .map(|r| r.ekstazi_total.max(r.retest_total()))
        .fold(1.0f64, f64::max);
    let mut time = ChartBuilder::on(&bottom)
        .caption(
            "end-to-end time per commit (build included; doctests left out)",
            ("sans-serif", 16),
        )
        .margin(12)
        .x_label_area_size(70)
        .y_label_area_size(55)
        .build_cartesian_2d(x_range, 0f64..highest * 1.1)?;
    time.configure_mesh()
        .x_labels(n)
        .x_label_formatter(&label)
        .x_label_style(label_font)
        .y_desc("seconds")
        .draw()?;
    let mut seen = std::collections::BTreeSet::new();
    let retest: Vec<(f64, f64)> = retest
        .into_iter()
        .filter(|(x, _)| seen.insert(*x as i64))
        .collect();
    time.draw_series(LineSeries::new(retest.clone(), grey.stroke_width(2)))?
        .label("cargo test")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], grey.stroke_width(2)));
    time.draw_series(retest.iter().map(|p| Circle::new(*p, 3, grey.filled())))?;
    for (k, (granularity, rows)) in series.iter().enumerate() {
        let color = colors[k % colors.len()];
        let points: Vec<(f64, f64)> = rows
            .iter()
            .filter_map(|r| Some((index(&r.commit)?, r.ekstazi_total)))
            .collect();
        time.draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
            .label(format!("cargo ekstazi test ({granularity})"))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
        time.draw_series(points.iter().map(|p| Circle::new(*p, 3, color.filled())))?;
    }
    time.configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.85))
        .draw()?;
    root.present()?;
    Ok(())
}

/// `cargo xtask eval plot`: a replay's figure drawn again from its CSV
/// files in `out` (to `svg`, by default `<out>/replay.svg`), and its
/// summary and time tables printed again.
pub fn redraw(out: &Path, name: &str, svg: Option<PathBuf>) -> Result<()> {
    let mut series = Vec::new();
    for granularity in ["function", "binary"] {
        let csv = out.join(format!("replay-{granularity}.csv"));
        if csv.exists() {
            series.push((granularity.to_owned(), replay_rows::read_csv(&csv)?));
        }
    }
    // The replay's figures again, from its CSV files.
    let granularities: Vec<String> = series.iter().map(|(g, _)| g.clone()).collect();
    let rows = series.iter().cloned().collect();
    print!("{}", replay_rows::summary_table(&granularities, &rows));
    println!();
    print!("{}", replay_rows::time_table(&granularities, &rows));
    replay_svg(
        &svg.unwrap_or_else(|| out.join("replay.svg")),
        name,
        &series,
    )
}
