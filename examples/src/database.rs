//! The examples' SQL databases through sqlx: SQLite by default (a file, nothing to install),
//! PostgreSQL when the URL names one, and what both need around them (a bound on every
//! statement, a scratch file that goes away with the run).

use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sqlx::AnyPool;
use sqlx::Executor as _;
use sqlx::any::{AnyPoolOptions, install_default_drivers};

/// How long one statement (or getting a connection for it) may take before it fails.
pub const STATEMENT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long SQLite waits for another connection's write to finish before it answers busy:
/// the instances' transactions queue on the one file.
const SQLITE_BUSY_TIMEOUT_MS: u32 = 5_000;

/// A database that failed, refused or did not answer, told as what was being done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatabaseError(String);

impl fmt::Display for DatabaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl DatabaseError {
    /// An error saying `what` happened.
    pub fn new(what: impl Into<String>) -> Self {
        Self(what.into())
    }
}

impl std::error::Error for DatabaseError {}

/// The databases the examples speak to, for what their SQL does not share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// SQLite: one file, writers taking turns.
    Sqlite,
    /// PostgreSQL.
    Postgres,
}

impl Dialect {
    /// The dialect of a `sqlite:` or `postgres:` URL.
    pub fn of(url: &str) -> Result<Self, DatabaseError> {
        if url.starts_with("sqlite:") {
            Ok(Self::Sqlite)
        } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            Ok(Self::Postgres)
        } else {
            Err(DatabaseError(format!(
                "`{}` is not a database URL the examples know: use `sqlite://<file>` or \
                 `postgres://<user>@<host>/<database>`",
                crate::redact(url)
            )))
        }
    }
}

/// A pool of up to `connections` on the database at `url` (`sqlite://<file>?mode=rwc`, or
/// `postgres://…`), with SQLite told to wait its turn to write rather than answer busy.
pub async fn connect(url: &str, connections: u32) -> Result<(AnyPool, Dialect), DatabaseError> {
    let dialect = Dialect::of(url)?;
    install_default_drivers();
    let pool = AnyPoolOptions::new()
        .max_connections(connections)
        .acquire_timeout(STATEMENT_TIMEOUT)
        .after_connect(move |conn, _| {
            Box::pin(async move {
                if dialect == Dialect::Sqlite {
                    conn.execute(&*format!("PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}"))
                        .await?;
                }
                Ok(())
            })
        })
        .connect(url);
    let doing = format!("connecting to {}", crate::redact(url));
    Ok((bounded(&doing, pool).await?, dialect))
}

/// `step` within [`STATEMENT_TIMEOUT`], its error or its silence told as what it was doing.
pub async fn bounded<T>(
    step: &str,
    future: impl Future<Output = Result<T, sqlx::Error>>,
) -> Result<T, DatabaseError> {
    match tokio::time::timeout(STATEMENT_TIMEOUT, future).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(DatabaseError(format!("{step}: {e}"))),
        Err(_) => Err(DatabaseError(format!(
            "{step}: the database did not answer within {STATEMENT_TIMEOUT:?}"
        ))),
    }
}

/// A number as SQL's `BIGINT`.
pub fn bigint(value: u64) -> Result<i64, DatabaseError> {
    i64::try_from(value).map_err(|_| DatabaseError(format!("{value} does not fit a BIGINT column")))
}

/// A `BIGINT` read back as the unsigned number it was written from.
pub fn unsigned(value: i64) -> Result<u64, DatabaseError> {
    u64::try_from(value).map_err(|_| DatabaseError(format!("{value} read where none is below 0")))
}

/// Column `index` of `row` as an `i64`.
pub fn column(row: &sqlx::any::AnyRow, index: usize) -> Result<i64, DatabaseError> {
    use sqlx::Row as _;
    row.try_get::<i64, _>(index)
        .map_err(|e| DatabaseError(format!("reading column {index}: {e}")))
}

/// A SQLite file made for one run, in a directory of its own that goes with it.
#[derive(Debug)]
pub struct ScratchDatabase {
    dir: PathBuf,
}

impl ScratchDatabase {
    /// A fresh directory under the system's temporary one.
    pub fn new() -> std::io::Result<Self> {
        static MADE: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "rlock-example-{}-{}",
            std::process::id(),
            MADE.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir)?;
        Ok(Self { dir })
    }

    /// The database to use: `named` when given, else a scratch file made now (returned, to
    /// be kept as long as the database is used).
    pub fn unless_named(named: Option<String>) -> std::io::Result<(String, Option<Self>)> {
        Ok(match named {
            Some(url) => (url, None),
            None => {
                let scratch = Self::new()?;
                (scratch.url(), Some(scratch))
            }
        })
    }

    /// The URL of its database file (made on first connection).
    pub fn url(&self) -> String {
        format!(
            "sqlite://{}?mode=rwc",
            self.dir.join("example.db").display()
        )
    }
}

impl Drop for ScratchDatabase {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn urls_name_their_dialect_and_never_show_a_password() {
        assert_eq!(Dialect::of("sqlite://x.db").unwrap(), Dialect::Sqlite);
        assert_eq!(
            Dialect::of("postgres://u@127.0.0.1/db").unwrap(),
            Dialect::Postgres
        );
        let err = Dialect::of("mysql://u:secret@h/db")
            .unwrap_err()
            .to_string();
        assert!(err.contains("***@h/db") && !err.contains("secret"), "{err}");
    }

    #[test]
    fn numbers_beyond_a_bigint_are_refused_not_wrapped() {
        assert_eq!(bigint(7).unwrap(), 7);
        assert!(bigint(u64::MAX).unwrap_err().to_string().contains("BIGINT"));
        assert!(unsigned(-1).is_err());
    }
}
