//! The flash sale ("seckill") of the reference articles: a voucher with limited stock, many
//! users firing order requests at once, across several instances of the service.
//!
//! Two rules must hold whatever the concurrency: **one order per user**, and **no oversold
//! stock**. The order path is written the way it usually is, as non-atomic read-then-write
//! against a store, with a short pause between the check and the write (a database round
//! trip). Unguarded, concurrent requests all pass the checks before any of them writes, and
//! both rules break. Guarded, they hold:
//!
//! - `order:<user_id>` (the `#[distributed_lock]` on [`Shop::place_order_locked`]) is held
//!   around the whole path, so one user's requests run one at a time, on whichever instance
//!   they land; the second one sees the first one's order. It does not wait: a concurrent
//!   duplicate is turned away as busy, which is what a double-clicked "buy" button deserves.
//! - `stock:<voucher_id>` (on [`Shop::take_stock_locked`]) is held only around reading and
//!   decrementing the stock, because that read-modify-write is shared by *all* users. It
//!   waits, so that every user gets a fair try while stock lasts. Always taken inside the
//!   order lock, never the other way round, so the two locks cannot deadlock.
//!
//! A store that can decrement conditionally in one command (a Lua script, or SQL's
//! `UPDATE … SET stock = stock - 1 WHERE stock > 0`) needs no stock lock and scales better;
//! the lock is the general answer for a read-modify-write the store cannot do atomically.
//!
//! Store layout (Redis), for voucher `v`:
//!
//! | key | type | holds |
//! |---|---|---|
//! | `seckill:voucher:v:stock` | string | remaining stock |
//! | `seckill:voucher:v:orders` | list | one user id per order created (the orders table) |
//! | `seckill:voucher:v:buyers` | set | users who have ordered (the index the check reads) |
//!
//! The outcome is counted from the orders list after the run, never from the requests' own
//! view of what they did.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use rlock_runtime::{BoxError, LockClient, LockError, distributed_lock};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// How long one store command may take before the request fails.
const STORE_TIMEOUT: Duration = Duration::from_secs(2);
/// The pause between a check and the write that depends on it, as a database round trip
/// would cause: 1 to 2 ms.
const DB_LATENCY_MICROS: std::ops::RangeInclusive<u64> = 1_000..=2_000;
/// How often workers report progress.
const PROGRESS_EVERY: Duration = Duration::from_millis(100);

/// One run of the flash sale.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Stock of the voucher at the start.
    pub stock: u64,
    /// Distinct users.
    pub users: u64,
    /// Concurrent requests each user fires.
    pub requests: u64,
    /// Worker processes (or tasks) the requests are spread over.
    pub workers: u64,
    /// Whether the order path is guarded by the locks (`--no-lock` turns it off).
    pub lock: bool,
    /// The Redis to use (`--redis`); `None` for `REDIS_URL` or a local `redis-server`.
    pub redis: Option<String>,
    /// The voucher on sale.
    pub voucher_id: u64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            stock: 100,
            users: 500,
            requests: 4,
            workers: 4,
            lock: true,
            redis: None,
            voucher_id: 1,
        }
    }
}

impl Config {
    /// Total order requests of the run.
    pub fn total_requests(&self) -> u64 {
        self.users * self.requests
    }

    /// The user of each request worker `index` sends. Requests are dealt round-robin, so
    /// with as many workers as requests per user, each of a user's requests lands on a
    /// different instance, as a load balancer would spread a double click.
    pub fn share_of(&self, index: u64) -> impl Iterator<Item = u64> + use<> {
        let (requests, workers) = (self.requests, self.workers.max(1));
        (0..self.total_requests())
            .filter(move |i| i % workers == index)
            .map(move |i| i / requests + 1)
    }
}

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Run the sale and report.
    Run(Config),
    /// Be worker `index` of a run started by a parent process (hidden `--worker INDEX`).
    Worker {
        /// The run's configuration; `redis` is always set.
        config: Config,
        /// Which share of the requests to send.
        index: u64,
    },
    /// Print the usage.
    Help,
}

/// The usage text.
pub const USAGE: &str = "\
usage: seckill [--no-lock] [--users N] [--stock N] [--requests N] [--workers N] [--redis URL]

  --no-lock      run the same order logic without the locks, to see the anomalies
  --users N      distinct users (default 500)
  --stock N      stock of the voucher (default 100)
  --requests N   concurrent order requests per user (default 4)
  --workers N    worker processes the requests are spread over (default 4)
  --redis URL    Redis to use (default: $REDIS_URL, else a local redis-server, else in-memory)";

/// Parses the arguments after the program name.
pub fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Command, String> {
    let mut config = Config::default();
    let mut worker = None;
    let mut args = args.into_iter();
    while let Some(flag) = args.next() {
        let mut value = |name: &str| {
            args.next()
                .ok_or_else(|| format!("{name} needs a value\n\n{USAGE}"))
        };
        match flag.as_str() {
            "--no-lock" => config.lock = false,
            "--lock" => config.lock = true,
            "--users" => config.users = number(&flag, &value(&flag)?, 1)?,
            "--stock" => config.stock = number(&flag, &value(&flag)?, 0)?,
            "--requests" => config.requests = number(&flag, &value(&flag)?, 1)?,
            "--workers" => config.workers = number(&flag, &value(&flag)?, 1)?,
            "--redis" => config.redis = Some(value(&flag)?),
            "--voucher" => config.voucher_id = number(&flag, &value(&flag)?, 0)?,
            "--worker" => worker = Some(number(&flag, &value(&flag)?, 0)?),
            "-h" | "--help" => return Ok(Command::Help),
            other => return Err(format!("unknown argument `{other}`\n\n{USAGE}")),
        }
    }
    if config.workers > 64 {
        return Err("--workers is at most 64".into());
    }
    match worker {
        Some(index) if config.redis.is_none() => Err(format!("--worker {index} needs --redis URL")),
        Some(index) => Ok(Command::Worker { config, index }),
        None => Ok(Command::Run(config)),
    }
}

fn number(flag: &str, text: &str, min: u64) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(n) if n >= min => Ok(n),
        _ => Err(format!(
            "{flag} takes a whole number of at least {min}, not `{text}`"
        )),
    }
}

/// Why one order request did not create an order.
#[derive(Debug)]
pub enum OrderError {
    /// The stock is gone.
    SoldOut,
    /// This user already has an order for this voucher.
    AlreadyOrdered,
    /// No such voucher.
    UnknownVoucher,
    /// A lock could not be taken (busy, Redis down) or was lost.
    Lock(LockError),
    /// The store failed or did not answer in time.
    Store(BoxError),
}

impl fmt::Display for OrderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::SoldOut => f.write_str("the voucher is sold out"),
            Self::AlreadyOrdered => f.write_str("this user already ordered this voucher"),
            Self::UnknownVoucher => f.write_str("no such voucher"),
            Self::Lock(e) => write!(f, "{e}"),
            Self::Store(e) => write!(f, "the order store failed: {e}"),
        }
    }
}

impl std::error::Error for OrderError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Lock(e) => Some(e),
            Self::Store(e) => Some(&**e),
            _ => None,
        }
    }
}

impl From<LockError> for OrderError {
    fn from(e: LockError) -> Self {
        Self::Lock(e)
    }
}

impl From<redis::RedisError> for OrderError {
    fn from(e: redis::RedisError) -> Self {
        Self::Store(Box::new(e))
    }
}

/// Where stock and orders live: Redis, or an in-process stand-in with the same commands
/// when there is no Redis.
#[derive(Clone)]
pub struct Store {
    inner: StoreKind,
}

#[derive(Clone)]
enum StoreKind {
    Redis(ConnectionManager),
    Memory(Arc<Mutex<HashMap<u64, MemoryVoucher>>>),
}

#[derive(Debug, Default)]
struct MemoryVoucher {
    stock: i64,
    orders: Vec<u64>,
    buyers: HashSet<u64>,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.inner {
            StoreKind::Redis(_) => "Store::Redis",
            StoreKind::Memory(_) => "Store::Memory",
        })
    }
}

/// The Redis keys of one voucher.
fn keys(voucher_id: u64) -> [String; 3] {
    let base = format!("seckill:voucher:{voucher_id}");
    [
        format!("{base}:stock"),
        format!("{base}:orders"),
        format!("{base}:buyers"),
    ]
}

impl Store {
    /// A store on the Redis at `url`, reconnecting on its own; each command is bounded by a
    /// timeout.
    pub async fn connect(url: &str) -> Result<Self, redis::RedisError> {
        let client = redis::Client::open(url)?;
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(STORE_TIMEOUT))
            .set_connection_timeout(Some(STORE_TIMEOUT))
            .set_number_of_retries(1);
        let conn = ConnectionManager::new_with_config(client, config).await?;
        Ok(Self {
            inner: StoreKind::Redis(conn),
        })
    }

    /// An empty in-process store.
    pub fn in_memory() -> Self {
        Self {
            inner: StoreKind::Memory(Arc::default()),
        }
    }

    /// Runs `f` on the in-memory tables, after yielding once as a round trip would.
    async fn memory<T>(
        tables: &Mutex<HashMap<u64, MemoryVoucher>>,
        f: impl FnOnce(&mut HashMap<u64, MemoryVoucher>) -> T,
    ) -> T {
        tokio::task::yield_now().await;
        f(&mut tables.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Puts the voucher on sale with `stock`, deleting its earlier orders.
    pub async fn reset(&self, voucher_id: u64, stock: u64) -> Result<(), OrderError> {
        let stock = i64::try_from(stock).unwrap_or(i64::MAX);
        match &self.inner {
            StoreKind::Redis(conn) => {
                let [stock_key, orders, buyers] = keys(voucher_id);
                let mut conn = conn.clone();
                let () = redis::pipe()
                    .atomic()
                    .del(&[&stock_key, &orders, &buyers])
                    .ignore()
                    .set(&stock_key, stock)
                    .ignore()
                    .query_async(&mut conn)
                    .await?;
            }
            StoreKind::Memory(tables) => {
                Self::memory(tables, |t| {
                    t.insert(
                        voucher_id,
                        MemoryVoucher {
                            stock,
                            ..MemoryVoucher::default()
                        },
                    )
                })
                .await;
            }
        }
        Ok(())
    }

    /// `GET stock`: the remaining stock, `None` for an unknown voucher.
    pub async fn stock(&self, voucher_id: u64) -> Result<Option<i64>, OrderError> {
        Ok(match &self.inner {
            StoreKind::Redis(conn) => {
                let [stock, ..] = keys(voucher_id);
                redis::cmd("GET")
                    .arg(stock)
                    .query_async(&mut conn.clone())
                    .await?
            }
            StoreKind::Memory(tables) => {
                Self::memory(tables, |t| t.get(&voucher_id).map(|v| v.stock)).await
            }
        })
    }

    /// `SET stock n`: overwrites the stock with a value computed from an earlier read.
    pub async fn set_stock(&self, voucher_id: u64, stock: i64) -> Result<(), OrderError> {
        match &self.inner {
            StoreKind::Redis(conn) => {
                let [key, ..] = keys(voucher_id);
                let () = redis::cmd("SET")
                    .arg(key)
                    .arg(stock)
                    .query_async(&mut conn.clone())
                    .await?;
            }
            StoreKind::Memory(tables) => {
                Self::memory(tables, |t| t.entry(voucher_id).or_default().stock = stock).await;
            }
        }
        Ok(())
    }

    /// `SISMEMBER buyers user`: whether the user has an order for the voucher.
    pub async fn has_ordered(&self, voucher_id: u64, user_id: u64) -> Result<bool, OrderError> {
        Ok(match &self.inner {
            StoreKind::Redis(conn) => {
                let [_, _, buyers] = keys(voucher_id);
                redis::cmd("SISMEMBER")
                    .arg(buyers)
                    .arg(user_id)
                    .query_async(&mut conn.clone())
                    .await?
            }
            StoreKind::Memory(tables) => {
                Self::memory(tables, |t| {
                    t.get(&voucher_id)
                        .is_some_and(|v| v.buyers.contains(&user_id))
                })
                .await
            }
        })
    }

    /// `RPUSH orders user` then `SADD buyers user`: records an order; returns its number.
    pub async fn create_order(&self, voucher_id: u64, user_id: u64) -> Result<u64, OrderError> {
        Ok(match &self.inner {
            StoreKind::Redis(conn) => {
                let [_, orders, buyers] = keys(voucher_id);
                let mut conn = conn.clone();
                let number: u64 = redis::cmd("RPUSH")
                    .arg(orders)
                    .arg(user_id)
                    .query_async(&mut conn)
                    .await?;
                let _: u64 = redis::cmd("SADD")
                    .arg(buyers)
                    .arg(user_id)
                    .query_async(&mut conn)
                    .await?;
                number
            }
            StoreKind::Memory(tables) => {
                Self::memory(tables, |t| {
                    let v = t.entry(voucher_id).or_default();
                    v.orders.push(user_id);
                    v.buyers.insert(user_id);
                    v.orders.len() as u64
                })
                .await
            }
        })
    }

    /// `LRANGE orders 0 -1`: the user of every order created, in order.
    pub async fn orders(&self, voucher_id: u64) -> Result<Vec<u64>, OrderError> {
        Ok(match &self.inner {
            StoreKind::Redis(conn) => {
                let [_, orders, _] = keys(voucher_id);
                redis::cmd("LRANGE")
                    .arg(orders)
                    .arg(0)
                    .arg(-1)
                    .query_async(&mut conn.clone())
                    .await?
            }
            StoreKind::Memory(tables) => {
                Self::memory(tables, |t| {
                    t.get(&voucher_id)
                        .map(|v| v.orders.clone())
                        .unwrap_or_default()
                })
                .await
            }
        })
    }
}

/// The order service of one instance: its store, its lock client, and whether it locks.
#[derive(Debug, Clone)]
pub struct Shop {
    /// Stock and orders.
    pub store: Store,
    /// The locks, shared with every other instance through the backend.
    pub locks: LockClient,
    /// Whether [`order`](Self::order) takes the locks.
    pub lock: bool,
}

impl Shop {
    /// A shop on `store` locking with `locks` (when `lock` is true).
    pub fn new(store: Store, locks: LockClient, lock: bool) -> Self {
        Self { store, locks, lock }
    }

    /// One order request, through the locks unless they are turned off. Returns the order
    /// number.
    pub async fn order(&self, voucher_id: u64, user_id: u64) -> Result<u64, OrderError> {
        if self.lock {
            self.place_order_locked(voucher_id, user_id).await
        } else {
            self.place_order(voucher_id, user_id).await
        }
    }

    /// [`place_order`](Self::place_order) while holding `order:<user_id>`: one request per
    /// user at a time, across all instances. A concurrent request of the same user gets
    /// [`LockError::Busy`] at once.
    #[distributed_lock(key = "order:<user_id>", client = self.locks, ttl = "10s")]
    pub async fn place_order_locked(
        &self,
        voucher_id: u64,
        user_id: u64,
    ) -> Result<u64, OrderError> {
        self.place_order(voucher_id, user_id).await
    }

    /// The order path of the reference articles, unguarded: read the stock, check the user
    /// has no order, take one from the stock, create the order. Every step is a separate
    /// store command, so concurrent callers interleave between them unless a lock is held.
    pub async fn place_order(&self, voucher_id: u64, user_id: u64) -> Result<u64, OrderError> {
        // A cheap early answer once the sale is over; not authoritative (checked again below).
        match self.store.stock(voucher_id).await? {
            None => return Err(OrderError::UnknownVoucher),
            Some(stock) if stock <= 0 => return Err(OrderError::SoldOut),
            Some(_) => {}
        }
        if self.store.has_ordered(voucher_id, user_id).await? {
            return Err(OrderError::AlreadyOrdered);
        }
        if self.lock {
            self.take_stock_locked(voucher_id).await?;
        } else {
            self.take_stock(voucher_id).await?;
        }
        self.store.create_order(voucher_id, user_id).await
    }

    /// [`take_stock`](Self::take_stock) while holding `stock:<voucher_id>`. All users share
    /// this lock, so it is held as briefly as possible and waited for.
    #[distributed_lock(key = "stock:<voucher_id>", client = self.locks, ttl = "5s", wait = "20s")]
    pub async fn take_stock_locked(&self, voucher_id: u64) -> Result<(), OrderError> {
        self.take_stock(voucher_id).await
    }

    /// Reads the stock and writes it back one lower: a read-modify-write that loses updates
    /// and sells stock that is gone when two callers interleave.
    pub async fn take_stock(&self, voucher_id: u64) -> Result<(), OrderError> {
        let stock = self
            .store
            .stock(voucher_id)
            .await?
            .ok_or(OrderError::UnknownVoucher)?;
        if stock <= 0 {
            return Err(OrderError::SoldOut);
        }
        db_latency().await;
        self.store.set_stock(voucher_id, stock - 1).await
    }
}

/// The pause a database round trip puts between a check and the write that depends on it.
async fn db_latency() {
    tokio::time::sleep(Duration::from_micros(fastrand::u64(DB_LATENCY_MICROS))).await;
}

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
            ("stock left (counter)", self.stock_left.to_string()),
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
        let done = done.clone();
        let total = config.total_requests();
        tokio::spawn(async move {
            loop {
                draw_progress(done.iter().map(|d| d.load(Ordering::Relaxed)).sum(), total);
                tokio::time::sleep(PROGRESS_EVERY).await;
            }
        })
    });
    let outcome = match workers {
        Workers::Tasks => run_tasks(config, store, locks, &done).await,
        Workers::Processes(exe) => run_processes(config, &exe, &done).await,
    };
    if let Some(bar) = bar {
        bar.abort();
        print!("\r\x1b[2K");
        let _ = std::io::stdout().flush();
    }
    let (tally, elapsed) = outcome?;

    let orders = store.orders(config.voucher_id).await?;
    let mut per_user: HashMap<u64, u64> = HashMap::new();
    for user in &orders {
        *per_user.entry(*user).or_default() += 1;
    }
    let orders = orders.len() as u64;
    Ok(Report {
        config: config.clone(),
        requests: config.total_requests(),
        orders,
        duplicate_users: per_user.values().filter(|&&n| n > 1).count() as u64,
        oversold: orders.saturating_sub(config.stock),
        stock_left: store.stock(config.voucher_id).await?.unwrap_or(0),
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
    let mut children = Vec::new();
    for index in 0..config.workers {
        let mut child = tokio::process::Command::new(exe)
            .args(["--worker", &index.to_string(), "--redis", url])
            .args(["--users", &config.users.to_string()])
            .args(["--requests", &config.requests.to_string()])
            .args(["--workers", &config.workers.to_string()])
            .args(["--stock", &config.stock.to_string()])
            .args(["--voucher", &config.voucher_id.to_string()])
            .arg(if config.lock { "--lock" } else { "--no-lock" })
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
    let locks = LockClient::connect(url).await?;
    let store = Store::connect(url).await?;
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

/// Draws `[####    ] done/total` over the current line.
fn draw_progress(done: u64, total: u64) {
    const WIDTH: u64 = 40;
    let filled = (done * WIDTH)
        .checked_div(total)
        .unwrap_or(WIDTH)
        .min(WIDTH);
    print!(
        "\r  [{}{}] {done}/{total} requests",
        "#".repeat(filled as usize),
        " ".repeat((WIDTH - filled) as usize)
    );
    let _ = std::io::stdout().flush();
}

/// Whether a progress bar makes sense: only when stdout is a terminal, not a pipe or file.
pub fn stdout_is_terminal() -> bool {
    std::io::stdout().is_terminal()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn flags_parse() {
        let Command::Run(c) = parse_args(args("--no-lock --users 7 --stock 0")).unwrap() else {
            panic!("not a run");
        };
        assert_eq!((c.lock, c.users, c.stock, c.workers), (false, 7, 0, 4));
        assert!(parse_args(args("--users 0")).is_err());
        assert!(parse_args(args("--bogus")).is_err());
        assert!(parse_args(args("--worker 1")).is_err());
        assert_eq!(
            parse_args(args("--worker 1 --redis redis://x/")).unwrap(),
            Command::Worker {
                config: Config {
                    redis: Some("redis://x/".into()),
                    ..Config::default()
                },
                index: 1
            }
        );
    }

    #[test]
    fn every_request_is_sent_once_and_a_users_requests_spread_over_workers() {
        let config = Config {
            users: 5,
            requests: 3,
            workers: 3,
            ..Config::default()
        };
        let mut all: Vec<u64> = (0..3).flat_map(|w| config.share_of(w)).collect();
        all.sort_unstable();
        let expected: Vec<u64> = (1..=5).flat_map(|u| [u, u, u]).collect();
        assert_eq!(all, expected);
        for worker in 0..3 {
            let share: Vec<u64> = config.share_of(worker).collect();
            assert_eq!(share, vec![1, 2, 3, 4, 5]);
        }
    }

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
    async fn in_memory_sale_with_locks_keeps_both_rules() {
        let config = Config {
            stock: 5,
            users: 10,
            requests: 3,
            workers: 2,
            ..Config::default()
        };
        let report = run(
            &config,
            &Store::in_memory(),
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
