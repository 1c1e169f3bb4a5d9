//! The pictures a full run draws beside BENCHMARKS.md (`charts/*.svg`), which its results
//! show above their tables: the waits of (c)'s contenders, as cumulative distributions.

use std::path::Path;
use std::time::Duration;

use plotters::prelude::*;

use crate::workloads::{Contended, Contender};
use crate::{BenchError, Results};

/// The folder beside BENCHMARKS.md that holds the charts, as the markdown names it.
pub const FOLDER: &str = "charts";
/// The chart of (c)'s waits.
const WAITS: &str = "waits-contended.svg";

/// Draws every chart into `dir` and returns the markdown that shows them (nothing when the
/// run had no contended workload).
pub fn draw(results: &Results, dir: &Path) -> Result<String, BenchError> {
    let Some(Shown {
        hold,
        clients,
        runs,
    }) = contended_runs(results)
    else {
        return Ok(String::new());
    };
    std::fs::create_dir_all(dir)?;
    let caption = format!(
        "(c) one key, {} tasks over {clients} clients, {} ms hold: wait before each grant",
        runs.first().map_or(0, |(_, c)| c.tasks),
        hold.as_millis()
    );
    waits_chart(&dir.join(WAITS), &caption, &runs)?;
    Ok(format!(
        "![{caption}]({FOLDER}/{WAITS})\n\nThe share of waits (y) at or below each wait (x, \
         log scale), for each contender of (c) at its longest hold, where the peers run. A \
         curve that rises at once and then flattens is a key taken straight back by the task \
         that released it while the others sleep until their next retry, whose waits make \
         the long tail (the p99 of the tables); a curve that rises steeply in one place is \
         every waiter served in its turn.\n\n"
    ))
}

/// The runs of (c) one chart shows: the hold and clients they share, each with its label.
struct Shown<'a> {
    hold: Duration,
    clients: usize,
    runs: Vec<(String, &'a Contended)>,
}

/// The runs of (c) at the longest hold with as many clients as the peers use (where every
/// contender ran), each with its label.
fn contended_runs(results: &Results) -> Option<Shown<'_>> {
    let hold = results.contended.iter().map(|(_, h, _)| *h).max()?;
    let clients = results
        .contended
        .iter()
        .filter(|(who, h, _)| *h == hold && !matches!(who, Contender::Rlock { .. }))
        .map(|(_, _, c)| c.clients)
        .next()
        .unwrap_or(4);
    let runs: Vec<(String, &Contended)> = results
        .contended
        .iter()
        .filter(|(_, h, c)| *h == hold && c.clients == clients && !c.waits.is_empty())
        .map(|(who, _, c)| (who.label(), c))
        .collect();
    (!runs.is_empty()).then_some(Shown {
        hold,
        clients,
        runs,
    })
}

/// Each run's sorted waits as a cumulative distribution, on a log scale of milliseconds.
fn waits_chart(
    path: &Path,
    caption: &str,
    runs: &[(String, &Contended)],
) -> Result<(), BenchError> {
    let ms = |d: &Duration| d.as_secs_f64() * 1e3;
    let longest = runs
        .iter()
        .filter_map(|(_, c)| c.waits.last().map(ms))
        .fold(1.0_f64, f64::max);
    let shortest = runs
        .iter()
        .filter_map(|(_, c)| c.waits.first().map(ms))
        .fold(longest, f64::min)
        .max(0.01);
    let root = SVGBackend::new(path, (900, 520)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d((shortest..longest * 1.2).log_scale(), 0.0..100.0)?;
    chart
        .configure_mesh()
        .x_desc("wait (ms, log scale)")
        .y_desc("waits at or below (%)")
        .draw()?;
    for (i, (label, run)) in runs.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let n = run.waits.len() as f64;
        // At most a few hundred points per curve: every quantile step, not every wait.
        let step = (run.waits.len() / 400).max(1);
        let points = run
            .waits
            .iter()
            .enumerate()
            .filter(|(k, _)| k % step == 0 || *k + 1 == run.waits.len())
            .map(|(k, wait)| (ms(wait).max(shortest), (k + 1) as f64 * 100.0 / n));
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))?
            .label(label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::MiddleRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(clients: usize, waits_ms: &[u64]) -> Contended {
        Contended {
            tasks: 16,
            clients,
            waits: waits_ms
                .iter()
                .map(|&ms| Duration::from_millis(ms))
                .collect(),
            ..Contended::default()
        }
    }

    /// The chart draws every contender that ran at the longest hold with the peers' clients,
    /// each named in its legend, and the markdown shows it.
    #[test]
    fn the_waits_chart_names_each_contender_at_the_longest_hold() {
        let hold = Duration::from_millis(5);
        let results = Results {
            contended: vec![
                (
                    Contender::Rlock {
                        fair: false,
                        clients: 4,
                    },
                    hold,
                    run(4, &[1, 2, 3, 40]),
                ),
                (
                    Contender::Rlock {
                        fair: false,
                        clients: 16,
                    },
                    hold,
                    run(16, &[1, 2]),
                ),
                (
                    Contender::Rslock {
                        delay: Duration::from_millis(200),
                    },
                    hold,
                    run(4, &[5, 90, 700]),
                ),
                (
                    Contender::Rlock {
                        fair: false,
                        clients: 4,
                    },
                    Duration::from_millis(1),
                    run(4, &[1]),
                ),
            ],
            ..Results::default()
        };
        let dir = std::env::temp_dir().join(format!("rlock-charts-{}", std::process::id()));
        let shown = draw(&results, &dir).unwrap_or_else(|e| panic!("{e}"));
        assert!(shown.contains("charts/waits-contended.svg"), "{shown}");
        let svg = std::fs::read_to_string(dir.join(WAITS)).unwrap_or_default();
        assert!(svg.contains("rlock, wait 30s"), "rlock's curve is named");
        assert!(svg.contains("rslock"), "rslock's curve is named");
        // One color per curve, drawn twice (the curve, its legend mark); the rest is black.
        let mut colors: Vec<&str> = svg
            .split("stroke=\"#")
            .skip(1)
            .filter_map(|rest| rest.get(..6))
            .filter(|color| *color != "000000")
            .collect();
        colors.sort_unstable();
        colors.dedup();
        assert_eq!(
            colors.len(),
            2,
            "rlock's and rslock's curves only: {colors:?}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
