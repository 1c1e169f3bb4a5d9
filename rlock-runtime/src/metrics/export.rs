//! Metrics exported through the [`metrics`](https://docs.rs/metrics) facade (the `metrics`
//! feature), for Prometheus or any other exporter the application installs. Without the
//! feature every function here is empty.
//!
//! | metric | kind | labels |
//! |---|---|---|
//! | `rlock_acquired_total` | counter | `lock`, `kind` |
//! | `rlock_busy_total` | counter | `lock`, `kind` |
//! | `rlock_lost_total` | counter | `lock`, `kind` |
//! | `rlock_renew_failures_total` | counter | none (renewals are batched across locks) |
//! | `rlock_wait_seconds` | histogram: how long acquisitions waited, granted or busy | `lock`, `kind`, `outcome` (`acquired` or `busy`) |
//! | `rlock_hold_seconds` | histogram: from the grant to the release or the loss | `lock`, `kind` |
//!
//! `lock` is the key *template* (`order:<user_id>`, as `#[distributed_lock]` writes it, or
//! what [`LockRequest::metrics_label`](crate::LockRequest::metrics_label) gives), never the
//! rendered key: one series per user would be unbounded. Locks taken by hand without a label
//! share the label `manual`. `kind` is what was leased: `lock` or `semaphore`.

use std::time::Duration;

use tokio::time::Instant;

/// The label of locks that were given none.
pub(crate) const UNLABELLED: &str = "manual";

/// The labels of one lease's series: its key template and its kind's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Label {
    pub(crate) lock: &'static str,
    pub(crate) kind: &'static str,
}

#[cfg(feature = "metrics")]
mod emit {
    use std::cell::RefCell;
    use std::time::Duration;

    use metrics::{Key, Level, Metadata};

    use super::Label;

    /// Where the series come from, as the `metrics` macros would say it.
    static METADATA: Metadata<'static> =
        Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

    /// The keys of one lock label's series. Built once per thread and label: building a key
    /// (its labels allocated, its hash computed) cost more than the rest of recording it.
    /// The recorder is still asked for every value, so one installed later, or a local one,
    /// records as with the macros.
    struct Series {
        label: Label,
        acquired: Key,
        busy: Key,
        lost: Key,
        waited_acquired: Key,
        waited_busy: Key,
        held: Key,
    }

    impl Series {
        fn new(label: Label) -> Self {
            let labels = || {
                vec![
                    metrics::Label::new("lock", label.lock),
                    metrics::Label::new("kind", label.kind),
                ]
            };
            let labelled = |name: &'static str| Key::from_parts(name, labels());
            let waited = |outcome: &'static str| {
                let mut labels = labels();
                labels.push(metrics::Label::new("outcome", outcome));
                Key::from_parts("rlock_wait_seconds", labels)
            };
            Self {
                label,
                acquired: labelled("rlock_acquired_total"),
                busy: labelled("rlock_busy_total"),
                lost: labelled("rlock_lost_total"),
                waited_acquired: waited("acquired"),
                waited_busy: waited("busy"),
                held: labelled("rlock_hold_seconds"),
            }
        }
    }

    /// Labels whose keys a thread keeps (they are key templates: few); the oldest goes first.
    const KEPT: usize = 32;

    thread_local! {
        static SERIES: RefCell<Vec<Series>> = const { RefCell::new(Vec::new()) };
    }

    /// Runs `record` with `label`'s keys: this thread's, or built for this use when they
    /// cannot be had (a recorder that locks from inside its own recording; a thread's end).
    fn with_series(label: Label, record: impl FnOnce(&Series)) {
        let mut record = Some(record);
        let _ = SERIES.try_with(|kept| {
            let Ok(mut kept) = kept.try_borrow_mut() else {
                return;
            };
            let index = match kept.iter().position(|s| s.label == label) {
                Some(index) => index,
                None => {
                    if kept.len() == KEPT {
                        kept.remove(0);
                    }
                    kept.push(Series::new(label));
                    kept.len() - 1
                }
            };
            if let Some(record) = record.take() {
                record(&kept[index]);
            }
        });
        if let Some(record) = record {
            record(&Series::new(label));
        }
    }

    /// One more in `counter`, and `waited` in `waits`.
    fn count_wait(counter: &Key, waits: &Key, waited: Duration) {
        metrics::with_recorder(|r| {
            r.register_counter(counter, &METADATA).increment(1);
            r.register_histogram(waits, &METADATA)
                .record(waited.as_secs_f64());
        });
    }

    pub(super) fn acquired(label: Label, waited: Duration) {
        with_series(label, |s| {
            count_wait(&s.acquired, &s.waited_acquired, waited)
        });
    }

    pub(super) fn busy(label: Label, waited: Duration) {
        with_series(label, |s| count_wait(&s.busy, &s.waited_busy, waited));
    }

    pub(super) fn ended(label: Label, held: Duration, lost: bool) {
        with_series(label, |series| {
            metrics::with_recorder(|r| {
                if lost {
                    r.register_counter(&series.lost, &METADATA).increment(1);
                }
                r.register_histogram(&series.held, &METADATA)
                    .record(held.as_secs_f64());
            });
        });
    }

    pub(super) fn renew_failed() {
        metrics::counter!("rlock_renew_failures_total").increment(1);
    }
}

/// A lock was granted to a request made at `started` (now, for a free lock).
pub(crate) fn acquired(label: Label, started: Instant) {
    #[cfg(feature = "metrics")]
    emit::acquired(label, started.elapsed());
    #[cfg(not(feature = "metrics"))]
    let _ = (label, started);
}

/// An acquisition gave up busy after waiting `waited`.
pub(crate) fn busy(label: Label, waited: Duration) {
    #[cfg(feature = "metrics")]
    emit::busy(label, waited);
    #[cfg(not(feature = "metrics"))]
    let _ = (label, waited);
}

/// A hold granted at `granted_at` ended: released, or `lost`.
pub(crate) fn ended(label: Label, granted_at: Instant, lost: bool) {
    #[cfg(feature = "metrics")]
    emit::ended(label, granted_at.elapsed(), lost);
    #[cfg(not(feature = "metrics"))]
    let _ = (label, granted_at, lost);
}

/// A watchdog renewal call failed.
pub(crate) fn renew_failed() {
    #[cfg(feature = "metrics")]
    emit::renew_failed();
}

#[cfg(all(test, feature = "metrics"))]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};

    use metrics::{
        Counter, CounterFn, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
    };

    use super::*;

    /// Counts what it is given, per series name and label values.
    #[derive(Default)]
    struct Tally(Mutex<Vec<(String, Arc<AtomicU64>)>>);

    impl Tally {
        fn series(&self, key: &Key) -> Arc<AtomicU64> {
            let labels: Vec<&str> = key.labels().map(|l| l.value()).collect();
            let name = format!("{}{labels:?}", key.name());
            let mut all = self.0.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((_, n)) = all.iter().find(|(s, _)| *s == name) {
                return n.clone();
            }
            let n = Arc::new(AtomicU64::new(0));
            all.push((name, n.clone()));
            n
        }

        fn get(&self, name: &str) -> u64 {
            let all = self.0.lock().unwrap_or_else(|p| p.into_inner());
            all.iter()
                .find(|(s, _)| s == name)
                .map_or(0, |(_, n)| n.load(Ordering::Relaxed))
        }
    }

    struct Bump(Arc<AtomicU64>);

    impl CounterFn for Bump {
        fn increment(&self, value: u64) {
            self.0.fetch_add(value, Ordering::Relaxed);
        }
        fn absolute(&self, _: u64) {}
    }

    impl metrics::HistogramFn for Bump {
        fn record(&self, _: f64) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    impl Recorder for Tally {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
            Counter::from_arc(Arc::new(Bump(self.series(key))))
        }
        fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::noop()
        }
        fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::from_arc(Arc::new(Bump(self.series(key))))
        }
    }

    #[test]
    fn kept_keys_record_into_whichever_recorder_is_current() {
        let now = Instant::now();
        let job = Label {
            lock: "job:<id>",
            kind: "lock",
        };
        let other = Label {
            lock: "other",
            kind: "semaphore",
        };
        // Nobody records yet; the keys are kept all the same.
        acquired(job, now);
        let (first, second) = (Tally::default(), Tally::default());
        metrics::with_local_recorder(&first, || {
            acquired(job, now);
            ended(job, now, true);
        });
        metrics::with_local_recorder(&second, || {
            acquired(job, now);
            busy(other, Duration::ZERO);
        });
        assert_eq!(first.get(r#"rlock_acquired_total["job:<id>", "lock"]"#), 1);
        assert_eq!(
            first.get(r#"rlock_wait_seconds["job:<id>", "lock", "acquired"]"#),
            1
        );
        assert_eq!(first.get(r#"rlock_lost_total["job:<id>", "lock"]"#), 1);
        assert_eq!(first.get(r#"rlock_hold_seconds["job:<id>", "lock"]"#), 1);
        assert_eq!(second.get(r#"rlock_acquired_total["job:<id>", "lock"]"#), 1);
        assert_eq!(second.get(r#"rlock_busy_total["other", "semaphore"]"#), 1);
        assert_eq!(
            second.get(r#"rlock_wait_seconds["other", "semaphore", "busy"]"#),
            1
        );
    }
}
