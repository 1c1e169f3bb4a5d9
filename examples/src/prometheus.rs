//! rlock's metrics (feature `metrics`) scraped by Prometheus: a small recorder for the
//! [`metrics`] facade that keeps counters and histograms and renders them in the Prometheus
//! text format, which the web example serves on `GET /metrics`.
//!
//! A service that already runs an exporter (`metrics-exporter-prometheus`, an OpenTelemetry
//! bridge) needs none of this: rlock records through the facade, so whichever recorder the
//! service installs receives `rlock_acquired_total`, `rlock_busy_total`, `rlock_lost_total`,
//! `rlock_renew_failures_total`, `rlock_wait_seconds` and `rlock_hold_seconds`, labelled
//! `lock` with the key *template*. This one is here so that the example needs no exporter
//! stack of its own.
//!
//! ```
//! let prometheus = rlock_examples::prometheus::install();
//! metrics::counter!("rlock_acquired_total", "lock" => "order:<user_id>").increment(1);
//! assert!(prometheus.render().contains(r#"rlock_acquired_total{lock="order:<user_id>"} 1"#));
//! ```

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use metrics::{
    Counter, CounterFn, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};

/// Upper bounds of the histogram buckets, in seconds (Prometheus' client defaults).
const BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The recorder, installed once for the process; clones share its series.
#[derive(Debug, Clone, Default)]
pub struct Prometheus {
    series: Arc<Mutex<BTreeMap<SeriesKey, Arc<Mutex<Value>>>>>,
}

/// A metric's name and its labels, in the order they were given.
type SeriesKey = (String, Vec<(String, String)>);

#[derive(Debug)]
enum Value {
    Counter(u64),
    Histogram {
        /// Samples at or below each bound of [`BUCKETS`] (not cumulative; rendering sums).
        buckets: [u64; BUCKETS.len()],
        sum: f64,
        count: u64,
    },
}

/// Installs the recorder for the whole process (once; later calls return the same one) and
/// returns a handle that renders what it recorded.
pub fn install() -> Prometheus {
    static INSTALLED: OnceLock<Prometheus> = OnceLock::new();
    INSTALLED
        .get_or_init(|| {
            let prometheus = Prometheus::default();
            // Fails only when another recorder is already installed; then this one stays
            // empty, which `render` shows as no series.
            let _ = metrics::set_global_recorder(prometheus.clone());
            prometheus
        })
        .clone()
}

impl Prometheus {
    /// Everything recorded so far, in the Prometheus text exposition format (version 0.0.4).
    pub fn render(&self) -> String {
        let series = lock(&self.series);
        let mut out = String::new();
        let mut typed = None;
        for ((name, labels), value) in series.iter() {
            let value = lock(value);
            let kind = match *value {
                Value::Counter(_) => "counter",
                Value::Histogram { .. } => "histogram",
            };
            if typed != Some(name) {
                let _ = writeln!(out, "# TYPE {name} {kind}");
                typed = Some(name);
            }
            match &*value {
                Value::Counter(n) => {
                    let _ = writeln!(out, "{name}{} {n}", label_set(labels, None));
                }
                Value::Histogram {
                    buckets,
                    sum,
                    count,
                } => {
                    let mut cumulative = 0;
                    for (bound, n) in BUCKETS.iter().zip(buckets) {
                        cumulative += n;
                        let le = bound.to_string();
                        let labels = label_set(labels, Some(&le));
                        let _ = writeln!(out, "{name}_bucket{labels} {cumulative}");
                    }
                    let inf = label_set(labels, Some("+Inf"));
                    let _ = writeln!(out, "{name}_bucket{inf} {count}");
                    let _ = writeln!(out, "{name}_sum{} {sum}", label_set(labels, None));
                    let _ = writeln!(out, "{name}_count{} {count}", label_set(labels, None));
                }
            }
        }
        out
    }

    fn series(&self, key: &Key, empty: fn() -> Value) -> Arc<Mutex<Value>> {
        let labels = key
            .labels()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect();
        lock(&self.series)
            .entry((key.name().to_owned(), labels))
            .or_insert_with(|| Arc::new(Mutex::new(empty())))
            .clone()
    }
}

/// `{a="1",b="2"}` (with `le` last for a bucket), or nothing without labels.
fn label_set(labels: &[(String, String)], le: Option<&str>) -> String {
    let mut pairs: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
        .collect();
    if let Some(le) = le {
        pairs.push(format!("le=\"{le}\""));
    }
    if pairs.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", pairs.join(","))
    }
}

/// A label value as the text format writes it: `\`, `"` and newlines escaped.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A poisoned lock only means a recording panicked; the numbers are still worth showing.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One series, as the facade's handles see it.
struct Series(Arc<Mutex<Value>>);

impl CounterFn for Series {
    fn increment(&self, value: u64) {
        if let Value::Counter(n) = &mut *lock(&self.0) {
            *n += value;
        }
    }

    fn absolute(&self, value: u64) {
        if let Value::Counter(n) = &mut *lock(&self.0) {
            *n = (*n).max(value);
        }
    }
}

impl HistogramFn for Series {
    fn record(&self, value: f64) {
        if let Value::Histogram {
            buckets,
            sum,
            count,
        } = &mut *lock(&self.0)
        {
            if let Some(i) = BUCKETS.iter().position(|bound| value <= *bound) {
                buckets[i] += 1;
            }
            *sum += value;
            *count += 1;
        }
    }
}

impl Recorder for Prometheus {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(Arc::new(Series(self.series(key, || Value::Counter(0)))))
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        // rlock exports no gauges.
        Gauge::noop()
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        let empty = || Value::Histogram {
            buckets: [0; BUCKETS.len()],
            sum: 0.0,
            count: 0,
        };
        Histogram::from_arc(Arc::new(Series(self.series(key, empty))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_cumulative_histograms() {
        let prometheus = Prometheus::default();
        metrics::with_local_recorder(&prometheus, || {
            metrics::counter!("rlock_busy_total", "lock" => "a\"b").increment(2);
            let wait =
                metrics::histogram!("rlock_wait_seconds", "lock" => "x", "outcome" => "acquired");
            wait.record(0.003);
            wait.record(0.2);
            wait.record(60.0);
        });
        let text = prometheus.render();
        assert!(text.contains("# TYPE rlock_busy_total counter\n"), "{text}");
        assert!(
            text.contains("rlock_busy_total{lock=\"a\\\"b\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE rlock_wait_seconds histogram\n"),
            "{text}"
        );
        let series = "lock=\"x\",outcome=\"acquired\"";
        assert!(text.contains(&format!(
            "rlock_wait_seconds_bucket{{{series},le=\"0.005\"}} 1\n"
        )));
        assert!(text.contains(&format!(
            "rlock_wait_seconds_bucket{{{series},le=\"0.25\"}} 2\n"
        )));
        assert!(text.contains(&format!(
            "rlock_wait_seconds_bucket{{{series},le=\"10\"}} 2\n"
        )));
        assert!(text.contains(&format!(
            "rlock_wait_seconds_bucket{{{series},le=\"+Inf\"}} 3\n"
        )));
        assert!(text.contains(&format!("rlock_wait_seconds_count{{{series}}} 3\n")));
    }
}
