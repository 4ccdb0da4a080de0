//! What every file of the SQL store shares, below all of them: which driver a pool is
//! (`Db`, and `on_db!` to run the same SQL on either), the write transaction, and how a driver's
//! error and a number become the store's.

use crate::store::StoreError;
use sqlx::postgres::PgPool;
use sqlx::sqlite::SqlitePool;
use sqlx::{Postgres, Sqlite, Transaction};

/// Which database a [`SqlStore`](super::SqlStore) talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

#[derive(Clone)]
pub(in crate::store) enum Db {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// Run `$body` with `$pool` bound to the store's pool, whichever driver it is.
macro_rules! on_db {
    ($store:expr, |$pool:ident| $body:expr) => {
        match &$store.db {
            $crate::store::sql::db::Db::Sqlite($pool) => $body,
            $crate::store::sql::db::Db::Postgres($pool) => $body,
        }
    };
}
pub(in crate::store) use on_db;

/// A transaction that writes: SQLite takes the write lock at `BEGIN IMMEDIATE`, so a transaction
/// never has to upgrade a read lock (which fails at once instead of waiting when another writer
/// got in between); PostgreSQL locks rows as it goes.
pub(in crate::store) trait WriteTx {
    type Db: sqlx::Database;
    async fn write_tx(&self) -> Result<Transaction<'static, Self::Db>, StoreError>;
}

impl WriteTx for SqlitePool {
    type Db = Sqlite;
    async fn write_tx(&self) -> Result<Transaction<'static, Sqlite>, StoreError> {
        self.begin_with("BEGIN IMMEDIATE").await.map_err(db_error)
    }
}

impl WriteTx for PgPool {
    type Db = Postgres;
    async fn write_tx(&self) -> Result<Transaction<'static, Postgres>, StoreError> {
        self.begin().await.map_err(db_error)
    }
}

/// An error text on one line, as every error of the store is reported.
pub(in crate::store) fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

pub(in crate::store) fn db_error(e: sqlx::Error) -> StoreError {
    let text = one_line(&e.to_string());
    match e {
        sqlx::Error::ColumnNotFound(_)
        | sqlx::Error::ColumnDecode { .. }
        | sqlx::Error::ColumnIndexOutOfBounds { .. }
        | sqlx::Error::Decode(_)
        | sqlx::Error::TypeNotFound { .. } => StoreError::Corrupt(text),
        _ => StoreError::Unavailable(text),
    }
}

/// Now, as the BIGINT every time column holds.
pub(in crate::store) fn now_ms() -> Result<i64, StoreError> {
    to_i64(crate::clock::epoch_ms(), "now")
}

/// A count or a time for a BIGINT column.
pub(crate) fn to_i64<T: TryInto<i64> + Copy + std::fmt::Display>(
    v: T,
    what: &str,
) -> Result<i64, StoreError> {
    v.try_into().map_err(|_| {
        StoreError::Invalid(format!("{what} = {v} does not fit a signed 64-bit column"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_one_line() {
        assert_eq!(one_line("a\nb\r\n  c "), "a b c");
    }
}
