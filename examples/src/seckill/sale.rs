//! Running a sale: every request fired through worker tasks or processes, then the orders
//! table counted by SQL for duplicate orders and oversold stock.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use std::{fmt, io::IsTerminal};

use indicatif::{ProgressBar, ProgressStyle};
use rlock_runtime::{BoxError, LockClient};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::{Config, OrderError, Shop, Store};

/// How often workers report progress.
const PROGRESS_EVERY: Duration = Duration::from_millis(100);

/// How the requests of one worker (or of the whole run) ended, by the requests' own account.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Requests that created an order.
    pub ordered: u64,
    /// Requests turned away because the user had ordered.
    pub already_ordered: u64,
    /// Requests turned away because the stock was gone.
    pub sold_out: u64,
    /// Requests turned away because a lock was busy.
    pub busy: u64,
    /// Requests that failed otherwise (store or Redis errors, lost leases).
    pub failed: u64,
}

impl Tally {
    fn record(&mut self, outcome: &Result<u64, OrderError>) {
        match outcome {
            Ok(_) => self.ordered += 1,
            Err(OrderError::AlreadyOrdered) => self.already_ordered += 1,
            Err(OrderError::SoldOut) => self.sold_out += 1,
            Err(OrderError::Lock(e)) if e.is_busy() => self.busy += 1,
            Err(_) => self.failed += 1,
        }
    }

    fn add(&mut self, other: Tally) {
        self.ordered += other.ordered;
        self.already_ordered += other.already_ordered;
        self.sold_out += other.sold_out;
        self.busy += other.busy;
        self.failed += other.failed;
    }

    /// The line a worker process ends with.
    fn to_line(self) -> String {
        format!(
            "done ordered={} already_ordered={} sold_out={} busy={} failed={}",
            self.ordered, self.already_ordered, self.sold_out, self.busy, self.failed
        )
    }

    /// Parses [`to_line`](Self::to_line)'s output.
    fn from_line(line: &str) -> Option<Self> {
        let mut tally = Self::default();
        for field in line.strip_prefix("done ")?.split_whitespace() {
            let (name, value) = field.split_once('=')?;
            let value = value.parse().ok()?;
            match name {
                "ordered" => tally.ordered = value,
                "already_ordered" => tally.already_ordered = value,
                "sold_out" => tally.sold_out = value,
                "busy" => tally.busy = value,
                "failed" => tally.failed = value,
                _ => return None,
            }
        }
        Some(tally)
    }
}

/// Fires `users` requests concurrently, one task each, and tallies their outcomes; each
/// finished request bumps `done`.
async fn fire(
    shop: &Shop,
    voucher_id: u64,
    users: impl Iterator<Item = u64>,
    done: Arc<AtomicU64>,
) -> Tally {
    let tasks: Vec<_> = users
        .map(|user_id| {
            let (shop, done) = (shop.clone(), done.clone());
            tokio::spawn(async move {
                let outcome = shop.order(voucher_id, user_id).await;
                done.fetch_add(1, Ordering::Relaxed);
                outcome
            })
        })
        .collect();
    let mut tally = Tally::default();
    for task in tasks {
        match task.await {
            Ok(outcome) => tally.record(&outcome),
            Err(_) => tally.failed += 1,
        }
    }
    tally
}

/// How the workers of a run are started.
#[derive(Debug, Clone)]
pub enum Workers {
    /// OS processes: this executable run again with `--worker INDEX` (needs Redis).
    Processes(PathBuf),
    /// Tasks of this process, each with a lock client of its own identity
    /// ([`LockClient::sibling`]), as separate instances would have.
    Tasks,
}

/// What a run found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The run's configuration.
    pub config: Config,
    /// Requests sent.
    pub requests: u64,
    /// Orders in the store after the run.
    pub orders: u64,
    /// Users with more than one order in the store.
    pub duplicate_users: u64,
    /// Orders beyond the initial stock.
    pub oversold: u64,
    /// The stock counter after the run.
    pub stock_left: i64,
    /// The requests' own account of their outcomes (busy rejections come from here).
    pub tally: Tally,
    /// Time from the start signal until the last request finished.
    pub elapsed: Duration,
}

impl Report {
    /// The machine-readable last line of the example.
    pub fn summary_line(&self) -> String {
        format!(
            "seckill: orders={} duplicate_users={} oversold={} busy={} lock={}",
            self.orders,
            self.duplicate_users,
            self.oversold,
            self.tally.busy,
            if self.config.lock { "on" } else { "off" }
        )
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rows: [(&str, String); 10] = [
            ("requests", self.requests.to_string()),
            ("orders created", self.orders.to_string()),
            (
                "users with more than one order",
                self.duplicate_users.to_string(),
            ),
            ("stock oversold", self.oversold.to_string()),
            ("stock left (vouchers.stock)", self.stock_left.to_string()),
            ("busy rejections", self.tally.busy.to_string()),
            ("already ordered", self.tally.already_ordered.to_string()),
            ("sold out", self.tally.sold_out.to_string()),
            ("failed", self.tally.failed.to_string()),
            ("elapsed", format!("{:.2?}", self.elapsed)),
        ];
        for (name, value) in rows {
            writeln!(f, "  {name:<32}{value:>10}")?;
        }
        Ok(())
    }
}

/// Runs the sale: resets the voucher in `store`, fires every request through `workers`,
/// then counts orders, duplicates and oversold stock from the store. `locks` is the parent's
/// lock client ([`Workers::Tasks`] derives each worker's from it). With `progress`, draws a
/// progress bar on stdout while the requests run.
pub async fn run(
    config: &Config,
    store: &Store,
    locks: &LockClient,
    workers: Workers,
    progress: bool,
) -> Result<Report, BoxError> {
    store.reset(config.voucher_id, config.stock).await?;
    let done: Arc<[Arc<AtomicU64>]> = (0..config.workers).map(|_| Arc::default()).collect();
    let bar = progress.then(|| {
        let bar = ProgressBar::new(config.total_requests());
        if let Ok(style) = ProgressStyle::with_template("  [{bar:40}] {pos}/{len} requests") {
            bar.set_style(style.progress_chars("#> "));
        }
        let done = done.clone();
        let shown = bar.clone();
        let updater = tokio::spawn(async move {
            loop {
                shown.set_position(done.iter().map(|d| d.load(Ordering::Relaxed)).sum());
                tokio::time::sleep(PROGRESS_EVERY).await;
            }
        });
        (bar, updater)
    });
    let outcome = match workers {
        Workers::Tasks => run_tasks(config, store, locks, &done).await,
        Workers::Processes(exe) => run_processes(config, &exe, &done).await,
    };
    if let Some((bar, updater)) = bar {
        updater.abort();
        bar.finish_and_clear();
    }
    let (tally, elapsed) = outcome?;

    let counted = store.tally(config.voucher_id).await?;
    Ok(Report {
        config: config.clone(),
        requests: config.total_requests(),
        orders: counted.orders,
        duplicate_users: counted.duplicate_users,
        oversold: counted.orders.saturating_sub(config.stock),
        stock_left: counted.stock_left,
        tally,
        elapsed,
    })
}

async fn run_tasks(
    config: &Config,
    store: &Store,
    locks: &LockClient,
    done: &Arc<[Arc<AtomicU64>]>,
) -> Result<(Tally, Duration), BoxError> {
    let started = Instant::now();
    let workers: Vec<_> = (0..config.workers)
        .map(|index| {
            let shop = Shop::new(store.clone(), locks.sibling(), config.lock);
            let config = config.clone();
            let done = done[index as usize].clone();
            tokio::spawn(async move {
                fire(&shop, config.voucher_id, config.share_of(index), done).await
            })
        })
        .collect();
    let mut tally = Tally::default();
    for worker in workers {
        tally.add(worker.await?);
    }
    Ok((tally, started.elapsed()))
}

/// Starts one process per worker, waits until all are connected, starts them together (so
/// that process start-up does not spread one user's requests apart in time), and collects
/// their tallies.
async fn run_processes(
    config: &Config,
    exe: &std::path::Path,
    done: &Arc<[Arc<AtomicU64>]>,
) -> Result<(Tally, Duration), BoxError> {
    let url = config
        .redis
        .as_deref()
        .ok_or("worker processes need a Redis URL")?;
    let database = config
        .database
        .as_deref()
        .ok_or("worker processes need a database URL")?;
    let mut children = Vec::new();
    for index in 0..config.workers {
        let mut child = tokio::process::Command::new(exe)
            .args(["--worker", &index.to_string(), "--redis", url])
            .args(["--database", database])
            .args(["--users", &config.users.to_string()])
            .args(["--requests", &config.requests.to_string()])
            .args(["--workers", &config.workers.to_string()])
            .args(["--stock", &config.stock.to_string()])
            .args(["--voucher", &config.voucher_id.to_string()])
            .args((!config.lock).then_some("--no-lock"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start worker process {}: {e}", exe.display()))?;
        let stdin = child.stdin.take().ok_or("worker stdin")?;
        let stdout = child.stdout.take().ok_or("worker stdout")?;
        children.push((child, stdin, BufReader::new(stdout).lines()));
    }

    for (_, _, lines) in &mut children {
        match lines.next_line().await? {
            Some(line) if line == "ready" => {}
            other => return Err(format!("a worker failed to start (said {other:?})").into()),
        }
    }
    let started = Instant::now();
    for (_, stdin, _) in &mut children {
        stdin.write_all(b"go\n").await?;
        stdin.flush().await?;
    }

    let readers: Vec<_> = children
        .into_iter()
        .enumerate()
        .map(|(index, (mut child, stdin, mut lines))| {
            let done = done.clone();
            tokio::spawn(async move {
                let mut tally = None;
                while let Some(line) = lines.next_line().await? {
                    if let Some(n) = line.strip_prefix("progress ") {
                        done[index].store(n.parse().unwrap_or(0), Ordering::Relaxed);
                    } else if let Some(t) = Tally::from_line(&line) {
                        tally = Some(t);
                    }
                }
                drop(stdin);
                let status = child.wait().await?;
                match tally {
                    Some(tally) if status.success() => {
                        Ok::<_, BoxError>((tally, started.elapsed()))
                    }
                    _ => Err(format!("worker {index} failed ({status})").into()),
                }
            })
        })
        .collect();
    let mut tally = Tally::default();
    let mut elapsed = Duration::ZERO;
    for reader in readers {
        let (worker, took) = reader.await??;
        tally.add(worker);
        elapsed = elapsed.max(took);
    }
    Ok((tally, elapsed))
}

/// The body of a worker process: connect, say `ready`, wait for `go` on stdin, send this
/// worker's share of the requests concurrently, report `progress N` lines while they run
/// and a final `done …` line.
pub async fn run_worker(config: &Config, index: u64) -> Result<(), BoxError> {
    let url = config
        .redis
        .as_deref()
        .ok_or("a worker needs --redis URL")?;
    let database = config
        .database
        .as_deref()
        .ok_or("a worker needs --database URL")?;
    let locks = LockClient::connect(url).await?;
    let store = Store::connect(database).await?;
    let shop = Shop::new(store, locks, config.lock);

    println!("ready");
    // A blocking read on a thread of its own: the signal is one line, once.
    let signal = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    })
    .await??;
    if signal.trim_end() != "go" {
        return Err("the parent process went away before the start signal".into());
    }

    let done = Arc::new(AtomicU64::new(0));
    let reporter = {
        let done = done.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(PROGRESS_EVERY).await;
                println!("progress {}", done.load(Ordering::Relaxed));
            }
        })
    };
    let tally = fire(
        &shop,
        config.voucher_id,
        config.share_of(index),
        done.clone(),
    )
    .await;
    reporter.abort();
    println!("{}", tally.to_line());
    Ok(())
}

/// Whether a progress bar makes sense: only when stdout is a terminal, not a pipe or file.
pub fn stdout_is_terminal() -> bool {
    std::io::stdout().is_terminal()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn tally_lines_round_trip() {
        let tally = Tally {
            ordered: 1,
            already_ordered: 2,
            sold_out: 3,
            busy: 4,
            failed: 5,
        };
        assert_eq!(Tally::from_line(&tally.to_line()), Some(tally));
    }

    #[tokio::test]
    async fn a_sale_in_one_process_with_locks_keeps_both_rules() {
        let config = Config {
            stock: 5,
            users: 10,
            requests: 3,
            workers: 2,
            ..Config::default()
        };
        let database = crate::database::ScratchDatabase::new().unwrap();
        let store = Store::connect(&database.url()).await.unwrap();
        let report = run(
            &config,
            &store,
            &LockClient::in_memory(),
            Workers::Tasks,
            false,
        )
        .await
        .unwrap();
        assert_eq!(
            (report.orders, report.duplicate_users, report.oversold),
            (5, 0, 0)
        );
    }
}
