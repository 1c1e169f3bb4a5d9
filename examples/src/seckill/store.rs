//! Where vouchers and orders live: a SQL database through sqlx, SQLite by default (a file,
//! nothing to install) or PostgreSQL when the URL names one.
//!
//! ```sql
//! seckill_vouchers (id BIGINT PRIMARY KEY, stock BIGINT NOT NULL)
//! seckill_orders   (id <generated> PRIMARY KEY, voucher_id BIGINT NOT NULL, user_id BIGINT NOT NULL)
//! ```
//!
//! There is no unique constraint on `(voucher_id, user_id)`: one order per user is the
//! lock's job here, as it is for every rule an index cannot express (at most three orders
//! per user, one order per household). The index on the pair is there for the check's read.

use sqlx::AnyPool;
use sqlx::Executor as _;

use super::OrderError;
use crate::database::{self, Dialect, bigint, bounded, column, unsigned};

/// The shop's tables, shared by every instance through one database.
#[derive(Debug, Clone)]
pub struct Store {
    pool: AnyPool,
    dialect: Dialect,
    url: String,
}

impl Store {
    /// A store on the database at `url` (`sqlite://<file>?mode=rwc`, or `postgres://…`).
    /// Its tables are made by [`reset`](Self::reset).
    pub async fn connect(url: &str) -> Result<Self, OrderError> {
        let (pool, dialect) = database::connect(url, 8).await?;
        Ok(Self {
            pool,
            dialect,
            url: url.to_owned(),
        })
    }

    /// The database's URL, to hand to another instance (a worker process).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Which database it is.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// Makes the tables if missing, and puts the voucher on sale with `stock`, deleting its
    /// earlier orders.
    pub async fn reset(&self, voucher_id: u64, stock: u64) -> Result<(), OrderError> {
        let order_id = match self.dialect {
            // SQLite's WAL lets the instances read while one writes.
            Dialect::Sqlite => {
                bounded("PRAGMA", self.pool.execute("PRAGMA journal_mode = WAL")).await?;
                "INTEGER PRIMARY KEY AUTOINCREMENT"
            }
            Dialect::Postgres => "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
        };
        let schema = [
            "CREATE TABLE IF NOT EXISTS seckill_vouchers (id BIGINT PRIMARY KEY, stock BIGINT \
             NOT NULL)"
                .to_owned(),
            format!(
                "CREATE TABLE IF NOT EXISTS seckill_orders (id {order_id}, voucher_id BIGINT NOT \
                 NULL, user_id BIGINT NOT NULL)"
            ),
            "CREATE INDEX IF NOT EXISTS seckill_orders_by_user ON seckill_orders (voucher_id, \
             user_id)"
                .to_owned(),
        ];
        for statement in &schema {
            bounded("making the tables", self.pool.execute(statement.as_str())).await?;
        }
        let (voucher, stock) = (bigint(voucher_id)?, bigint(stock)?);
        let mut tx = bounded("BEGIN", self.pool.begin()).await?;
        bounded(
            "deleting the orders",
            sqlx::query("DELETE FROM seckill_orders WHERE voucher_id = $1")
                .bind(voucher)
                .execute(&mut *tx),
        )
        .await?;
        bounded(
            "deleting the voucher",
            sqlx::query("DELETE FROM seckill_vouchers WHERE id = $1")
                .bind(voucher)
                .execute(&mut *tx),
        )
        .await?;
        bounded(
            "putting the voucher on sale",
            sqlx::query("INSERT INTO seckill_vouchers (id, stock) VALUES ($1, $2)")
                .bind(voucher)
                .bind(stock)
                .execute(&mut *tx),
        )
        .await?;
        bounded("COMMIT", tx.commit()).await?;
        Ok(())
    }

    /// The remaining stock, `None` for an unknown voucher.
    pub async fn stock(&self, voucher_id: u64) -> Result<Option<i64>, OrderError> {
        let row = bounded(
            "reading the stock",
            sqlx::query("SELECT stock FROM seckill_vouchers WHERE id = $1")
                .bind(bigint(voucher_id)?)
                .fetch_optional(&self.pool),
        )
        .await?;
        Ok(row.map(|row| column(&row, 0)).transpose()?)
    }

    /// Whether the user has an order for the voucher: the check the lock makes safe.
    pub async fn has_ordered(&self, voucher_id: u64, user_id: u64) -> Result<bool, OrderError> {
        let count = self
            .count(
                "reading the user's orders",
                "SELECT COUNT(*) FROM seckill_orders WHERE voucher_id = $1 AND user_id = $2",
                &[voucher_id, user_id],
            )
            .await?;
        Ok(count > 0)
    }

    /// In one transaction, takes one from the stock if any is left and records the order;
    /// returns the order's number. The stock is taken by a conditional `UPDATE`, which the
    /// database runs atomically: stock is never oversold, lock or not.
    pub async fn create_order(&self, voucher_id: u64, user_id: u64) -> Result<u64, OrderError> {
        let (voucher, user) = (bigint(voucher_id)?, bigint(user_id)?);
        // The transaction writes first: SQLite takes its write lock then, waiting its turn
        // (a transaction that read first and wrote second would be refused instead).
        let mut tx = bounded("BEGIN", self.pool.begin()).await?;
        let taken = bounded(
            "taking from the stock",
            sqlx::query(
                "UPDATE seckill_vouchers SET stock = stock - 1 WHERE id = $1 AND stock > 0",
            )
            .bind(voucher)
            .execute(&mut *tx),
        )
        .await?;
        if taken.rows_affected() == 0 {
            bounded("ROLLBACK", tx.rollback()).await?;
            return Err(OrderError::SoldOut);
        }
        let row = bounded(
            "recording the order",
            sqlx::query(
                "INSERT INTO seckill_orders (voucher_id, user_id) VALUES ($1, $2) RETURNING id",
            )
            .bind(voucher)
            .bind(user)
            .fetch_one(&mut *tx),
        )
        .await?;
        let number = unsigned(column(&row, 0)?)?;
        bounded("COMMIT", tx.commit()).await?;
        Ok(number)
    }

    /// The outcome, counted by SQL.
    pub async fn tally(&self, voucher_id: u64) -> Result<Orders, OrderError> {
        let orders = self
            .count(
                "counting the orders",
                "SELECT COUNT(*) FROM seckill_orders WHERE voucher_id = $1",
                &[voucher_id],
            )
            .await?;
        let duplicate_users = self
            .count(
                "counting the users with several orders",
                "SELECT COUNT(*) FROM (SELECT user_id FROM seckill_orders WHERE voucher_id = $1 \
                 GROUP BY user_id HAVING COUNT(*) > 1) AS several",
                &[voucher_id],
            )
            .await?;
        Ok(Orders {
            orders,
            duplicate_users,
            stock_left: self.stock(voucher_id).await?.unwrap_or(0),
        })
    }

    /// A `COUNT(*)` query's answer.
    async fn count(&self, doing: &str, sql: &str, ids: &[u64]) -> Result<u64, OrderError> {
        let mut query = sqlx::query(sql);
        for value in ids {
            query = query.bind(bigint(*value)?);
        }
        let row = bounded(doing, query.fetch_one(&self.pool)).await?;
        Ok(unsigned(column(&row, 0)?)?)
    }
}

/// What the orders table holds for a voucher, counted by SQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Orders {
    /// Orders created.
    pub orders: u64,
    /// Users with more than one order.
    pub duplicate_users: u64,
    /// The voucher's stock column.
    pub stock_left: i64,
}
