//! The pictures a full run draws beside BENCHMARKS.md (`charts/*.svg`), which its results
//! show above their tables: the waits of (c)'s contenders, as cumulative distributions; the
//! throughput of (b) against tasks; and what the watchdog costs Redis against the holds one
//! client keeps ((d) at scale).

use std::path::Path;
use std::time::Duration;

use plotters::prelude::*;

use crate::lockers::Kind;
use crate::scale::Scale;
use crate::workloads::{Contended, Contender};
use crate::{BenchError, Results};

/// The folder beside BENCHMARKS.md that holds the charts, as the markdown names it.
pub const FOLDER: &str = "charts";
/// The chart of (c)'s waits.
const WAITS: &str = "waits-contended.svg";
/// The chart of the watchdog's cost against holds.
const WATCHDOG: &str = "watchdog-cost.svg";
/// The chart of throughput against tasks.
const TASKS: &str = "throughput-tasks.svg";

/// Draws every chart into `dir` and returns the markdown that shows them (nothing for a
/// workload the run left out).
pub fn draw(results: &Results, dir: &Path) -> Result<String, BenchError> {
    let mut shown = String::new();
    if let Some(runs) = contended_runs(results) {
        std::fs::create_dir_all(dir)?;
        shown.push_str(&draw_waits(runs, dir)?);
    }
    if !results.sweep.is_empty() {
        std::fs::create_dir_all(dir)?;
        shown.push_str(&draw_tasks(&results.sweep, dir)?);
    }
    if results.scale.len() > 1 {
        std::fs::create_dir_all(dir)?;
        shown.push_str(&draw_watchdog(&results.scale, dir)?);
    }
    Ok(shown)
}

/// The chart of (c)'s waits, and its markdown.
fn draw_waits(shown: Shown<'_>, dir: &Path) -> Result<String, BenchError> {
    let Shown {
        hold,
        clients,
        runs,
    } = shown;
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

/// The chart of (b) against tasks, and its markdown.
fn draw_tasks(sweep: &[(Kind, usize, f64)], dir: &Path) -> Result<String, BenchError> {
    let caption = "(b) lock + unlock of fresh keys, one client: throughput against tasks";
    let most_tasks = sweep.iter().map(|(_, t, _)| *t).max().unwrap_or(1) as f64;
    let highest = sweep.iter().map(|(_, _, r)| *r).fold(1.0_f64, f64::max);
    let path = dir.join(TASKS);
    let root = SVGBackend::new(&path, (900, 520)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d((0.8..most_tasks * 1.25).log_scale(), 0.0..highest * 1.15)?;
    chart
        .configure_mesh()
        .x_desc("concurrent tasks (log scale)")
        .y_desc("lock + unlock per second")
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()?;
    let mut kinds: Vec<Kind> = Vec::new();
    for (kind, _, _) in sweep {
        if !kinds.contains(kind) {
            kinds.push(*kind);
        }
    }
    for (i, kind) in kinds.iter().enumerate() {
        let points: Vec<(f64, f64)> = sweep
            .iter()
            .filter(|(k, _, _)| k == kind)
            .map(|(_, tasks, rate)| (*tasks as f64, *rate))
            .collect();
        named_line(&mut chart, i, kind.label(), points, true)?;
    }
    finish(chart, SeriesLabelPosition::LowerRight)?;
    Ok(format!(
        "![{caption}]({FOLDER}/{TASKS})\n\nLocks taken and given back per second (y) by one \
         client as its tasks grow (x, log scale), on fresh keys so that nothing waits: where a \
         curve flattens, the client or Redis is saturated (2 cores share the client and the \
         server here); the floor is the same commands sent by hand.\n\n"
    ))
}

/// One of (d)'s costs per second, read from a run.
type PerSecond = fn(&Scale) -> f64;

/// The chart of (d) at scale, and its markdown.
fn draw_watchdog(runs: &[Scale], dir: &Path) -> Result<String, BenchError> {
    let ttl = runs.first().map_or(0.0, |run| run.ttl.as_secs_f64());
    let caption = format!("(d) one client's holds under renewal, lease {ttl} s: what Redis runs");
    let most = runs.iter().map(|run| run.holds).max().unwrap_or(1) as f64;
    let fewest = runs.iter().map(|run| run.holds).min().unwrap_or(1).max(1) as f64;
    let highest = runs
        .iter()
        .map(Scale::commands_per_second)
        .fold(1.0_f64, f64::max);
    let lowest = runs
        .iter()
        .map(Scale::round_trips_per_second)
        .fold(highest, f64::min)
        .max(0.1);
    let path = dir.join(WATCHDOG);
    let root = SVGBackend::new(&path, (900, 520)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(&caption, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(
            (fewest / 1.5..most * 1.5).log_scale(),
            (lowest / 2.0..highest * 2.0).log_scale(),
        )?;
    chart
        .configure_mesh()
        .x_desc("holds in one client (log scale)")
        .y_desc("per second (log scale)")
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()?;
    let lines: [(&str, PerSecond); 2] = [
        ("Redis commands/s", Scale::commands_per_second),
        (
            "renewal calls/s (round trips)",
            Scale::round_trips_per_second,
        ),
    ];
    for (i, (label, per_second)) in lines.into_iter().enumerate() {
        let points: Vec<(f64, f64)> = runs
            .iter()
            .map(|run| (run.holds as f64, per_second(run).max(lowest)))
            .collect();
        named_line(&mut chart, i, label, points, true)?;
    }
    finish(chart, SeriesLabelPosition::UpperLeft)?;
    Ok(format!(
        "![{caption}]({FOLDER}/{WATCHDOG})\n\nWhat the watchdog costs Redis (y, log scale) \
         against the holds one client keeps (x, log scale), from (d) at scale: commands and \
         script calls grow in step with the holds (two commands per key per renewal, one \
         call per 256 keys), so a straight line of slope one is the whole cost; the table \
         under (d) has the client's memory per hold and what else it could do meanwhile.\n\n"
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
        let n = run.waits.len() as f64;
        // At most a few hundred points per curve: every quantile step, not every wait.
        let step = (run.waits.len() / 400).max(1);
        let points = run
            .waits
            .iter()
            .enumerate()
            .filter(|(k, _)| k % step == 0 || *k + 1 == run.waits.len())
            .map(|(k, wait)| (ms(wait).max(shortest), (k + 1) as f64 * 100.0 / n))
            .collect();
        named_line(&mut chart, i, label, points, false)?;
    }
    finish(chart, SeriesLabelPosition::MiddleRight)?;
    Ok(())
}

/// One chart's drawing: a line per series.
type Chart<'a, X, Y> = ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, Y>>;

/// Draws series `i` as a line through `points` (with a dot at each when `dots`), named
/// `label` in the legend.
fn named_line<X, Y>(
    chart: &mut Chart<'_, X, Y>,
    i: usize,
    label: &str,
    points: Vec<(f64, f64)>,
    dots: bool,
) -> Result<(), BenchError>
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    let color = Palette99::pick(i).to_rgba();
    if dots {
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
    }
    chart
        .draw_series(LineSeries::new(points, color.stroke_width(2)))?
        .label(label)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
    Ok(())
}

/// Draws the legend at `position` and writes the chart out.
fn finish<X, Y>(mut chart: Chart<'_, X, Y>, position: SeriesLabelPosition) -> Result<(), BenchError>
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    chart.plotting_area().present()?;
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

    /// The tasks chart draws one line per implementation, each named.
    #[test]
    fn the_tasks_chart_draws_each_implementation() {
        let results = Results {
            sweep: vec![
                (Kind::Floor, 1, 4_000.0),
                (Kind::Floor, 16, 30_000.0),
                (Kind::Manual, 1, 3_500.0),
                (Kind::Manual, 16, 28_000.0),
            ],
            ..Results::default()
        };
        let dir = std::env::temp_dir().join(format!("rlock-charts-tasks-{}", std::process::id()));
        let shown = draw(&results, &dir).unwrap_or_else(|e| panic!("{e}"));
        assert!(shown.contains("charts/throughput-tasks.svg"), "{shown}");
        let svg = std::fs::read_to_string(dir.join(TASKS)).unwrap_or_default();
        assert!(svg.contains(Kind::Floor.label()), "the floor is named");
        assert!(svg.contains(Kind::Manual.label()), "rlock is named");
        assert_eq!(svg.matches("<circle").count(), 4, "two points per line");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The watchdog's chart draws both costs at every number of holds, and the markdown
    /// shows it beside nothing else when (c) did not run.
    #[test]
    fn the_watchdog_chart_draws_each_cost_at_each_number_of_holds() {
        let run = |holds: usize| Scale {
            holds,
            ttl: Duration::from_secs(10),
            window: Duration::from_secs(10),
            server: crate::stats::Delta {
                total_commands: 2 * holds as u64,
                calls: [("evalsha".to_owned(), holds as u64 / 256 + 1)].into(),
                ..crate::stats::Delta::default()
            },
            ..Scale::default()
        };
        let results = Results {
            scale: vec![run(1_000), run(10_000), run(100_000)],
            ..Results::default()
        };
        let dir = std::env::temp_dir().join(format!("rlock-charts-wd-{}", std::process::id()));
        let shown = draw(&results, &dir).unwrap_or_else(|e| panic!("{e}"));
        assert!(shown.contains("charts/watchdog-cost.svg"), "{shown}");
        assert!(!shown.contains(WAITS), "{shown}");
        let svg = std::fs::read_to_string(dir.join(WATCHDOG)).unwrap_or_default();
        assert!(svg.contains("Redis commands/s"), "the commands are named");
        assert!(svg.contains("renewal calls/s"), "the calls are named");
        assert_eq!(svg.matches("<circle").count(), 6, "three points per line");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
