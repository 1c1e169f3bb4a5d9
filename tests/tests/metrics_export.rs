//! The metrics exported through the `metrics` facade, recorded by a recorder installed for
//! this test binary: counters and histograms labelled by the key *template*, never by a
//! rendered key.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use metrics::{Counter, CounterFn, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata};
use metrics::{Recorder, SharedString, Unit};
use rlock_runtime::{LockClient, LockError, distributed_lock};
use rlock_tests::RedisServer;
use rlock_tests::locking::client_for;

/// Per series (`name{label=value,…}`): the sum of a counter, or a histogram's sample count.
#[derive(Debug, Default)]
struct Recorded(Mutex<BTreeMap<String, f64>>);

impl Recorded {
    fn add(&self, series: &str, amount: f64) {
        *self.0.lock().unwrap().entry(series.to_owned()).or_default() += amount;
    }

    fn get(&self, series: &str) -> f64 {
        self.0.lock().unwrap().get(series).copied().unwrap_or(0.0)
    }
}

struct Series(Arc<Recorded>, String);

impl CounterFn for Series {
    fn increment(&self, value: u64) {
        self.0.add(&self.1, value as f64);
    }
    fn absolute(&self, _value: u64) {}
}

impl HistogramFn for Series {
    fn record(&self, _value: f64) {
        self.0.add(&self.1, 1.0);
    }
}

struct Capture(Arc<Recorded>);

fn series(key: &Key) -> String {
    let labels: Vec<String> = key
        .labels()
        .map(|l| format!("{}={}", l.key(), l.value()))
        .collect();
    format!("{}{{{}}}", key.name(), labels.join(","))
}

impl Recorder for Capture {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(Arc::new(Series(self.0.clone(), series(key))))
    }
    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(Arc::new(Series(self.0.clone(), series(key))))
    }
}

#[distributed_lock(key = "order:<user_id>", client = client, wait = "50ms")]
async fn create_order(client: &LockClient, user_id: u64) -> Result<u64, LockError> {
    Ok(user_id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_and_histograms_are_labelled_by_template() {
    let recorded = Arc::new(Recorded::default());
    metrics::set_global_recorder(Capture(recorded.clone())).unwrap();
    let server = RedisServer::start();
    let client = client_for(&server, Duration::from_secs(2)).await;

    for user in 1..=2 {
        create_order(&client, user).await.unwrap();
    }
    let other = client_for(&server, Duration::from_secs(2)).await;
    let held = other.lock("order:3").acquire().await.unwrap();
    assert!(create_order(&client, 3).await.unwrap_err().is_busy());
    held.release().await.unwrap();

    // A hold broken by its own client is lost at once; unlabelled manual locks share a label.
    let guard = client.lock("report:1").acquire().await.unwrap();
    assert!(client.force_unlock("report:1").await.unwrap());
    guard.lost().await;

    let template = "lock=order:<user_id>";
    assert_eq!(
        recorded.get(&format!("rlock_acquired_total{{{template}}}")),
        2.0
    );
    assert_eq!(
        recorded.get(&format!("rlock_busy_total{{{template}}}")),
        1.0
    );
    assert_eq!(
        recorded.get(&format!(
            "rlock_wait_seconds{{{template},outcome=acquired}}"
        )),
        2.0
    );
    assert_eq!(
        recorded.get(&format!("rlock_wait_seconds{{{template},outcome=busy}}")),
        1.0
    );
    assert_eq!(
        recorded.get(&format!("rlock_hold_seconds{{{template}}}")),
        2.0
    );
    assert_eq!(recorded.get("rlock_lost_total{lock=manual}"), 1.0);
    let all = recorded.0.lock().unwrap();
    assert!(
        all.keys()
            .all(|s| !s.contains("order:1") && !s.contains("report:1")),
        "a rendered key became a label: {all:?}"
    );
}
