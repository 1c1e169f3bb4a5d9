//! The metrics exported through the `metrics` facade, recorded by metrics-util's
//! `DebuggingRecorder` installed for this test binary: counters and histograms labelled by the
//! key *template* (never by a rendered key) and by the kind of lease.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use rlock_runtime::{LockClient, LockError, distributed_lock};
use rlock_tests::RedisServer;
use rlock_tests::locking::client_for;

/// Per series (`name{label=value,…}`): a counter's total, or a histogram's sample count.
fn recorded(snapshotter: &Snapshotter) -> BTreeMap<String, f64> {
    let mut all = BTreeMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        let labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        let amount = match value {
            DebugValue::Counter(n) => n as f64,
            DebugValue::Histogram(samples) => samples.len() as f64,
            DebugValue::Gauge(_) => continue,
        };
        *all.entry(format!("{}{{{}}}", key.name(), labels.join(",")))
            .or_default() += amount;
    }
    all
}

#[distributed_lock(key = "order:<user_id>", client = client, wait = "50ms")]
async fn create_order(client: &LockClient, user_id: u64) -> Result<u64, LockError> {
    Ok(user_id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_and_histograms_are_labelled_by_template() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().unwrap();
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
    // A semaphore's series carry its kind.
    client
        .semaphore("export:acme", 2)
        .metrics_label("export:<tenant>")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();

    let recorded = recorded(&snapshotter);
    let get = |series: &str| recorded.get(series).copied().unwrap_or(0.0);
    let template = "lock=order:<user_id>,kind=lock";
    assert_eq!(get(&format!("rlock_acquired_total{{{template}}}")), 2.0);
    assert_eq!(get(&format!("rlock_busy_total{{{template}}}")), 1.0);
    assert_eq!(
        get(&format!(
            "rlock_wait_seconds{{{template},outcome=acquired}}"
        )),
        2.0
    );
    assert_eq!(
        get(&format!("rlock_wait_seconds{{{template},outcome=busy}}")),
        1.0
    );
    assert_eq!(get(&format!("rlock_hold_seconds{{{template}}}")), 2.0);
    assert_eq!(get("rlock_lost_total{lock=manual,kind=lock}"), 1.0);
    assert_eq!(
        get("rlock_acquired_total{lock=export:<tenant>,kind=semaphore}"),
        1.0
    );
    assert!(
        recorded
            .keys()
            .all(|s| !s.contains("order:1") && !s.contains("report:1")),
        "a rendered key became a label: {recorded:?}"
    );
}
