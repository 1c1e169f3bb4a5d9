//! One worker process of a soak run: `--tasks` tasks lock, write through the fenced store and
//! record each section, or take a semaphore's permit and record it; the waiting mix's tasks
//! wait for its keys; a probe measures the process's timer lateness. A `--candidate` worker
//! instead campaigns for each deployment's leader seat (`soak:<name>:leader`) and writes
//! through the store with its term. Everything is written, as lines of [`crate::protocol`],
//! to the file `--history` names, for the run to merge
//! ([`super::history::History::add_worker`]); a candidate writes each line at once, as the
//! nemesis may kill it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rlock_runtime::{LockClient, LockError, LockGuard};

use super::COMMAND_TIMEOUT;
use super::deployment::Deployment;
use super::history::{
    GaveUp, LATENESS_REPORTED_US, LATENESS_WINDOW_US, Lateness, PROBE_SLEEP_MAX_US, Record,
    Release, SectionKind, Waits, Write,
};
use super::now_us;
use crate::holding::Holding;
use crate::protocol::{Line, variant_name};

/// Keeps the highest fence per key; answers 1 when this write's fence is higher (accepted).
const STORE_SCRIPT: &str = r"
local current = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
local fence = tonumber(ARGV[2])
if fence > current then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  return 1
end
return 0";
const STORE_HASH: &str = "fenced-store";
/// Hot keys: every task of every worker contends for these.
const HOT_KEYS: u64 = 4;
/// Keys of the waiting mix per deployment; the even ones are `fair`.
const WAIT_KEYS: u64 = 2;
/// A waiting-mix request's budget, in its ttl: generous next to its holds (5–50 ms, one in
/// 200 spanning renewals for ½–1 ttl), so that honest waits end in a grant.
const WAIT_BUDGET_TTLS: u32 = 5;
/// One waiting-mix request in this many is cancelled while it waits.
const CANCEL_ONE_IN: u64 = 8;
/// Semaphore keys per deployment, each of [`PERMITS`] permits.
const SEMAPHORE_KEYS: u64 = 2;
/// Permits of every semaphore key: few enough that every task of every worker contends.
const PERMITS: u32 = 3;
/// Read-write lock keys per deployment.
const READ_WRITE_KEYS: u64 = 2;
/// Keys per deployment that every kind asks for (`soak:<name>:mixed:<k>`): a name used as
/// two kinds is a mistake users make, and must get an error, never a second holder.
const MIXED_KEYS: u64 = 2;
/// A candidate's campaign budget, in its ttl: long enough to wait out most leaders' terms.
const CAMPAIGN_TTLS: u32 = 4;
/// A leader's term lasts 2 to this many ttl (across renewals, and long enough for its holder
/// card to list it, by which the nemesis finds it), then it resigns.
const TERM_TTLS: u64 = 6;

/// A deployment's leader seat, which every candidate campaigns for.
pub(super) fn leader_key(deployment: &str) -> String {
    format!("soak:{deployment}:leader")
}

struct Args {
    id: u64,
    /// The deployments' URLs, by the name their keys carry.
    urls: Vec<(&'static str, String)>,
    store: String,
    history: PathBuf,
    tasks: u64,
    ttl: Duration,
    acquisitions: u64,
    until_us: u64,
    seed: u64,
    min_replicas: u32,
    /// Waiting-mix tasks per waiting key.
    waiters: u64,
    wait_ttl: Duration,
    candidate: bool,
}

/// A worker's command line, as a run writes it.
#[derive(Debug, clap::Args)]
pub(super) struct WorkerArgs {
    #[arg(long)]
    id: u64,
    /// The deployments' URLs, each under the name its keys carry.
    #[arg(long)]
    single: Option<String>,
    #[arg(long)]
    sentinel: Option<String>,
    #[arg(long)]
    cluster: Option<String>,
    #[arg(long)]
    store: String,
    #[arg(long)]
    history: PathBuf,
    #[arg(long, default_value_t = 4)]
    tasks: u64,
    #[arg(long, default_value_t = 500)]
    ttl_ms: u64,
    #[arg(long, default_value_t = 0)]
    acquisitions: u64,
    #[arg(long, default_value_t = 0)]
    until_us: u64,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    #[arg(long, default_value_t = 0)]
    min_replicas: u32,
    #[arg(long, default_value_t = 0)]
    waiters: u64,
    #[arg(long, default_value_t = 2000)]
    wait_ttl_ms: u64,
    /// Campaign for each deployment's leader seat instead of locking.
    #[arg(long)]
    candidate: bool,
}

pub(super) fn main(given: WorkerArgs) -> Result<(), String> {
    let urls = [
        (Deployment::Single, given.single),
        (Deployment::Sentinel, given.sentinel),
        (Deployment::Cluster, given.cluster),
    ];
    let args = Args {
        id: given.id,
        urls: urls
            .into_iter()
            .filter_map(|(d, url)| Some((d.name(), url?)))
            .collect(),
        store: given.store,
        history: given.history,
        tasks: given.tasks,
        ttl: Duration::from_millis(given.ttl_ms),
        acquisitions: given.acquisitions,
        until_us: given.until_us,
        seed: given.seed,
        min_replicas: given.min_replicas,
        waiters: given.waiters,
        wait_ttl: Duration::from_millis(given.wait_ttl_ms),
        candidate: given.candidate,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(run(args))
}

/// What the tasks of one worker share.
struct Shared {
    /// A client per deployment, with the name its keys carry.
    clients: Vec<(&'static str, LockClient)>,
    /// Each client's id, as its owner tokens carry it (`<id>:<n>`), once a grant shows it.
    client_ids: Vec<OnceLock<String>>,
    store: redis::aio::MultiplexedConnection,
    script: redis::Script,
    acquired: AtomicU64,
    /// Set once the run is over ([`done`], looked at by the lateness probe every 5–10 ms).
    over: tokio::sync::watch::Sender<bool>,
    /// The history file, written line by line as it goes where the process may be killed.
    journal: Mutex<std::fs::File>,
    /// `SECTION` lines already written to it.
    journaled: AtomicU64,
    /// A candidate's stdin reached its end: the run is over for it.
    stdin_closed: std::sync::atomic::AtomicBool,
    args: Args,
}

impl Shared {
    /// Appends `lines` to the history file at once.
    fn journal(&self, lines: &[Line]) -> Result<(), String> {
        let mut text = String::new();
        for line in lines {
            let _ = writeln!(text, "{line}");
        }
        let mut file = self.journal.lock().map_err(|e| e.to_string())?;
        file.write_all(text.as_bytes())
            .map_err(|e| format!("{}: {e}", self.args.history.display()))
    }
}

/// What a task hands back: its lines, and its failures by `LockError` variant.
#[derive(Default)]
struct Output {
    lines: Vec<Line>,
    errors: BTreeMap<&'static str, u64>,
}

async fn run(args: Args) -> Result<(), String> {
    if args.urls.is_empty() {
        return Err("worker: no deployment given".into());
    }
    let mut clients = Vec::new();
    for (name, url) in &args.urls {
        clients.push((*name, connect(url, args.ttl).await?));
    }
    let store = redis::Client::open(args.store.as_str())
        .map_err(|e| e.to_string())?
        .get_multiplexed_async_connection_with_config(
            &redis::AsyncConnectionConfig::new()
                .set_connection_timeout(Some(COMMAND_TIMEOUT))
                .set_response_timeout(Some(COMMAND_TIMEOUT)),
        )
        .await
        .map_err(|e| format!("store: {e}"))?;
    let journal = std::fs::File::create(&args.history)
        .map_err(|e| format!("{}: {e}", args.history.display()))?;
    let shared = Arc::new(Shared {
        journal: Mutex::new(journal),
        journaled: AtomicU64::new(0),
        stdin_closed: std::sync::atomic::AtomicBool::new(false),
        client_ids: clients.iter().map(|_| OnceLock::new()).collect(),
        clients,
        store,
        script: redis::Script::new(STORE_SCRIPT),
        acquired: AtomicU64::new(0),
        over: tokio::sync::watch::Sender::new(false),
        args,
    });
    if shared.args.candidate {
        let shared = shared.clone();
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
            shared.stdin_closed.store(true, Ordering::Relaxed);
        });
    }
    let probe = tokio::spawn(lateness_probe(shared.clone()));
    let mut tasks = Vec::new();
    if shared.args.candidate {
        for c in 0..shared.clients.len() {
            tasks.push(tokio::spawn(candidate_task(shared.clone(), c)));
        }
    } else {
        for t in 0..shared.args.tasks {
            tasks.push(tokio::spawn(task(shared.clone(), t)));
        }
    }
    for c in (0..shared.clients.len()).filter(|_| !shared.args.candidate) {
        for k in 0..WAIT_KEYS {
            for n in 0..shared.args.waiters {
                tasks.push(tokio::spawn(waiting_task(shared.clone(), c, k, n)));
            }
        }
    }
    let mut lines = Vec::new();
    let mut errors: BTreeMap<&'static str, u64> = BTreeMap::new();
    for handle in tasks {
        match handle.await {
            Ok(output) => {
                lines.extend(output.lines);
                for (variant, n) in output.errors {
                    *errors.entry(variant).or_default() += n;
                }
            }
            Err(e) => lines.push(Line::Panic(e.to_string())),
        }
    }
    match probe.await {
        Ok(late) => lines.extend(late),
        Err(e) => lines.push(Line::Panic(e.to_string())),
    }
    for ((name, _), id) in shared.clients.iter().zip(&shared.client_ids) {
        if let Some(id) = id.get() {
            lines.push(Line::Client {
                deployment: (*name).to_owned(),
                id: id.clone(),
            });
        }
    }
    for (variant, count) in errors {
        lines.push(Line::Errors {
            variant: variant.to_owned(),
            count,
        });
    }
    let sections = lines
        .iter()
        .filter(|l| matches!(l, Line::Section(_)))
        .count() as u64
        + shared.journaled.load(Ordering::Relaxed);
    lines.push(Line::Done { sections });
    shared.journal(&lines)
}

/// Connects, retrying while the nemesis keeps Redis away (bounded: one minute).
async fn connect(url: &str, ttl: Duration) -> Result<LockClient, String> {
    let give_up = Instant::now() + Duration::from_secs(60);
    loop {
        let attempt = LockClient::builder()
            .url(url)
            .command_timeout(ttl.min(Duration::from_millis(300)))
            .connect()
            .await;
        match attempt {
            Ok(client) => return Ok(client),
            Err(e) if Instant::now() >= give_up => return Err(format!("connect: {e}")),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

fn done(shared: &Shared) -> bool {
    let args = &shared.args;
    if args.candidate {
        shared.stdin_closed.load(Ordering::Relaxed)
    } else if args.acquisitions > 0 {
        shared.acquired.load(Ordering::Relaxed) >= args.acquisitions
    } else {
        now_us() >= args.until_us
    }
}

/// Resolves once the run is over, to cut the waits still going.
async fn run_over(shared: &Shared) {
    let mut over = shared.over.subscribe();
    let _ = over.wait_for(|&over| over).await;
}

/// Sleeps 5–10 ms again and again until the run is over, and reports the worst lateness
/// of each 100 ms window (from 1 ms) as `LATE` lines, stamped with the history's clock.
async fn lateness_probe(shared: Arc<Shared>) -> Vec<Line> {
    let mut rng = fastrand::Rng::with_seed(shared.args.seed ^ 0x1a7e);
    let mut out = Vec::new();
    let mut worst: Option<Lateness> = None;
    let report = |worst: Option<Lateness>, out: &mut Vec<Line>| {
        if let Some(l) = worst.filter(|l| l.late_us >= LATENESS_REPORTED_US) {
            out.push(l.line());
        }
    };
    while !done(&shared) {
        let sleep = Duration::from_micros(rng.u64(5_000..=PROBE_SLEEP_MAX_US));
        let due = tokio::time::Instant::now() + sleep;
        tokio::time::sleep_until(due).await;
        let late_us = u64::try_from(
            tokio::time::Instant::now()
                .saturating_duration_since(due)
                .as_micros(),
        )
        .unwrap_or(u64::MAX);
        let sample = Lateness {
            worker: 0,
            woke_us: now_us(),
            late_us,
        };
        let window = sample.woke_us / LATENESS_WINDOW_US;
        match worst {
            Some(w) if w.woke_us / LATENESS_WINDOW_US == window => {
                if late_us > w.late_us {
                    worst = Some(sample);
                }
            }
            _ => {
                report(worst, &mut out);
                worst = Some(sample);
            }
        }
    }
    report(worst, &mut out);
    shared.over.send_replace(true);
    out
}

/// What a section holds: a key on client `client`, and whether a lock or a permit.
struct Held<'a> {
    client: usize,
    key: &'a str,
    kind: SectionKind,
}

/// Runs one critical section under `guard`: holds it `hold_ms`, writing once through the
/// store at a random moment of it (a lock's: a permit carries no fence to write with), then
/// releases it. Returns its line.
async fn section(
    shared: &Shared,
    held: Held<'_>,
    guard: Holding,
    hold_ms: u64,
    rng: &mut fastrand::Rng,
    errors: &mut BTreeMap<&'static str, u64>,
) -> Line {
    let Held { client, key, kind } = held;
    shared.acquired.fetch_add(1, Ordering::Relaxed);
    let fence = guard.fence().unwrap_or(0);
    let mut record = opened(kind, fence);
    if let Some((id, _)) = guard.token().split_once(':') {
        let _ = shared.client_ids[client].set(id.to_owned());
    }
    let write_at = Duration::from_millis(rng.u64(0..=hold_ms));
    let rest = Duration::from_millis(hold_ms) - write_at;
    // A lock's section waits for its write; the others' hold to their end.
    let until = match kind {
        SectionKind::Lock => write_at,
        SectionKind::Semaphore { .. }
        | SectionKind::Read
        | SectionKind::Write
        | SectionKind::UpgradeableRead
        | SectionKind::Upgrade => Duration::from_millis(hold_ms),
    };
    record.lost_us = lost_within(guard.lost(), until).await;
    if record.lost_us == 0 && kind == SectionKind::Lock {
        // The write itself is never cut short: its outcome must be known.
        record.write_sent_us = now_us();
        let mut store = shared.store.clone();
        let written: Result<i64, _> = shared
            .script
            .key(STORE_HASH)
            .arg(key)
            .arg(fence)
            .invoke_async(&mut store)
            .await;
        record.write_done_us = now_us();
        record.write = match written {
            Ok(1) => Write::Accepted,
            Ok(_) => Write::Rejected,
            Err(_) => Write::None,
        };
        record.lost_us = if guard.is_lost() {
            record.write_done_us
        } else {
            lost_within(guard.lost(), rest).await
        };
    }
    record.end_us = now_us();
    record.release = release_outcome(guard.release().await, record.lost_us, errors);
    record.line(key)
}

/// How a section's release ended, `lost_us` telling whether `lost()` had fired in it; an
/// error other than `Lost` is counted in `errors`.
fn release_outcome(
    released: Result<(), LockError>,
    lost_us: u64,
    errors: &mut BTreeMap<&'static str, u64>,
) -> Release {
    match released {
        Ok(()) if lost_us == 0 => Release::Ok,
        Ok(()) => Release::Lost,
        Err(LockError::Lost { .. }) => Release::Lost,
        Err(e) => {
            *errors.entry(variant_name(&e)).or_default() += 1;
            Release::Failed
        }
    }
}

/// Waits `hold` unless `lost` fires first: when it fired (0: it did not).
async fn lost_within(lost: impl std::future::Future<Output = ()>, hold: Duration) -> u64 {
    tokio::select! {
        biased;
        () = lost => now_us(),
        () = tokio::time::sleep(hold) => 0,
    }
}

/// A section of `kind` granted now with `fence`, its end and outcomes still to come.
fn opened(kind: SectionKind, fence: u64) -> Record {
    Record {
        worker: 0,
        key: 0,
        fence,
        grant_us: now_us(),
        end_us: 0,
        lost_us: 0,
        write_sent_us: 0,
        write_done_us: 0,
        write: Write::None,
        release: Release::Ok,
        kind,
    }
}

/// Holds an upgradeable read under `guard` for `hold_ms`, and in one section of two upgrades
/// it partway (waiting up to two ttl for the readers in), holds the write a while and gives
/// it back, reading on. Its lines: the read's pieces before and after the upgrade (each a
/// section of its own, so that none spans the write beside it), and the upgrade's.
async fn upgradeable_section(
    shared: &Shared,
    held: Held<'_>,
    guard: LockGuard,
    hold_ms: u64,
    rng: &mut fastrand::Rng,
    errors: &mut BTreeMap<&'static str, u64>,
) -> Vec<Line> {
    let Held { client, key, .. } = held;
    shared.acquired.fetch_add(1, Ordering::Relaxed);
    let mut piece = opened(SectionKind::UpgradeableRead, 0);
    let mut lines = Vec::new();
    let before = Duration::from_millis(rng.u64(0..=hold_ms / 2));
    piece.lost_us = lost_within(guard.lost(), before).await;
    if piece.lost_us == 0 && rng.bool() {
        let upgrade = tokio::select! {
            biased;
            () = guard.lost() => {
                piece.lost_us = now_us();
                None
            }
            upgrade = guard.upgrade_within(shared.args.ttl * 2) => Some(upgrade),
        };
        match upgrade {
            Some(Ok(write)) => {
                // The read's first piece ends where the write begins.
                piece.end_us = now_us();
                lines.push(piece.line(key));
                let write_ms = rng.u64(1..=5);
                let held = Held {
                    client,
                    key,
                    kind: SectionKind::Upgrade,
                };
                let holding = Holding::Guard(write);
                lines.push(section(shared, held, holding, write_ms, rng, errors).await);
                piece.grant_us = now_us();
                piece.lost_us = 0;
            }
            Some(Err(e)) => *errors.entry(variant_name(&e)).or_default() += 1,
            None => {}
        }
    }
    if piece.lost_us == 0 {
        let rest = Duration::from_millis(hold_ms).saturating_sub(before);
        piece.lost_us = lost_within(guard.lost(), rest).await;
    }
    piece.end_us = now_us();
    piece.release = release_outcome(guard.release().await, piece.lost_us, errors);
    lines.push(piece.line(key));
    lines
}

async fn task(shared: Arc<Shared>, t: u64) -> Output {
    let args = &shared.args;
    let mut rng = fastrand::Rng::with_seed(args.seed ^ (t << 32));
    let mut out = Output::default();
    let ttl_ms = u64::try_from(args.ttl.as_millis()).unwrap_or(u64::MAX);
    while !done(&shared) {
        let c = rng.usize(..shared.clients.len());
        let (on, client) = &shared.clients[c];
        // Half the sections hold a lock, a quarter a permit, a quarter a read-write lock's
        // read (two in four of those), upgradeable read (one in four) or write lock.
        let kind = match rng.u64(..16) {
            // One permit section in four holds two of the three at once.
            0 => SectionKind::Semaphore {
                permits: PERMITS,
                take: 2,
            },
            1..4 => SectionKind::Semaphore {
                permits: PERMITS,
                take: 1,
            },
            4..6 => SectionKind::Read,
            6 => SectionKind::UpgradeableRead,
            7 => SectionKind::Write,
            _ => SectionKind::Lock,
        };
        // One section in sixteen names a key that every kind asks for.
        let mixed = rng.u64(..16) == 0;
        let key = match kind {
            _ if mixed => format!("soak:{on}:mixed:{}", rng.u64(..MIXED_KEYS)),
            SectionKind::Semaphore { .. } => {
                format!("soak:{on}:sem:{}", rng.u64(..SEMAPHORE_KEYS))
            }
            SectionKind::Read
            | SectionKind::Write
            | SectionKind::UpgradeableRead
            | SectionKind::Upgrade => {
                format!("soak:{on}:rw:{}", rng.u64(..READ_WRITE_KEYS))
            }
            SectionKind::Lock if rng.bool() => format!("soak:{on}:hot:{}", rng.u64(..HOT_KEYS)),
            SectionKind::Lock => format!("soak:{on}:cold:{}:{t}:{}", args.id, rng.u64(..4)),
        };
        // The one server has no replica to wait for.
        let min_replicas = if *on == "single" {
            0
        } else {
            args.min_replicas
        };
        let request = match kind {
            SectionKind::Lock => client.lock(key.as_str()).fenced(),
            SectionKind::Semaphore { permits, take } => {
                client.semaphore(key.as_str(), permits).permits(take)
            }
            SectionKind::Read => client.read_lock(key.as_str()),
            SectionKind::UpgradeableRead => client.upgradeable_read_lock(key.as_str()),
            // (Taken only through an upgradeable read, never asked for on its own.)
            SectionKind::Write | SectionKind::Upgrade => client.write_lock(key.as_str()),
        };
        let attempt = request
            .ttl(args.ttl)
            .wait(args.ttl * 2)
            .min_replicas(min_replicas)
            .acquire()
            .await;
        let guard = match attempt {
            Ok(guard) => guard,
            Err(e) => {
                *out.errors.entry(variant_name(&e)).or_default() += 1;
                if !e.is_busy() {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                continue;
            }
        };
        // Mostly short sections (a permit's a little longer, for its holders to overlap); one
        // in 400 spans renewals (and so the faults).
        let hold_ms = match kind {
            _ if rng.u64(..400) == 0 => rng.u64(ttl_ms / 2..=ttl_ms * 3),
            SectionKind::Lock => rng.u64(0..=1),
            SectionKind::Semaphore { .. }
            | SectionKind::Read
            | SectionKind::Write
            | SectionKind::UpgradeableRead
            | SectionKind::Upgrade => rng.u64(1..=10),
        };
        let held = Held {
            client: c,
            key: &key,
            kind,
        };
        if kind == SectionKind::UpgradeableRead {
            let lines =
                upgradeable_section(&shared, held, guard, hold_ms, &mut rng, &mut out.errors);
            out.lines.extend(lines.await);
            continue;
        }
        let guard = Holding::Guard(guard);
        let line = section(&shared, held, guard, hold_ms, &mut rng, &mut out.errors).await;
        out.lines.push(line);
    }
    out
}

/// A candidate's campaigns for the leader seat of client `c`'s deployment, until the run is
/// over: each term is held 2–[`TERM_TTLS`] ttl (across renewals), writes once through the
/// fenced store with its term (a leader stopped or cut off past its lease writes with a stale
/// one, which the store refuses), and resigns. `ELECTED` and `SECTION` lines are written at
/// once.
async fn candidate_task(shared: Arc<Shared>, c: usize) -> Output {
    let args = &shared.args;
    let mut rng = fastrand::Rng::with_seed(args.seed ^ 0x1ead ^ ((c as u64) << 40));
    let (on, client) = &shared.clients[c];
    let key = leader_key(on);
    let ttl_ms = u64::try_from(args.ttl.as_millis()).unwrap_or(u64::MAX);
    let mut out = Output::default();
    while !done(&shared) {
        let campaign = client
            .leader(key.as_str())
            .ttl(args.ttl)
            .wait(args.ttl * CAMPAIGN_TTLS)
            .campaign();
        let lead = tokio::select! {
            lead = campaign => lead,
            () = run_over(&shared) => break,
        };
        let lead = match lead {
            Ok(lead) => lead,
            Err(e) => {
                *out.errors.entry(variant_name(&e)).or_default() += 1;
                if !e.is_busy() {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                continue;
            }
        };
        let elected = Line::Elected {
            key: key.clone(),
            term: lead.term(),
            at_us: now_us(),
        };
        if let Err(e) = shared.journal(&[elected]) {
            out.lines.push(Line::Panic(e));
            break;
        }
        let held = Held {
            client: c,
            key: &key,
            kind: SectionKind::Lock,
        };
        let hold_ms = rng.u64(ttl_ms * 2..=ttl_ms * TERM_TTLS);
        let guard = Holding::Leader(lead);
        let line = section(&shared, held, guard, hold_ms, &mut rng, &mut out.errors).await;
        match shared.journal(&[line]) {
            Ok(()) => {
                shared.journaled.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                out.lines.push(Line::Panic(e));
                break;
            }
        }
    }
    out
}

/// How one waiting-mix request ended, besides a grant.
enum Ended {
    Granted(LockGuard),
    Failed(LockError),
    /// Our timeout around `acquire`, or the end of the run.
    Cancelled,
}

/// One of the `--waiters` tasks waiting for waiting key `k` of client `c`: requests with
/// a budget of [`WAIT_BUDGET_TTLS`] ttl, one in [`CANCEL_ONE_IN`] cancelled before it;
/// holds of 5–50 ms, one in 200 of ½–1 ttl (across renewals); up to 20 ms between.
async fn waiting_task(shared: Arc<Shared>, c: usize, k: u64, n: u64) -> Output {
    let args = &shared.args;
    let mut rng =
        fastrand::Rng::with_seed(args.seed ^ 0x3a17 ^ ((c as u64) << 48) ^ (k << 40) ^ (n << 32));
    let (on, client) = &shared.clients[c];
    let key = format!("soak:{on}:wait:{k}");
    let min_replicas = if *on == "single" {
        0
    } else {
        args.min_replicas
    };
    let budget = args.wait_ttl * WAIT_BUDGET_TTLS;
    let wait_ttl_ms = u64::try_from(args.wait_ttl.as_millis()).unwrap_or(u64::MAX);
    let budget_ms = wait_ttl_ms * u64::from(WAIT_BUDGET_TTLS);
    let mut out = Output::default();
    let mut waits = Waits::default();
    while !done(&shared) {
        let cancel_after = (rng.u64(..CANCEL_ONE_IN) == 0)
            .then(|| Duration::from_millis(rng.u64(50..=budget_ms / 2)));
        let mut request = client
            .lock(key.as_str())
            .ttl(args.wait_ttl)
            .wait(budget)
            .min_replicas(min_replicas)
            .fenced();
        if k.is_multiple_of(2) {
            request = request.fair();
        }
        let start_us = now_us();
        let started = Instant::now();
        let ended = tokio::select! {
            result = async {
                match cancel_after {
                    Some(after) => tokio::time::timeout(after, request.acquire()).await.ok(),
                    None => Some(request.acquire().await),
                }
            } => match result {
                Some(Ok(guard)) => Ended::Granted(guard),
                Some(Err(e)) => Ended::Failed(e),
                None => Ended::Cancelled,
            },
            () = run_over(&shared) => Ended::Cancelled,
        };
        waits.requests += 1;
        waits.waited_us += u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        match ended {
            Ended::Granted(guard) => {
                waits.grants += 1;
                let hold_ms = if rng.u64(..200) == 0 {
                    rng.u64(wait_ttl_ms / 2..=wait_ttl_ms)
                } else {
                    rng.u64(5..=50)
                };
                let held = Held {
                    client: c,
                    key: &key,
                    kind: SectionKind::Lock,
                };
                let guard = Holding::Guard(guard);
                let line = section(&shared, held, guard, hold_ms, &mut rng, &mut out.errors).await;
                out.lines.push(line);
            }
            Ended::Failed(e) => {
                *out.errors.entry(variant_name(&e)).or_default() += 1;
                if e.is_busy() {
                    waits.busy += 1;
                    let gave_up = GaveUp {
                        worker: 0,
                        key: 0,
                        start_us,
                        end_us: now_us(),
                    };
                    out.lines.push(gave_up.line(&key));
                } else {
                    waits.errors += 1;
                }
            }
            Ended::Cancelled => waits.cancelled += 1,
        }
        tokio::time::sleep(Duration::from_millis(rng.u64(0..=20))).await;
    }
    out.lines.push(Line::Waits { key, waits });
    out
}
