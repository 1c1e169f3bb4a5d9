//! rlock's metrics (feature `metrics`) scraped by Prometheus, through the ecosystem's own
//! exporter, `metrics-exporter-prometheus`: the web example serves what it renders on
//! `GET /metrics`.
//!
//! rlock records through the [`metrics`] facade, so whichever recorder a service installs
//! (this exporter, an OpenTelemetry bridge) receives `rlock_acquired_total`,
//! `rlock_busy_total`, `rlock_lost_total`, `rlock_renew_failures_total`, `rlock_wait_seconds`
//! and `rlock_hold_seconds`, labelled `lock` with the key *template* and `kind` (`lock` or
//! `semaphore`). The exporter is used here without its own HTTP listener: the service's
//! router serves the page.
//!
//! ```
//! let prometheus = rlock_examples::prometheus::install();
//! metrics::counter!("rlock_acquired_total", "lock" => "order:<user_id>").increment(1);
//! assert!(prometheus.render().contains(r#"rlock_acquired_total{lock="order:<user_id>"} 1"#));
//! ```

use std::sync::OnceLock;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// Upper bounds of the histogram buckets, in seconds (Prometheus' client defaults), so that
/// wait and hold times are histograms a dashboard can aggregate, not summaries.
const BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Installs the exporter's recorder for the whole process (once; later calls return the same
/// handle) and returns a handle that renders what it recorded. When another recorder is
/// installed already, the handle's recorder records nothing, and renders an empty page.
pub fn install() -> PrometheusHandle {
    static INSTALLED: OnceLock<PrometheusHandle> = OnceLock::new();
    INSTALLED
        .get_or_init(|| {
            // (`set_buckets` refuses only an empty list.)
            let builder = || {
                PrometheusBuilder::new()
                    .set_buckets(&BUCKETS)
                    .unwrap_or_else(|_| PrometheusBuilder::new())
            };
            builder()
                .install_recorder()
                .unwrap_or_else(|_| builder().build_recorder().handle())
        })
        .clone()
}
