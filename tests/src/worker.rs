//! The command line of the worker program (`src/bin/worker/`), one OS process that locks on
//! a test's behalf, so that the test can pause (SIGSTOP) or kill it. The program parses it;
//! the harness ([`crate::child`], [`crate::workers`]) writes it with each role's `args`.
//! Every role speaks the line protocol of [`crate::protocol`].
//!
//! ```text
//! worker hold    --redis URL --key K --ttl-ms T [--renew] [--kind lock|read|write|permit] [--permits N] [--take-over TOKEN]
//! worker body    --redis URL --id N --body-ms B [--renew] [--on-lost abort|continue]
//! worker contend --redis URL --key K --ttl-ms T --wait-ms W [--tasks N] [--iterations M] …
//! ```

/// The worker program's command line.
#[derive(Debug, clap::Parser)]
#[command(
    name = "worker",
    about = "One locking process of a test, driven line by line."
)]
pub struct Cli {
    /// What it does.
    #[command(subcommand)]
    pub role: Role,
}

/// What a worker does.
#[derive(Debug, clap::Subcommand)]
pub enum Role {
    /// Take one lock with the manual API and hold it until told to release it.
    Hold(Hold),
    /// Run one `#[distributed_lock]` body.
    Body(Body),
    /// Contend for one lock from several tasks, recording every critical section.
    Contend(Contend),
}

/// `hold`: prints `ACQUIRED <token> <fence>` (once it holds, or has taken over with
/// `--take-over`), then answers the commands it reads on stdin (`release`, `lost?`,
/// `wait-lost`, `hand-over`); exits after `release`, or with status 2 on any unexpected
/// error.
#[derive(Debug, Clone, clap::Args)]
pub struct Hold {
    /// The Redis to lock on.
    #[arg(long)]
    pub redis: String,
    /// The lock's key.
    #[arg(long)]
    pub key: String,
    /// The lease, in ms.
    #[arg(long)]
    pub ttl_ms: u64,
    /// Let the watchdog renew the lease.
    #[arg(long)]
    pub renew: bool,
    /// What it holds of the key.
    #[arg(long, value_enum, default_value = "lock")]
    pub kind: HoldKind,
    /// The semaphore's permits, for `--kind permit`.
    #[arg(long, default_value_t = 1)]
    pub permits: u32,
    /// Take over the hold another process handed over (`HoldToken`'s text) instead of
    /// acquiring one: its kind, key and lease are the token's.
    #[arg(long)]
    pub take_over: Option<String>,
}

/// What a `hold` worker holds of its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum HoldKind {
    /// The lock, with a fencing token.
    Lock,
    /// A reader's share of a read-write lock.
    Read,
    /// A read-write lock's write lease, with a fencing token.
    Write,
    /// One permit of a semaphore of `permits` (no fence).
    Permit,
    /// The leadership of the name `key` (`LockClient::leader`), its term as the fence;
    /// renewed whatever `renew` says, as a leader's always is.
    Leader,
}

impl Hold {
    /// Its command line.
    pub fn args(&self) -> Vec<String> {
        let mut args = strings(&["hold", "--redis", &self.redis, "--key", &self.key]);
        args.extend(strings(&["--ttl-ms", &self.ttl_ms.to_string()]));
        if self.renew {
            args.push("--renew".into());
        }
        let kind = match self.kind {
            HoldKind::Lock => "lock",
            HoldKind::Read => "read",
            HoldKind::Write => "write",
            HoldKind::Permit => "permit",
            HoldKind::Leader => "leader",
        };
        args.extend(strings(&[
            "--kind",
            kind,
            "--permits",
            &self.permits.to_string(),
        ]));
        if let Some(token) = &self.take_over {
            args.extend(strings(&["--take-over", token]));
        }
        args
    }
}

/// What a locked body does when its lease ends under it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnLost {
    /// The body is dropped (`on_lost = "abort"`, the default).
    Abort,
    /// The body runs to its end (`on_lost = "continue"`).
    Continue,
}

/// `body`: runs `job:<id>` with a 1 s lease and a body of `body_ms`. Prints `STARTED <fence>`
/// when the body starts, `FINISHED` if it runs to its end, and last `RESULT ok`,
/// `RESULT lost` or `RESULT error <message>`.
#[derive(Debug, Clone, clap::Args)]
pub struct Body {
    /// The Redis to lock on.
    #[arg(long)]
    pub redis: String,
    /// The job: the lock is `job:<id>`.
    #[arg(long)]
    pub id: u64,
    /// How long the body runs, in ms.
    #[arg(long)]
    pub body_ms: u64,
    /// Let the watchdog renew the lease.
    #[arg(long)]
    pub renew: bool,
    /// What the body does when its lease ends.
    #[arg(long, value_enum, default_value = "abort")]
    pub on_lost: OnLost,
}

impl Body {
    /// Its command line.
    pub fn args(&self) -> Vec<String> {
        let on_lost = match self.on_lost {
            OnLost::Abort => "abort",
            OnLost::Continue => "continue",
        };
        let mut args = strings(&["body", "--redis", &self.redis, "--id", &self.id.to_string()]);
        args.extend(strings(&["--body-ms", &self.body_ms.to_string()]));
        args.extend(strings(&["--on-lost", on_lost]));
        if self.renew {
            args.push("--renew".into());
        }
        args
    }
}

/// `contend`: `tasks` tokio tasks each enter the critical section of `key` `iterations`
/// times; each section is a `SECTION` line, acquisitions that failed are `ERRORS` lines, and
/// `DONE` ends the output. `start_us` is taken right after `acquire` returned and `end_us`
/// right before `release`, or when `lost()` fired if it fired first (a holder stops acting on
/// a lost lock). Any error other than `Busy` exits with status 1, and so does a lost lease
/// (unless `ride_outages`).
#[derive(Debug, Clone, clap::Args)]
pub struct Contend {
    /// The Redis to lock on.
    #[arg(long)]
    pub redis: String,
    /// The lock's key.
    #[arg(long)]
    pub key: String,
    /// Tasks contending in the process.
    #[arg(long, default_value_t = 1)]
    pub tasks: usize,
    /// Sections each task enters.
    #[arg(long, default_value_t = 1)]
    pub iterations: usize,
    /// The lease, in ms.
    #[arg(long)]
    pub ttl_ms: u64,
    /// How long an acquisition waits, in ms; one that gives up with `Busy` is retried.
    #[arg(long)]
    pub wait_ms: u64,
    /// A plain Redis key each section increments with a deliberately racy read-sleep-write,
    /// so that two overlapping holders lose an increment. Without it a section sleeps
    /// `hold_ms`: the history alone is checked.
    #[arg(long)]
    pub counter: Option<String>,
    /// How long a section without `counter` lasts, in ms.
    #[arg(long, default_value_t = 1)]
    pub hold_ms: u64,
    /// Skip the lock (no fence on any section): the negative control that shows the checks
    /// catch a broken lock.
    #[arg(long)]
    pub no_lock: bool,
    /// After every S-th section of a task, a *stale* hold: a 30 ms lease, no renewal, whose
    /// holder stalls well past it (a GC pause) before releasing. It records nothing; its late
    /// release must not free the lock of whoever holds it now. 0: none.
    #[arg(long, default_value_t = 0)]
    pub stale_every: usize,
    /// Every E-th section of a task holds the lock across the watchdog's renewal window (1/6
    /// to 1/2 of the ttl) and calls `extend` with a new lease (1/2 to 2 ttl) at a random
    /// moment, racing the renewals; a lease lost meanwhile is an error. 0: none.
    #[arg(long, default_value_t = 0)]
    pub extend_every: usize,
    /// Replica acknowledgements every acquisition asks for.
    #[arg(long, default_value_t = 0)]
    pub min_replicas: u32,
    /// For runs with a failover in the middle: an acquisition that fails with a backend error
    /// is retried after a short pause, and a lease lost in a section, or a release that
    /// fails, is recorded instead of ending the run.
    #[arg(long)]
    pub ride_outages: bool,
    /// Fair waiting (grants in arrival order across processes).
    #[arg(long)]
    pub fair: bool,
}

impl Contend {
    /// One task entering one section of `key` on `redis`, with a lease of `ttl_ms`, waiting
    /// up to `wait_ms`; the other fields as their defaults, to be set by the caller.
    pub fn new(redis: &str, key: &str, ttl_ms: u64, wait_ms: u64) -> Self {
        Contend {
            redis: redis.to_owned(),
            key: key.to_owned(),
            tasks: 1,
            iterations: 1,
            ttl_ms,
            wait_ms,
            counter: None,
            hold_ms: 1,
            no_lock: false,
            stale_every: 0,
            extend_every: 0,
            min_replicas: 0,
            ride_outages: false,
            fair: false,
        }
    }

    /// The sections the process enters in all.
    pub fn sections(&self) -> u64 {
        (self.tasks * self.iterations) as u64
    }

    /// Its command line.
    pub fn args(&self) -> Vec<String> {
        let mut args = strings(&["contend", "--redis", &self.redis, "--key", &self.key]);
        for (flag, value) in [
            ("--tasks", self.tasks.to_string()),
            ("--iterations", self.iterations.to_string()),
            ("--ttl-ms", self.ttl_ms.to_string()),
            ("--wait-ms", self.wait_ms.to_string()),
            ("--hold-ms", self.hold_ms.to_string()),
            ("--stale-every", self.stale_every.to_string()),
            ("--extend-every", self.extend_every.to_string()),
            ("--min-replicas", self.min_replicas.to_string()),
        ] {
            args.extend([flag.to_owned(), value]);
        }
        if let Some(counter) = &self.counter {
            args.extend(strings(&["--counter", counter]));
        }
        for (flag, on) in [
            ("--no-lock", self.no_lock),
            ("--ride-outages", self.ride_outages),
            ("--fair", self.fair),
        ] {
            if on {
                args.push(flag.to_owned());
            }
        }
        args
    }
}

fn strings(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| (*w).to_owned()).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use clap::Parser;

    /// What the harness writes, the program reads back as the same role.
    #[test]
    fn every_role_reads_back_as_written() {
        let parse = |args: Vec<String>| {
            Cli::try_parse_from(std::iter::once("worker".to_owned()).chain(args))
                .unwrap()
                .role
        };
        for kind in [
            HoldKind::Lock,
            HoldKind::Read,
            HoldKind::Write,
            HoldKind::Permit,
        ] {
            let hold = Hold {
                redis: "redis://127.0.0.1:1".into(),
                key: "k".into(),
                ttl_ms: 300,
                renew: true,
                kind,
                permits: 2,
                take_over: None,
            };
            let Role::Hold(back) = parse(hold.args()) else {
                panic!("not hold")
            };
            assert_eq!((back.kind, back.args()), (kind, hold.args()));
        }
        let taker = Hold {
            redis: "redis://127.0.0.1:1".into(),
            key: "k".into(),
            ttl_ms: 300,
            renew: true,
            kind: HoldKind::Lock,
            permits: 1,
            take_over: Some("rlock-hold/1 lock 500 7 c1:4 order:42".into()),
        };
        let Role::Hold(back) = parse(taker.args()) else {
            panic!("not hold")
        };
        assert_eq!(back.take_over, taker.take_over);
        assert_eq!(back.args(), taker.args());
        let body = Body {
            redis: "redis://127.0.0.1:1".into(),
            id: 3,
            body_ms: 1000,
            renew: false,
            on_lost: OnLost::Continue,
        };
        let Role::Body(back) = parse(body.args()) else {
            panic!("not body")
        };
        assert_eq!(back.args(), body.args());
        let contend = Contend {
            counter: Some("c".into()),
            fair: true,
            stale_every: 5,
            ..Contend::new("redis://127.0.0.1:1", "k", 100, 200)
        };
        let Role::Contend(back) = parse(contend.args()) else {
            panic!("not contend")
        };
        assert_eq!(back.args(), contend.args());
        assert_eq!(back.counter.as_deref(), Some("c"));
    }
}
