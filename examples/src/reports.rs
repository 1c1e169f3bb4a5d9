//! The fencing example's store: reports in a SQL table whose every row keeps the highest
//! fencing token that wrote it, so the database itself refuses a write carrying an older one.
//!
//! ```sql
//! fenced_reports (id BIGINT PRIMARY KEY, body TEXT NOT NULL, fence BIGINT NOT NULL)
//!
//! UPDATE fenced_reports SET body = $2, fence = $3 WHERE id = $1 AND fence < $3
//! ```
//!
//! The comparison is in the `UPDATE`'s own `WHERE`, which the database evaluates on the row
//! it locks for the write: there is no window between reading the newest token and writing,
//! as there would be if the service read the row first and compared in its own code.

use sqlx::{AnyPool, Executor as _};

use crate::database::{self, DatabaseError, bigint, bounded, column, unsigned};

/// What became of a fenced write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    /// The token was the newest the row had seen: the body is written.
    Accepted,
    /// The row had already been written with `newest`, not lower than this write's token:
    /// the database left the row as it was.
    Refused {
        /// The token the row keeps.
        newest: u64,
    },
}

/// A report as the table holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// What was last written.
    pub body: String,
    /// The token of that write (0 before the first).
    pub fence: u64,
}

/// The reports table on one database.
#[derive(Debug, Clone)]
pub struct Reports {
    pool: AnyPool,
}

impl Reports {
    /// The reports on the database at `url` (`sqlite://<file>?mode=rwc`, or `postgres://…`).
    /// Its table is made by [`reset`](Self::reset).
    pub async fn connect(url: &str) -> Result<Self, DatabaseError> {
        let (pool, _) = database::connect(url, 2).await?;
        Ok(Self { pool })
    }

    /// Makes the table if missing, and report `id` empty, never written (token 0).
    pub async fn reset(&self, id: u64) -> Result<(), DatabaseError> {
        bounded(
            "making the reports table",
            self.pool.execute(
                "CREATE TABLE IF NOT EXISTS fenced_reports (id BIGINT PRIMARY KEY, body TEXT NOT \
                 NULL, fence BIGINT NOT NULL)",
            ),
        )
        .await?;
        let id = bigint(id)?;
        bounded(
            "deleting the report",
            sqlx::query("DELETE FROM fenced_reports WHERE id = $1")
                .bind(id)
                .execute(&self.pool),
        )
        .await?;
        bounded(
            "making the report",
            sqlx::query("INSERT INTO fenced_reports (id, body, fence) VALUES ($1, '', 0)")
                .bind(id)
                .execute(&self.pool),
        )
        .await?;
        Ok(())
    }

    /// Writes `body` to report `id` if `fence` is higher than every token it was written
    /// with; else the database refuses it, and the answer says which token the row keeps.
    pub async fn write(&self, id: u64, fence: u64, body: &str) -> Result<Write, DatabaseError> {
        let written = bounded(
            "writing the report",
            sqlx::query(
                "UPDATE fenced_reports SET body = $2, fence = $3 WHERE id = $1 AND fence < $3",
            )
            .bind(bigint(id)?)
            .bind(body)
            .bind(bigint(fence)?)
            .execute(&self.pool),
        )
        .await?;
        if written.rows_affected() > 0 {
            return Ok(Write::Accepted);
        }
        match self.read(id).await? {
            Some(report) => Ok(Write::Refused {
                newest: report.fence,
            }),
            None => Err(DatabaseError::new(format!(
                "writing the report: there is no report {id} (reset makes it)"
            ))),
        }
    }

    /// Report `id`, `None` if there is none.
    pub async fn read(&self, id: u64) -> Result<Option<Report>, DatabaseError> {
        let row = bounded(
            "reading the report",
            sqlx::query("SELECT fence, body FROM fenced_reports WHERE id = $1")
                .bind(bigint(id)?)
                .fetch_optional(&self.pool),
        )
        .await?;
        let Some(row) = row else { return Ok(None) };
        let body = sqlx::Row::try_get::<String, _>(&row, 1)
            .map_err(|e| DatabaseError::new(format!("reading the report's body: {e}")))?;
        Ok(Some(Report {
            body,
            fence: unsigned(column(&row, 0)?)?,
        }))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::database::ScratchDatabase;

    #[tokio::test]
    async fn a_row_refuses_a_token_not_above_the_one_it_keeps() {
        let database = ScratchDatabase::new().unwrap();
        let reports = Reports::connect(&database.url()).await.unwrap();
        reports.reset(1).await.unwrap();
        assert_eq!(reports.write(1, 5, "five").await.unwrap(), Write::Accepted);
        assert_eq!(
            reports.write(1, 5, "five again").await.unwrap(),
            Write::Refused { newest: 5 }
        );
        assert_eq!(
            reports.write(1, 4, "four").await.unwrap(),
            Write::Refused { newest: 5 }
        );
        assert_eq!(reports.write(1, 6, "six").await.unwrap(), Write::Accepted);
        let kept = reports.read(1).await.unwrap().unwrap();
        assert_eq!((kept.fence, kept.body.as_str()), (6, "six"));
        assert!(reports.write(2, 1, "nowhere").await.is_err());
    }
}
