//! The SQL store of docs/design.md §7: SQLite (one file, WAL) or PostgreSQL, chosen by `DATABASE_URL`.
//!
//! Both backends run the same SQL text (`$n` parameters, `ON CONFLICT`, `RETURNING`), written
//! once in each method and expanded for each driver by `on_db!`, so there is no driver-neutral
//! layer to lose types in. Queries are checked at run time: there is no database at build time.
//!
//! The engine's writes (runs, messages, attempts) go through [`writer`], which commits the writes
//! of many runs in one transaction. Every write transaction takes the write lock first
//! (`BEGIN IMMEDIATE` on SQLite; on PostgreSQL an append takes the conversation's row), so
//! concurrent appends get distinct, ordered positions and a duplicated `(run, key)` is dropped.

use super::file_lock::FileLock;
use super::migrations::{migrate_error, migrator};
use super::{
    Attached, ConnectionInfo, RECENT_RUNS_MAX, StatusCount, Store, StoreError, sort_counts,
};
use crate::budget::Counters;
use crate::chat::{Message, ToolCall, Usage};
use crate::job::RunJob;
use crate::run::{ApprovalRecord, AttemptRecord, Decided, RunRecord, RunState, RunStatus};
use async_trait::async_trait;
use serde::Serialize;
use serde::de::DeserializeOwned;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgRow};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use sqlx::{ConnectOptions, Connection, Postgres, Row, Sqlite, Transaction};
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
/// Pages are read through a mapping of the file rather than copied in by a system call each: with
/// several worker processes writing one file, a connection finds its page cache stale at nearly
/// every transaction and reads again what it touches.
const SQLITE_MMAP_BYTES: u64 = 1 << 30;
/// SQLite serializes writers, so a few connections serve the concurrent readers.
const SQLITE_CONNECTIONS: u32 = 4;
const PG_CONNECTIONS: u32 = 8;

/// Which database a [`SqlStore`] talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// The store on a SQL database. Cloning shares the connection pool.
#[derive(Clone)]
pub struct SqlStore {
    pub(super) db: Db,
    /// Where the engine's writes go: one batching task per store (see [`writer`]).
    writer: Writer,
    /// `DATABASE_URL` without its password, for error lines.
    url: String,
}

#[derive(Clone)]
pub(super) enum Db {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// Run `$body` with `$pool` bound to the store's pool, whichever driver it is.
macro_rules! on_db {
    ($store:expr, |$pool:ident| $body:expr) => {
        match &$store.db {
            $crate::store::sql::Db::Sqlite($pool) => $body,
            $crate::store::sql::Db::Postgres($pool) => $body,
        }
    };
}
pub(super) use on_db;

/// The rows `sql` selects for one key, each decoded by `decode`.
macro_rules! rows_for {
    ($store:expr, $sql:expr, $key:expr, $decode:expr) => {
        on_db!($store, |pool| {
            let rows = sqlx::query($sql)
                .bind($key)
                .fetch_all(pool)
                .await
                .map_err(db_error)?;
            rows.iter().map($decode).collect()
        })
    };
}

/// A transaction that writes: SQLite takes the write lock at `BEGIN IMMEDIATE`, so a transaction
/// never has to upgrade a read lock (which fails at once instead of waiting when another writer
/// got in between); PostgreSQL locks rows as it goes.
pub(super) trait WriteTx {
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

impl std::fmt::Debug for SqlStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlStore").field("url", &self.url).finish()
    }
}

impl SqlStore {
    /// Open the store at `url` (`sqlite://PATH`, `sqlite::memory:` or `postgres://…`) and apply
    /// the migrations. A SQLite file is created when missing and switched to WAL.
    pub async fn open(url: &str) -> Result<SqlStore, StoreError> {
        let shown = crate::connect::redact(url);
        let (db, file_lock) = if url.starts_with("sqlite:") {
            open_sqlite(url, &shown).await?
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            (open_postgres(url, &shown).await?, None)
        } else {
            return Err(StoreError::BadUrl(format!(
                "{shown:?} must start with sqlite: or postgres://"
            )));
        };
        let writer = Writer::spawn(db.clone(), file_lock);
        Ok(SqlStore {
            db,
            writer,
            url: shown,
        })
    }

    pub fn backend(&self) -> Backend {
        match self.db {
            Db::Sqlite(_) => Backend::Sqlite,
            Db::Postgres(_) => Backend::Postgres,
        }
    }

    /// `DATABASE_URL` without its password.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Close every connection (waits for the ones in use).
    pub async fn close(&self) {
        on_db!(self, |pool| pool.close().await)
    }

    /// The migrations recorded as applied, as (version, success).
    pub async fn applied_migrations(&self) -> Result<Vec<(i64, bool)>, StoreError> {
        const SQL: &str = "SELECT version, success FROM _sqlx_migrations ORDER BY version";
        on_db!(self, |pool| {
            let rows = sqlx::query(SQL).fetch_all(pool).await.map_err(db_error)?;
            rows.iter()
                .map(|r| {
                    Ok((
                        r.try_get("version").map_err(db_error)?,
                        r.try_get("success").map_err(db_error)?,
                    ))
                })
                .collect()
        })
    }
}

/// The pool, and the lock file writers take turns with (none for an in-memory database).
async fn open_sqlite(url: &str, shown: &str) -> Result<(Db, Option<FileLock>), StoreError> {
    let options = SqliteConnectOptions::from_str(url)
        .map_err(|e| StoreError::BadUrl(format!("{shown}: {}", one_line(&e.to_string()))))?
        .create_if_missing(true)
        .busy_timeout(SQLITE_BUSY_TIMEOUT)
        .synchronous(SqliteSynchronous::Normal)
        .pragma("mmap_size", SQLITE_MMAP_BYTES.to_string())
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
        return Ok((Db::Sqlite(pool), None));
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
    first.close().await;
    drop(lock);
    let pool = SqlitePoolOptions::new()
        .max_connections(SQLITE_CONNECTIONS)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .after_release(|conn, _| Box::pin(async move { Ok(!conn.is_in_transaction()) }))
        .connect_with(options)
        .await
        .map_err(unreachable)?;
    Ok((Db::Sqlite(pool), Some(file_lock)))
}

fn is_memory(url: &str) -> bool {
    let rest = url.trim_start_matches("sqlite:").trim_start_matches("//");
    rest.starts_with(":memory:") || url.contains("mode=memory")
}

async fn open_postgres(url: &str, shown: &str) -> Result<Db, StoreError> {
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
    Ok(Db::Postgres(pool))
}

/// An error text on one line, as every error of the store is reported.
pub(super) fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

pub(super) fn db_error(e: sqlx::Error) -> StoreError {
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

/// Typed reads of a row, whichever driver it came from.
pub(super) trait Columns {
    fn text(&self, col: &str) -> Result<String, StoreError>;
    fn opt_text(&self, col: &str) -> Result<Option<String>, StoreError>;
    fn int(&self, col: &str) -> Result<i64, StoreError>;
    fn opt_int(&self, col: &str) -> Result<Option<i64>, StoreError>;
}

macro_rules! columns_for {
    ($($row:ty),*) => {$(
        impl Columns for $row {
            fn text(&self, col: &str) -> Result<String, StoreError> {
                self.try_get(col).map_err(db_error)
            }
            fn opt_text(&self, col: &str) -> Result<Option<String>, StoreError> {
                self.try_get(col).map_err(db_error)
            }
            fn int(&self, col: &str) -> Result<i64, StoreError> {
                self.try_get(col).map_err(db_error)
            }
            fn opt_int(&self, col: &str) -> Result<Option<i64>, StoreError> {
                self.try_get(col).map_err(db_error)
            }
        }
    )*};
}
columns_for!(SqliteRow, PgRow);

/// A count or a time for a BIGINT column.
pub(super) fn to_i64<T: TryInto<i64> + Copy + std::fmt::Display>(
    v: T,
    what: &str,
) -> Result<i64, StoreError> {
    v.try_into().map_err(|_| {
        StoreError::Invalid(format!("{what} = {v} does not fit a signed 64-bit column"))
    })
}

fn from_i64<T: TryFrom<i64>>(v: i64, col: &str) -> Result<T, StoreError> {
    T::try_from(v).map_err(|_| StoreError::Corrupt(format!("{col} = {v} is out of range")))
}

fn flag(v: i64, col: &str) -> Result<bool, StoreError> {
    match v {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(StoreError::Corrupt(format!("{col} = {v} is not 0 or 1"))),
    }
}

/// Text as both backends can store it: PostgreSQL refuses NUL in text, and a model's output or a
/// tool's result may carry one; it becomes U+FFFD on either backend, so they agree.
fn clean(text: &str) -> String {
    text.replace('\0', "\u{FFFD}")
}

/// An enum as the text serde gives it (`succeeded`, `rate_limited`, `assistant`…).
fn enum_text<T: Serialize>(v: &T, what: &str) -> Result<String, StoreError> {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => Ok(s),
        _ => Err(StoreError::Invalid(format!("{what} has no text form"))),
    }
}

fn enum_from<T: DeserializeOwned>(s: String, col: &str) -> Result<T, StoreError> {
    serde_json::from_value(serde_json::Value::String(s))
        .map_err(|e| StoreError::Corrupt(format!("{col}: {e}")))
}

fn json_text<T: Serialize>(v: &T, what: &str) -> Result<String, StoreError> {
    serde_json::to_string(v).map_err(|e| StoreError::Invalid(format!("{what}: {e}")))
}

fn json_from<T: DeserializeOwned>(s: &str, col: &str) -> Result<T, StoreError> {
    serde_json::from_str(s).map_err(|e| StoreError::Corrupt(format!("{col}: {e}")))
}

macro_rules! run_columns {
    () => {
        "run_id, user_id, conversation_id, kind, routes, parent_run_id, idempotency_key, status, code, \
         calls, step1_attempts, retried, steps, route_index, input_applied, ambiguous_stop, emitted, \
         snoozes, output, incomplete, prompt_tokens, completion_tokens, total_tokens, pending_tool_call, \
         summary, deadline_ms, created_ms, updated_ms"
    };
}

const SELECT_RUN: &str = concat!("SELECT ", run_columns!(), " FROM runs WHERE run_id = $1");
macro_rules! transcript_of {
    ($conversation:literal) => {
        concat!(
            "SELECT seq, role, content, tool_calls, tool_call_id FROM messages \
             WHERE conversation_id = ",
            $conversation,
            " AND deleted_ms IS NULL"
        )
    };
}
const TRANSCRIPT: &str = concat!(transcript_of!("$1"), " ORDER BY seq");
// The run (none: NULLs) beside each of the conversation's messages (none: NULLs), so a delivery
// starts with one round trip and one read transaction; the run's columns repeat on every row.
const RUN_AND_TRANSCRIPT: &str = concat!(
    "SELECT r.*, m.role, m.content, m.tool_calls, m.tool_call_id FROM (SELECT 1 AS one) AS q \
     LEFT JOIN (SELECT ",
    run_columns!(),
    " FROM runs WHERE run_id = $1) AS r ON TRUE LEFT JOIN (",
    transcript_of!("$2"),
    ") AS m ON TRUE ORDER BY m.seq"
);
// Two texts rather than `$1 IS NULL OR user_id = $1`, which keeps PostgreSQL from using an index.
const RECENT_RUNS: &str = concat!(
    "SELECT ",
    run_columns!(),
    " FROM runs ORDER BY created_ms DESC, run_id DESC LIMIT $1"
);
const RECENT_RUNS_OF_USER: &str = concat!(
    "SELECT ",
    run_columns!(),
    " FROM runs WHERE user_id = $2 ORDER BY created_ms DESC, run_id DESC LIMIT $1"
);
const COUNT_BY_STATUS: &str =
    "SELECT status, code, COUNT(*) AS runs FROM runs GROUP BY status, code";

/// A [`RunRecord`] as the `runs` table holds it.
struct RunRow {
    run_id: String,
    user_id: String,
    conversation_id: String,
    kind: String,
    routes: String,
    parent_run_id: Option<String>,
    idempotency_key: Option<String>,
    status: String,
    code: Option<String>,
    calls: i64,
    step1_attempts: i64,
    retried: i64,
    steps: i64,
    route_index: Option<i64>,
    input_applied: i64,
    ambiguous_stop: i64,
    emitted: i64,
    snoozes: i64,
    output: String,
    incomplete: i64,
    prompt_tokens: i64,
    completion_tokens: i64,
    total_tokens: i64,
    pending_tool_call: Option<String>,
    summary: Option<String>,
    deadline_ms: i64,
    created_ms: i64,
    updated_ms: i64,
}

/// Bind a [`RunRow`] to 28 parameters, in the order of `run_columns!`.
macro_rules! bind_run {
    ($query:expr, $r:expr) => {
        $query
            .bind(&$r.run_id)
            .bind(&$r.user_id)
            .bind(&$r.conversation_id)
            .bind(&$r.kind)
            .bind(&$r.routes)
            .bind(&$r.parent_run_id)
            .bind(&$r.idempotency_key)
            .bind(&$r.status)
            .bind(&$r.code)
            .bind($r.calls)
            .bind($r.step1_attempts)
            .bind($r.retried)
            .bind($r.steps)
            .bind($r.route_index)
            .bind($r.input_applied)
            .bind($r.ambiguous_stop)
            .bind($r.emitted)
            .bind($r.snoozes)
            .bind(&$r.output)
            .bind($r.incomplete)
            .bind($r.prompt_tokens)
            .bind($r.completion_tokens)
            .bind($r.total_tokens)
            .bind(&$r.pending_tool_call)
            .bind(&$r.summary)
            .bind($r.deadline_ms)
            .bind($r.created_ms)
            .bind($r.updated_ms)
    };
}

mod writer;
use writer::{AttemptRow, DecisionRow, MessageRow, Write, Writer};

impl RunRow {
    fn from_record(r: &RunRecord) -> Result<RunRow, StoreError> {
        let s = &r.state;
        Ok(RunRow {
            run_id: r.run_id.clone(),
            user_id: r.user_id.clone(),
            conversation_id: r.conversation_id.clone(),
            kind: r.kind.as_str().to_string(),
            routes: json_text(&r.routes, "routes")?,
            parent_run_id: r.parent_run_id.clone(),
            idempotency_key: r.idempotency_key.clone(),
            status: r.status.as_str().to_string(),
            code: r.code.map(|c| c.as_str().to_string()),
            calls: i64::from(s.counters.calls),
            step1_attempts: i64::from(s.counters.step1_attempts),
            retried: i64::from(s.counters.retried),
            steps: i64::from(s.counters.steps),
            route_index: s
                .route_index
                .map(|i| to_i64(i, "route_index"))
                .transpose()?,
            input_applied: i64::from(s.input_applied),
            ambiguous_stop: i64::from(s.ambiguous_stop),
            emitted: i64::from(s.emitted),
            snoozes: i64::from(s.snoozes),
            output: clean(&r.output),
            incomplete: i64::from(r.incomplete),
            prompt_tokens: to_i64(r.usage.prompt_tokens, "prompt_tokens")?,
            completion_tokens: to_i64(r.usage.completion_tokens, "completion_tokens")?,
            total_tokens: to_i64(r.usage.total_tokens, "total_tokens")?,
            pending_tool_call: r
                .pending_tool_call
                .as_ref()
                .map(|c| json_text(c, "pending_tool_call"))
                .transpose()?,
            summary: r.summary.as_deref().map(clean),
            deadline_ms: to_i64(r.deadline_ms, "deadline_ms")?,
            created_ms: to_i64(r.created_ms, "created_ms")?,
            updated_ms: to_i64(r.updated_ms, "updated_ms")?,
        })
    }

    fn read(row: &impl Columns) -> Result<RunRow, StoreError> {
        Ok(RunRow {
            run_id: row.text("run_id")?,
            user_id: row.text("user_id")?,
            conversation_id: row.text("conversation_id")?,
            kind: row.text("kind")?,
            routes: row.text("routes")?,
            parent_run_id: row.opt_text("parent_run_id")?,
            idempotency_key: row.opt_text("idempotency_key")?,
            status: row.text("status")?,
            code: row.opt_text("code")?,
            calls: row.int("calls")?,
            step1_attempts: row.int("step1_attempts")?,
            retried: row.int("retried")?,
            steps: row.int("steps")?,
            route_index: row.opt_int("route_index")?,
            input_applied: row.int("input_applied")?,
            ambiguous_stop: row.int("ambiguous_stop")?,
            emitted: row.int("emitted")?,
            snoozes: row.int("snoozes")?,
            output: row.text("output")?,
            incomplete: row.int("incomplete")?,
            prompt_tokens: row.int("prompt_tokens")?,
            completion_tokens: row.int("completion_tokens")?,
            total_tokens: row.int("total_tokens")?,
            pending_tool_call: row.opt_text("pending_tool_call")?,
            summary: row.opt_text("summary")?,
            deadline_ms: row.int("deadline_ms")?,
            created_ms: row.int("created_ms")?,
            updated_ms: row.int("updated_ms")?,
        })
    }

    fn into_record(self) -> Result<RunRecord, StoreError> {
        Ok(RunRecord {
            kind: enum_from(self.kind, "kind")?,
            routes: json_from(&self.routes, "routes")?,
            parent_run_id: self.parent_run_id,
            idempotency_key: self.idempotency_key,
            status: enum_from(self.status, "status")?,
            code: self.code.map(|c| enum_from(c, "code")).transpose()?,
            state: RunState {
                counters: Counters {
                    calls: from_i64(self.calls, "calls")?,
                    step1_attempts: from_i64(self.step1_attempts, "step1_attempts")?,
                    retried: flag(self.retried, "retried")?,
                    steps: from_i64(self.steps, "steps")?,
                },
                route_index: self
                    .route_index
                    .map(|i| from_i64(i, "route_index"))
                    .transpose()?,
                input_applied: flag(self.input_applied, "input_applied")?,
                ambiguous_stop: flag(self.ambiguous_stop, "ambiguous_stop")?,
                emitted: flag(self.emitted, "emitted")?,
                snoozes: from_i64(self.snoozes, "snoozes")?,
            },
            output: self.output,
            incomplete: flag(self.incomplete, "incomplete")?,
            usage: Usage {
                prompt_tokens: from_i64(self.prompt_tokens, "prompt_tokens")?,
                completion_tokens: from_i64(self.completion_tokens, "completion_tokens")?,
                total_tokens: from_i64(self.total_tokens, "total_tokens")?,
            },
            pending_tool_call: self
                .pending_tool_call
                .map(|c| json_from(&c, "pending_tool_call"))
                .transpose()?,
            summary: self.summary,
            created_ms: from_i64(self.created_ms, "created_ms")?,
            updated_ms: from_i64(self.updated_ms, "updated_ms")?,
            deadline_ms: from_i64(self.deadline_ms, "deadline_ms")?,
            run_id: self.run_id,
            user_id: self.user_id,
            conversation_id: self.conversation_id,
        })
    }
}

fn message_from(row: &impl Columns) -> Result<Message, StoreError> {
    Ok(Message {
        role: enum_from(row.text("role")?, "role")?,
        content: row.opt_text("content")?,
        tool_calls: match row.opt_text("tool_calls")? {
            Some(calls) => json_from::<Vec<ToolCall>>(&calls, "tool_calls")?,
            None => Vec::new(),
        },
        tool_call_id: row.opt_text("tool_call_id")?,
    })
}

fn attempt_from(row: &impl Columns) -> Result<AttemptRecord, StoreError> {
    Ok(AttemptRecord {
        run_id: row.text("run_id")?,
        n: from_i64(row.int("n")?, "n")?,
        step: from_i64(row.int("step")?, "step")?,
        route: row.text("route")?,
        http_status: row
            .opt_int("http_status")?
            .map(|s| from_i64(s, "http_status"))
            .transpose()?,
        error: row.opt_text("error")?,
        verdict: row
            .opt_text("verdict")?
            .map(|v| enum_from(v, "verdict"))
            .transpose()?,
        retry_hint_ms: row
            .opt_int("retry_hint_ms")?
            .map(|v| from_i64(v, "retry_hint_ms"))
            .transpose()?,
        ratelimit_remaining: row.opt_int("ratelimit_remaining")?,
        provider_name: row.opt_text("provider_name")?,
        latency_ms: from_i64(row.int("latency_ms")?, "latency_ms")?,
        t_ms: from_i64(row.int("t_ms")?, "t_ms")?,
    })
}

fn message_row(
    conversation_id: &str,
    run_id: &str,
    key: &str,
    message: &Message,
) -> Result<MessageRow, StoreError> {
    Ok(MessageRow {
        id: ulid::Ulid::generate().to_string(),
        conversation_id: conversation_id.to_string(),
        run_id: run_id.to_string(),
        key: key.to_string(),
        role: enum_text(&message.role, "role")?,
        content: message.content.as_deref().map(clean),
        tool_calls: match message.tool_calls.is_empty() {
            true => None,
            false => Some(json_text(&message.tool_calls, "tool_calls")?),
        },
        tool_call_id: message.tool_call_id.as_deref().map(clean),
        now: now_ms()?,
    })
}

fn attempt_row(a: &AttemptRecord) -> Result<AttemptRow, StoreError> {
    Ok(AttemptRow {
        run_id: a.run_id.clone(),
        n: i64::from(a.n),
        step: i64::from(a.step),
        route: clean(&a.route),
        http_status: a.http_status.map(i64::from),
        error: a.error.as_deref().map(clean),
        verdict: a.verdict.map(|v| v.as_str().to_string()),
        retry_hint_ms: a
            .retry_hint_ms
            .map(|v| to_i64(v, "retry_hint_ms"))
            .transpose()?,
        ratelimit_remaining: a.ratelimit_remaining,
        provider_name: a.provider_name.as_deref().map(clean),
        latency_ms: to_i64(a.latency_ms, "latency_ms")?,
        t_ms: to_i64(a.t_ms, "t_ms")?,
    })
}

fn decision_row(run_id: &str, tool_call_id: &str, d: &Decided) -> Result<DecisionRow, StoreError> {
    Ok(DecisionRow {
        run_id: run_id.to_string(),
        tool_call_id: tool_call_id.to_string(),
        decision: d.decision.as_str(),
        result: clean(&d.result),
        continuation_run_id: d.continuation_run_id.clone(),
        decided_ms: to_i64(d.decided_ms, "decided_ms")?,
    })
}

fn approval_from(row: &impl Columns) -> Result<ApprovalRecord, StoreError> {
    let decided = match row.opt_text("decision")? {
        None => None,
        Some(decision) => Some(Decided {
            decision: enum_from(decision, "decision")?,
            result: row.opt_text("result")?.unwrap_or_default(),
            continuation_run_id: row.opt_text("continuation_run_id")?.unwrap_or_default(),
            decided_ms: from_i64(row.opt_int("decided_ms")?.unwrap_or_default(), "decided_ms")?,
        }),
    };
    Ok(ApprovalRecord {
        run_id: row.text("run_id")?,
        tool_call: json_from(&row.text("tool_call")?, "tool_call")?,
        created_ms: from_i64(row.int("created_ms")?, "created_ms")?,
        decided,
    })
}

pub(super) fn now_ms() -> Result<i64, StoreError> {
    to_i64(crate::clock::epoch_ms(), "now")
}

impl SqlStore {
    /// Whether the store takes writes now: a probe row rewritten through the writer the runs'
    /// writes go through, so a full disk or a read-only database shows here, not only in runs.
    pub async fn check_writable(&self) -> Result<(), StoreError> {
        let now = now_ms()?;
        self.writer.write(Write::Probe { now }).await
    }
}

#[async_trait]
impl Store for SqlStore {
    async fn connection(&self, id: &str) -> Result<Option<ConnectionInfo>, StoreError> {
        Ok(self.sealed_connection(id).await?.map(|(info, _)| info))
    }

    async fn create_run(&self, run: &RunRecord) -> Result<(), StoreError> {
        let row = Box::new(RunRow::from_record(run)?);
        self.writer.write(Write::CreateRun { row, job: None }).await
    }

    async fn create_queued(&self, job: &RunJob, now_ms: u64) -> Result<(), StoreError> {
        let row = Box::new(RunRow::from_record(&RunRecord::queued(job, now_ms))?);
        let job = Some(json_text(job, "job")?);
        self.writer.write(Write::CreateRun { row, job }).await
    }

    async fn unsettled_jobs(&self, before_ms: u64, limit: u32) -> Result<Vec<String>, StoreError> {
        const SQL: &str = "SELECT j.job FROM runs r JOIN run_jobs j ON j.run_id = r.run_id \
             WHERE r.status IN ('queued', 'delayed', 'running') AND r.updated_ms < $1 \
             ORDER BY r.updated_ms LIMIT $2";
        let before = to_i64(before_ms, "before_ms")?;
        on_db!(self, |pool| {
            sqlx::query(SQL)
                .bind(before)
                .bind(i64::from(limit))
                .fetch_all(pool)
                .await
                .map_err(db_error)?
                .iter()
                .map(|row| row.text("job"))
                .collect::<Result<Vec<_>, _>>()
        })
    }

    async fn discard_queued(&self, run_id: &str) -> Result<(), StoreError> {
        const RUN: &str = "DELETE FROM runs WHERE run_id = $1 AND status = 'queued' AND calls = 0";
        const JOB: &str = "DELETE FROM run_jobs WHERE run_id = $1 \
             AND NOT EXISTS (SELECT 1 FROM runs WHERE runs.run_id = $1)";
        on_db!(self, |pool| {
            let mut tx = pool.write_tx().await?;
            for sql in [RUN, JOB] {
                sqlx::query(sql)
                    .bind(run_id)
                    .execute(&mut *tx)
                    .await
                    .map_err(db_error)?;
            }
            tx.commit().await.map_err(db_error)?;
            Ok(())
        })
    }

    async fn conversation_owner(
        &self,
        conversation_id: &str,
    ) -> Result<Option<String>, StoreError> {
        const SQL: &str = "SELECT user_id FROM conversations WHERE id = $1";
        on_db!(self, |pool| {
            let row = sqlx::query(SQL)
                .bind(conversation_id)
                .fetch_optional(pool)
                .await
                .map_err(db_error)?;
            Ok(row.map(|r| r.opt_text("user_id")).transpose()?.flatten())
        })
    }

    async fn run(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
        on_db!(self, |pool| {
            match sqlx::query(SELECT_RUN)
                .bind(run_id)
                .fetch_optional(pool)
                .await
                .map_err(db_error)?
            {
                Some(row) => Ok(Some(RunRow::read(&row)?.into_record()?)),
                None => Ok(None),
            }
        })
    }

    async fn save_run(&self, run: &RunRecord) -> Result<(), StoreError> {
        self.save_run_with(run, &[]).await
    }

    async fn save_run_with(
        &self,
        run: &RunRecord,
        attached: &[Attached],
    ) -> Result<(), StoreError> {
        let row = Box::new(RunRow::from_record(run)?);
        let approval = match (&run.pending_tool_call, &row.pending_tool_call, run.status) {
            (Some(call), Some(json), RunStatus::AwaitingApproval) => {
                Some((call.id.clone(), json.clone()))
            }
            _ => None,
        };
        let mut writes = Vec::with_capacity(attached.len() + 1);
        for a in attached {
            writes.push(match a {
                Attached::Attempt(attempt) => Write::Attempt(attempt_row(attempt)?),
                Attached::Message { key, message } => Write::Append(message_row(
                    &run.conversation_id,
                    &run.run_id,
                    key,
                    message,
                )?),
                Attached::Decision {
                    tool_call_id,
                    decided,
                } => Write::Decide(decision_row(&run.run_id, tool_call_id, decided)?),
            });
        }
        writes.push(Write::SaveRun { row, approval });
        self.writer.write_all(writes).await?;
        Ok(())
    }

    async fn transcript(&self, conversation_id: &str) -> Result<Vec<Message>, StoreError> {
        rows_for!(self, TRANSCRIPT, conversation_id, message_from)
    }

    async fn run_and_transcript(
        &self,
        run_id: &str,
        conversation_id: &str,
    ) -> Result<(Option<RunRecord>, Vec<Message>), StoreError> {
        on_db!(self, |pool| {
            let rows = sqlx::query(RUN_AND_TRANSCRIPT)
                .bind(run_id)
                .bind(conversation_id)
                .fetch_all(pool)
                .await
                .map_err(db_error)?;
            let run = match rows.first() {
                Some(row) if row.opt_text("run_id")?.is_some() => {
                    Some(RunRow::read(row)?.into_record()?)
                }
                _ => None,
            };
            let mut transcript = Vec::with_capacity(rows.len());
            for row in &rows {
                if row.opt_text("role")?.is_some() {
                    transcript.push(message_from(row)?);
                }
            }
            Ok((run, transcript))
        })
    }

    async fn append_message(
        &self,
        conversation_id: &str,
        run_id: &str,
        key: &str,
        message: &Message,
    ) -> Result<(), StoreError> {
        let row = message_row(conversation_id, run_id, key, message)?;
        self.writer.write(Write::Append(row)).await?;
        Ok(())
    }

    async fn delete_last_assistant_turn(&self, conversation_id: &str) -> Result<(), StoreError> {
        let write = Write::DeleteLastTurn {
            conversation_id: conversation_id.to_string(),
            now: now_ms()?,
        };
        self.writer.write(write).await?;
        Ok(())
    }

    async fn record_attempt(&self, attempt: &AttemptRecord) -> Result<(), StoreError> {
        self.writer
            .write(Write::Attempt(attempt_row(attempt)?))
            .await?;
        Ok(())
    }

    async fn attempts(&self, run_id: &str) -> Result<Vec<AttemptRecord>, StoreError> {
        const SQL: &str = "SELECT run_id, n, step, route, http_status, error, verdict, retry_hint_ms, \
             ratelimit_remaining, provider_name, latency_ms, t_ms FROM attempts WHERE run_id = $1 ORDER BY n";
        rows_for!(self, SQL, run_id, attempt_from)
    }

    async fn record_decision(
        &self,
        run_id: &str,
        tool_call_id: &str,
        decided: &Decided,
    ) -> Result<(), StoreError> {
        let row = decision_row(run_id, tool_call_id, decided)?;
        self.writer.write(Write::Decide(row)).await?;
        Ok(())
    }

    async fn approvals(&self, run_id: &str) -> Result<Vec<ApprovalRecord>, StoreError> {
        const SQL: &str = "SELECT run_id, tool_call, decision, result, continuation_run_id, \
             created_ms, decided_ms FROM approvals WHERE run_id = $1 ORDER BY created_ms, tool_call_id";
        rows_for!(self, SQL, run_id, approval_from)
    }

    async fn recent_runs(
        &self,
        limit: u32,
        user_id: Option<&str>,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let limit = i64::from(limit.min(RECENT_RUNS_MAX));
        on_db!(self, |pool| {
            let query = match user_id {
                Some(user) => sqlx::query(RECENT_RUNS_OF_USER).bind(limit).bind(user),
                None => sqlx::query(RECENT_RUNS).bind(limit),
            };
            let rows = query.fetch_all(pool).await.map_err(db_error)?;
            rows.iter()
                .map(|row| RunRow::read(row)?.into_record())
                .collect()
        })
    }

    async fn count_by_status(&self) -> Result<Vec<StatusCount>, StoreError> {
        on_db!(self, |pool| {
            let rows = sqlx::query(COUNT_BY_STATUS)
                .fetch_all(pool)
                .await
                .map_err(db_error)?;
            let mut counts = rows
                .iter()
                .map(|row| {
                    Ok(StatusCount {
                        status: enum_from(row.text("status")?, "status")?,
                        code: row
                            .opt_text("code")?
                            .map(|c| enum_from(c, "code"))
                            .transpose()?,
                        runs: from_i64(row.int("runs")?, "runs")?,
                    })
                })
                .collect::<Result<Vec<_>, StoreError>>()?;
            sort_counts(&mut counts);
            Ok(counts)
        })
    }
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

    #[test]
    fn errors_are_one_line() {
        assert_eq!(one_line("a\nb\r\n  c "), "a b c");
    }
}
