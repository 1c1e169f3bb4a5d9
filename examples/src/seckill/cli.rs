//! The command line of the `seckill` example (clap).

use clap::Parser;

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
    /// The database of vouchers and orders (`--database`, `DATABASE_URL`); `None` for a
    /// SQLite file made for the run.
    pub database: Option<String>,
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
            database: None,
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
        /// The run's configuration; `redis` and `database` are always set.
        config: Config,
        /// Which share of the requests to send.
        index: u64,
    },
}

/// The flash sale: one order per user and no oversold stock, across worker processes, with
/// and without the locks.
#[derive(Debug, Parser)]
#[command(name = "seckill")]
struct Args {
    /// Run the same order logic without the locks, to see the anomalies.
    #[arg(long)]
    no_lock: bool,
    /// Distinct users.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..))]
    users: u64,
    /// Stock of the voucher.
    #[arg(long, default_value_t = 100)]
    stock: u64,
    /// Concurrent order requests per user.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..))]
    requests: u64,
    /// Worker processes the requests are spread over.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=64))]
    workers: u64,
    /// The Redis to use [default: $REDIS_URL, else a local redis-server, else in-memory].
    #[arg(long, value_name = "URL")]
    redis: Option<String>,
    /// The database of vouchers and orders: `sqlite://<file>` or `postgres://…` [default: a
    /// SQLite file made for the run].
    #[arg(long, value_name = "URL", env = "DATABASE_URL")]
    database: Option<String>,
    /// The voucher on sale.
    #[arg(long, default_value_t = 1, hide = true)]
    voucher: u64,
    /// Run as worker INDEX of a parent's sale (started by the parent).
    #[arg(long, value_name = "INDEX", hide = true, requires_all = ["redis", "database"])]
    worker: Option<u64>,
}

/// Parses the command line (the program name first). `--help` and mistakes come back as
/// clap's error, whose `exit()` prints them.
pub fn parse_args<I, S>(args: I) -> Result<Command, clap::Error>
where
    I: IntoIterator<Item = S>,
    S: Into<std::ffi::OsString> + Clone,
{
    let args = Args::try_parse_from(args)?;
    let config = Config {
        stock: args.stock,
        users: args.users,
        requests: args.requests,
        workers: args.workers,
        lock: !args.no_lock,
        redis: args.redis,
        database: args.database,
        voucher_id: args.voucher,
    };
    Ok(match args.worker {
        Some(index) => Command::Worker { config, index },
        None => Command::Run(config),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn parse(line: &str) -> Result<Command, clap::Error> {
        parse_args(std::iter::once("seckill").chain(line.split_whitespace()))
    }

    #[test]
    fn flags_parse() {
        let Command::Run(c) = parse("--no-lock --users 7 --stock 0").unwrap() else {
            panic!("not a run");
        };
        assert_eq!((c.lock, c.users, c.stock, c.workers), (false, 7, 0, 4));
        assert!(parse("--users 0").is_err());
        assert!(parse("--workers 65").is_err());
        assert!(parse("--bogus").is_err());
        assert!(parse("--worker 1").is_err(), "a worker needs --redis");
        assert!(
            parse("--worker 1 --redis redis://x/").is_err()
                || std::env::var_os("DATABASE_URL").is_some(),
            "a worker needs --database"
        );
        assert_eq!(
            parse("--worker 1 --redis redis://x/ --database sqlite://d.db").unwrap(),
            Command::Worker {
                config: Config {
                    redis: Some("redis://x/".into()),
                    database: Some("sqlite://d.db".into()),
                    ..Config::default()
                },
                index: 1
            }
        );
        let help = parse("--help").unwrap_err();
        assert_eq!(help.kind(), clap::error::ErrorKind::DisplayHelp);
        assert!(help.to_string().contains("--no-lock"));
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
}
