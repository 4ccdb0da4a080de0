//! Opening the database a `DATABASE_URL` names: the pools, their timeouts, SQLite's WAL,
//! migrations applied before anything else runs. A failure here is one line that
//! says which database and why, with any password left out.

use super::db::{Db, one_line};
use crate::store::StoreError;
use crate::store::file_lock::FileLock;
use crate::store::migrations::{migrate_error, migrator};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{ConnectOptions, Connection};
use std::str::FromStr;
use std::time::Duration;

/// How long a SQLite writer waits for another (several workers may share one file).
const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long to wait for a connection, including the first one: an unreachable database fails
/// after this.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);
/// A PostgreSQL that does not answer fails a request within this (a 503 the client may retry)
/// instead of holding it for [`ACQUIRE_TIMEOUT`].
const PG_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(2);
/// SQLite serializes writers, so a few connections serve the concurrent readers.
const SQLITE_CONNECTIONS: u32 = 4;
const PG_CONNECTIONS: u32 = 8;

/// A SQLite store's pools: the readers', the writer's, and the lock file writers of several
/// processes take turns with (none for an in-memory database, whose one connection is both).
pub(super) struct Sqlite {
    pub readers: Db,
    /// The store writer's own connection: in the readers' pool its every batch queued behind
    /// the reads of every run starting meanwhile, and the file sat idle while it waited.
    pub writer: Db,
    pub file_lock: Option<FileLock>,
}

pub(super) async fn sqlite(url: &str, shown: &str) -> Result<Sqlite, StoreError> {
    let options = SqliteConnectOptions::from_str(url)
        .map_err(|e| StoreError::BadUrl(format!("{shown}: {}", one_line(&e.to_string()))))?
        .create_if_missing(true)
        .busy_timeout(SQLITE_BUSY_TIMEOUT)
        .synchronous(SqliteSynchronous::Normal)
        // A multi-row upsert inside a transaction keeps a statement journal; on a temp file that
        // was a write and a read of the file system per statement of every batch.
        .pragma("temp_store", "memory")
        .disable_statement_logging();
    let unreachable = |e: sqlx::Error| {
        StoreError::Unavailable(format!("cannot open {shown}: {}", one_line(&e.to_string())))
    };
    if is_memory(url) {
        // Each connection to `:memory:` would be its own database: keep exactly one, forever.
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(options)
            .await
            .map_err(unreachable)?;
        migrator().run(&pool).await.map_err(migrate_error)?;
        super::search::ensure_sqlite(&pool).await?;
        return Ok(Sqlite {
            readers: Db::Sqlite(pool.clone()),
            writer: Db::Sqlite(pool),
            file_lock: None,
        });
    }
    let path = options.get_filename().to_path_buf();
    let cannot_open = |why: String| StoreError::Unavailable(format!("cannot open {shown}: {why}"));
    if let Some(dir) = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty() && !d.is_dir())
    {
        return Err(cannot_open(format!(
            "the directory {} does not exist",
            dir.display()
        )));
    }
    let file_lock = FileLock::open(&path).map_err(cannot_open)?;
    let lock = file_lock.lock().await?;
    // WAL is a property of the file and switching to it needs the database to itself, so one
    // connection sets it, under the lock, before the pool opens.
    let first = SqlitePoolOptions::new()
        .max_connections(1)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .connect_with(options.clone().journal_mode(SqliteJournalMode::Wal))
        .await
        .map_err(unreachable)?;
    migrator().run(&first).await.map_err(migrate_error)?;
    super::search::ensure_sqlite(&first).await?;
    first.close().await;
    drop(lock);
    let pool = |connections, options: SqliteConnectOptions| {
        SqlitePoolOptions::new()
            .max_connections(connections)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            // A ping proves nothing of a file the process has open, and it was a round trip to
            // the connection's thread, and back, at every read of every run.
            .test_before_acquire(false)
            .after_release(|conn, _| Box::pin(async move { Ok(!conn.is_in_transaction()) }))
            .connect_with(options)
    };
    // The writer checkpoints the WAL itself, outside the file's turn (`writer`): the commit that
    // crossed SQLite's threshold did it inside, while every writer of the file waited.
    let writer = options.clone().pragma("wal_autocheckpoint", "0");
    Ok(Sqlite {
        readers: Db::Sqlite(
            pool(SQLITE_CONNECTIONS, options)
                .await
                .map_err(unreachable)?,
        ),
        writer: Db::Sqlite(pool(1, writer).await.map_err(unreachable)?),
        file_lock: Some(file_lock),
    })
}

fn is_memory(url: &str) -> bool {
    let rest = url.trim_start_matches("sqlite:").trim_start_matches("//");
    rest.starts_with(":memory:") || url.contains("mode=memory")
}

pub(super) async fn postgres(url: &str, shown: &str) -> Result<Db, StoreError> {
    let options = PgConnectOptions::from_str(url)
        .map_err(|e| StoreError::BadUrl(format!("{shown}: {}", one_line(&e.to_string()))))?
        .application_name("freeway")
        .disable_statement_logging();
    let unreachable =
        |why: String| StoreError::Unavailable(format!("cannot reach {shown}: {}", one_line(&why)));
    // One direct connection first: the pool would retry a refused connection until its timeout
    // and then report only the timeout, not why.
    let probe = tokio::time::timeout(ACQUIRE_TIMEOUT, options.connect())
        .await
        .map_err(|_| unreachable(format!("no answer within {} s", ACQUIRE_TIMEOUT.as_secs())))?
        .map_err(|e| unreachable(e.to_string()))?;
    probe
        .close()
        .await
        .map_err(|e| unreachable(e.to_string()))?;
    let pool = PgPoolOptions::new()
        .max_connections(PG_CONNECTIONS)
        .acquire_timeout(PG_ACQUIRE_TIMEOUT)
        .after_release(|conn, _| Box::pin(async move { Ok(!conn.is_in_transaction()) }))
        .connect_with(options)
        .await
        .map_err(|e| unreachable(e.to_string()))?;
    // sqlx's migrator holds a PostgreSQL advisory lock while it works, so replicas starting at
    // once apply each migration exactly once.
    migrator().run(&pool).await.map_err(migrate_error)?;
    super::search::ensure_postgres(&pool).await?;
    Ok(Db::Postgres(pool))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_urls_are_recognised() {
        assert!(is_memory("sqlite::memory:"));
        assert!(is_memory("sqlite://:memory:"));
        assert!(is_memory("sqlite://x.db?mode=memory"));
        assert!(!is_memory("sqlite://freeway.db"));
    }
}
