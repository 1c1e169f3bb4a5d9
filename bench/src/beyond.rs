//! (h) Beyond the lock: once-only work (how many times a burst of callers over four clients
//! computes, and what a call costs once the result is stored, against a plain `GET` of the
//! same bytes) and the idempotency layer (what it adds to a request, against the bare
//! handler, and the Redis commands it sends per request).

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use rlock_runtime::{IdempotencyLayer, LockClient, LockError};
use tower_layer::Layer as _;
use tower_service::Service;

use crate::BenchError;
use crate::stats::{self, Probe, median};

/// Callers per burst, spread over [`CLIENTS`] clients.
pub const BURST_CALLERS: usize = 32;
/// Clients a burst's callers use (as four instances would).
pub const CLIENTS: usize = 4;
/// How long one computation takes.
const COMPUTATION: Duration = Duration::from_millis(50);

/// What (h) measured.
#[derive(Debug, Default)]
pub struct Beyond {
    /// Computations per burst, one per round.
    pub computations: Vec<u64>,
    /// A burst's time, first call to last answer, one per round.
    pub burst_times: Vec<Duration>,
    /// Calls per second on a stored result, and plain `GET`s of it, one each per round.
    pub stored_ops: Vec<f64>,
    pub get_ops: Vec<f64>,
    /// Requests per second through the idempotency layer (each with a new key), and to the
    /// bare handler, one each per round.
    pub idempotent_ops: Vec<f64>,
    pub bare_ops: Vec<f64>,
    /// Redis commands (top level) per idempotent request, and what they were.
    pub commands_per_request: f64,
    pub commands: String,
}

/// Runs (h): `rounds` rounds, `n` calls per way per round.
pub async fn run(
    url: &str,
    probe: &mut Probe,
    rounds: usize,
    n: u64,
) -> Result<Beyond, BenchError> {
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(LockClient::connect(url).await?);
    }
    let client = clients[0].clone();
    let mut raw = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let mut out = Beyond::default();
    for round in 0..rounds {
        // A burst on a fresh key: every caller at once.
        let runs = Arc::new(AtomicU64::new(0));
        let key = format!("bench:once:burst:{round}:{}", fastrand::u64(..));
        let started = Instant::now();
        let mut callers = tokio::task::JoinSet::new();
        for i in 0..BURST_CALLERS {
            let (client, runs, key) = (clients[i % CLIENTS].clone(), runs.clone(), key.clone());
            callers.spawn(async move {
                client
                    .once(key)
                    .ttl(Duration::from_secs(60))
                    .wait(Duration::from_secs(30))
                    .run(|| async move {
                        runs.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(COMPUTATION).await;
                        Ok::<_, LockError>(vec![1u64; 16])
                    })
                    .await
            });
        }
        while let Some(answer) = callers.join_next().await {
            answer.map_err(|e| e.to_string())??;
        }
        out.burst_times.push(started.elapsed());
        out.computations.push(runs.load(Ordering::SeqCst));

        // The stored result against a plain GET of the same key.
        let (stored_ops, get_ops) = (
            rate(n, async || {
                let value: Vec<u64> = client
                    .once(key.as_str())
                    .run(|| async { Ok::<_, LockError>(Vec::new()) })
                    .await?;
                debug_assert_eq!(value.len(), 16);
                Ok(())
            })
            .await?,
            rate(n, async || {
                let _: Option<Vec<u8>> = redis::cmd("GET")
                    .arg(format!("rlock:result:{key}"))
                    .query_async(&mut raw)
                    .await?;
                Ok(())
            })
            .await?,
        );
        out.stored_ops.push(stored_ops);
        out.get_ops.push(get_ops);

        // Requests through the layer, each with a key of its own, against the bare handler.
        let mut bare = Handler;
        let mut layered = IdempotencyLayer::new(client.clone()).layer(Handler);
        let next = AtomicU64::new(0);
        let before = probe.snapshot().await?;
        let idempotent_ops = rate(n, async || {
            let key = format!("\"{round}-{}\"", next.fetch_add(1, Ordering::Relaxed));
            let response = layered
                .call(order(Some(&key)))
                .await
                .map_err(|e| match e {})?;
            ensure(response.status().as_u16() == 201, "idempotent request")?;
            Ok(())
        })
        .await?;
        let after = probe.snapshot().await?;
        let bare_ops = rate(n, async || {
            let response = bare.call(order(None)).await.map_err(|e| match e {})?;
            ensure(response.status().as_u16() == 201, "bare request")?;
            Ok(())
        })
        .await?;
        out.idempotent_ops.push(idempotent_ops);
        out.bare_ops.push(bare_ops);
        if round == 0 {
            let delta = stats::delta(&before, &after);
            let sent = delta.calls.values().sum::<u64>();
            out.commands_per_request = sent as f64 / n as f64;
            out.commands = delta.describe();
        }
    }
    Ok(out)
}

impl Beyond {
    /// Median stored-result rate ÷ median `GET` rate.
    pub fn stored_vs_get(&self) -> f64 {
        median(&self.stored_ops) / median(&self.get_ops)
    }

    /// Median time the layer adds to a request, in µs.
    pub fn layer_overhead_us(&self) -> f64 {
        1e6 / median(&self.idempotent_ops) - 1e6 / median(&self.bare_ops)
    }
}

fn ensure(ok: bool, what: &str) -> Result<(), BenchError> {
    if ok {
        Ok(())
    } else {
        Err(format!("{what}: unexpected status").into())
    }
}

/// `POST /orders` with a small JSON body and, if given, an `Idempotency-Key`.
fn order(key: Option<&str>) -> Request<Full<Bytes>> {
    let mut request = Request::post("/orders").header("x-user-id", "7");
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    request
        .body(Full::new(Bytes::from_static(b"{\"voucher\":1}")))
        .unwrap_or_default()
}

/// The bare handler: answers `201` with a small JSON body.
#[derive(Clone, Copy)]
struct Handler;

impl Service<Request<Full<Bytes>>> for Handler {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<Full<Bytes>>) -> Self::Future {
        let mut response = Response::new(Full::new(Bytes::from_static(b"{\"order\":1}")));
        *response.status_mut() = http::StatusCode::CREATED;
        std::future::ready(Ok(response))
    }
}

/// Calls of `call`, one after the other, per second.
async fn rate(
    n: u64,
    mut call: impl AsyncFnMut() -> Result<(), BenchError>,
) -> Result<f64, BenchError> {
    let started = Instant::now();
    for _ in 0..n {
        call().await?;
    }
    Ok(n as f64 / started.elapsed().as_secs_f64())
}
