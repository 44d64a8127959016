//! `--plot FILE.svg`: one panel per metric, each mode's counted runs as points beside its
//! median (a bar) and its spread (a line from min to max), so the difference is seen at a
//! glance.
//!
//! Owns: drawing with plotters' SVG backend. Must not: compute statistics.

use crate::analysis::MetricResult;
use crate::stats::Better;
use plotters::prelude::*;

/// The colour of each mode, in table order.
const COLOURS: [RGBColor; 5] = [
    RGBColor(110, 110, 110),
    RGBColor(214, 96, 33),
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
];

/// The plot of `results`, as SVG text (the caller writes it where `--plot` says).
pub fn render(results: &[MetricResult]) -> Result<String, String> {
    let panel_height = 300u32;
    let height = panel_height * results.len().max(1) as u32;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, height)).into_drawing_area();
        let failed = |e: &dyn std::fmt::Display| format!("--plot: {e}");
        root.fill(&WHITE).map_err(|e| failed(&e))?;
        let panels = root.split_evenly((results.len().max(1), 1));
        for (panel, m) in panels.iter().zip(results) {
            draw(panel, m).map_err(|e| failed(&e))?;
        }
        root.present().map_err(|e| failed(&e))?;
    }
    Ok(svg)
}

fn draw(
    panel: &DrawingArea<SVGBackend, plotters::coord::Shift>,
    m: &MetricResult,
) -> Result<(), Box<dyn std::error::Error>> {
    let all = m.modes.iter().flat_map(|r| r.values.iter().copied());
    let (lo, hi) = all.fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| {
        (l.min(v), h.max(v))
    });
    let pad = ((hi - lo) * 0.15).max(hi.abs() * 0.01).max(1e-9);
    let unit = m.unit.clone().unwrap_or_default();
    let better = match m.better {
        Better::Lower => ", lower is better",
        Better::Higher => ", higher is better",
        Better::Unknown => "",
    };
    let names: Vec<&str> = m.modes.iter().map(|r| r.mode.name()).collect();
    let count = names.len();
    let mut chart = ChartBuilder::on(panel)
        .caption(format!("{} ({unit}{better})", m.key), ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(28)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.5f64..(count as f64 - 0.5), (lo - pad)..(hi + pad))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(count + 1)
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 {
                names
                    .get(i as usize)
                    .map_or(String::new(), |n| n.to_string())
            } else {
                String::new()
            }
        })
        .y_desc(unit)
        .draw()?;
    for (i, r) in m.modes.iter().enumerate() {
        let colour = COLOURS[(r.mode as usize).min(COLOURS.len() - 1)];
        let x = i as f64;
        // Points spread sideways (in run order, never at random) so that equal values show.
        chart.draw_series(r.values.iter().enumerate().map(|(j, &v)| {
            let dx = ((j % 9) as f64 - 4.0) * 0.03;
            Circle::new((x + dx, v), 4, colour.mix(0.75).filled())
        }))?;
        let s = &r.summary;
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(x - 0.25, s.median), (x + 0.25, s.median)],
            BLACK.stroke_width(3),
        )))?;
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(x + 0.32, s.min), (x + 0.32, s.max)],
            colour.stroke_width(2),
        )))?;
        chart.draw_series(std::iter::once(Text::new(
            format!("spread {:.1}%", s.spread * 100.0),
            (x + 0.05, hi + pad * 0.5),
            ("sans-serif", 13).into_font().color(&colour),
        )))?;
    }
    Ok(())
}
