//! The SQL store of docs/design.md §5: SQLite (one file, WAL) or PostgreSQL, chosen by
//! `DATABASE_URL`.
//!
//! Both backends run the same SQL text (`$n` parameters, `ON CONFLICT`, `RETURNING`), written
//! once in each method and expanded for each driver by `on_db!`, so there is no driver-neutral
//! layer to lose types in. Queries are checked at run time: there is no database at build time.
//!
//! The engine's writes (runs, messages, attempts) go through [`writer`], which commits the writes
//! of many runs in one transaction. Every write transaction takes the write lock first
//! (`BEGIN IMMEDIATE` on SQLite; on PostgreSQL an append takes the conversation's row), so
//! concurrent appends get distinct, ordered positions and a duplicated `(run, key)` is dropped.

use super::usage::{check_usage_args, sort_tenants, sort_usage};
use super::{
    Attached, ConnectionInfo, Created, EndedCount, MAX_PAGE, RouteDay, RunCursor, RunFilter,
    RunPage, StatusCount, Store, StoreError, TenantSeen, Transition, UnsettledCursor, UnsettledJob,
    idem_key, newest_per_provider, sort_counts,
};
use crate::canary::CanaryRecord;
use crate::chat::Message;
use crate::job::RunJob;
use crate::run::{ApprovalRecord, AttemptRecord, Decided, RunRecord, RunStatus};
use async_trait::async_trait;
use sqlx::{AssertSqlSafe, Row};

pub(super) mod db;
#[macro_use]
mod rows;
pub use db::Backend;
use db::{Db, WriteTx, db_error, now_ms, on_db, to_i64};
use rows::{
    AttemptRow, approval_from, attempt_from, attempt_row, decision_row, enum_from, from_i64,
    json_text, message_from, message_row,
};
pub(super) use rows::{Columns, RunRow};

/// The store on a SQL database. Cloning shares the connection pool.
#[derive(Clone)]
pub struct SqlStore {
    pub(super) db: Db,
    /// Where the engine's writes go: one batching task per store (see [`writer`]).
    writer: Writer,
    /// The writer's pool (a SQLite file's own connection; PostgreSQL's is `db`), to close.
    writer_db: Db,
    /// `DATABASE_URL` without its password, for error lines.
    url: String,
}

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

/// The rows a built [`list::Statement`] selects, each decoded by `decode`.
macro_rules! rows_of {
    ($store:expr, $statement:expr, $decode:expr) => {
        on_db!($store, |pool| {
            let query = sqlx::query(AssertSqlSafe($statement.sql.as_str()));
            let rows = bound(query, &$statement.binds)
                .fetch_all(pool)
                .await
                .map_err(db_error)?;
            rows.iter()
                .map($decode)
                .collect::<Result<Vec<_>, StoreError>>()
        })
    };
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
        let (db, writer_db, file_lock) = if url.starts_with("sqlite:") {
            let opened = open::sqlite(url, &shown).await?;
            (opened.readers, opened.writer, opened.file_lock)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let db = open::postgres(url, &shown).await?;
            (db.clone(), db, None)
        } else {
            return Err(StoreError::BadUrl(format!(
                "{shown:?} must start with sqlite: or postgres://"
            )));
        };
        Ok(SqlStore {
            db,
            writer: Writer::spawn(writer_db.clone(), file_lock),
            writer_db,
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
        on_db!(self, |pool| pool.close().await);
        match &self.writer_db {
            Db::Sqlite(pool) => pool.close().await,
            Db::Postgres(pool) => pool.close().await,
        }
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

const SELECT_RUN: &str = concat!("SELECT ", run_columns!(), " FROM runs WHERE run_id = $1");
macro_rules! transcript_of {
    ($conversation:literal) => {
        concat!(
            "SELECT seq, role, content, tool_calls, tool_call_id, turn_fields FROM messages \
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
    "SELECT r.*, m.role, m.content, m.tool_calls, m.tool_call_id, m.turn_fields \
     FROM (SELECT 1 AS one) AS q \
     LEFT JOIN (SELECT ",
    run_columns!(),
    " FROM runs WHERE run_id = $1) AS r ON TRUE LEFT JOIN (",
    transcript_of!("$2"),
    ") AS m ON TRUE ORDER BY m.seq"
);
const COUNT_BY_STATUS: &str =
    "SELECT status, code, COUNT(*) AS runs FROM runs GROUP BY status, code";

mod audit;
mod batch;
mod list;
mod open;
mod search;
mod usage;
mod writer;
use batch::Write;
use writer::Writer;

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
        let create = Write::CreateRun {
            row,
            job: None,
            idem_key: None,
        };
        self.writer.write(create).await
    }

    async fn create_queued(&self, job: &RunJob, now_ms: u64) -> Result<Created, StoreError> {
        let row = Box::new(RunRow::from_record(&RunRecord::queued(job, now_ms))?);
        let create = Write::CreateRun {
            row,
            idem_key: idem_key(job),
            job: Some(json_text(job, "job")?),
        };
        Ok(match self.writer.create(create).await? {
            None => Created::New,
            Some(run_id) => Created::Existing(run_id),
        })
    }

    async fn keyed_run(&self, user_id: &str, key: &str) -> Result<Option<String>, StoreError> {
        const SQL: &str = "SELECT run_id FROM run_keys WHERE idem_key = $1";
        let idem_key = super::key_of(user_id, key);
        on_db!(self, |pool| {
            sqlx::query(SQL)
                .bind(&idem_key)
                .fetch_optional(pool)
                .await
                .map_err(db_error)?
                .map(|row| row.text("run_id"))
                .transpose()
        })
    }

    async fn job(&self, run_id: &str) -> Result<Option<String>, StoreError> {
        const SQL: &str = "SELECT job FROM run_jobs WHERE run_id = $1";
        on_db!(self, |pool| {
            sqlx::query(SQL)
                .bind(run_id)
                .fetch_optional(pool)
                .await
                .map_err(db_error)?
                .map(|row| row.text("job"))
                .transpose()
        })
    }

    async fn retried_as(&self, run_id: &str) -> Result<Vec<String>, StoreError> {
        const SQL: &str =
            "SELECT run_id FROM runs WHERE retry_of = $1 ORDER BY created_ms, run_id LIMIT 100";
        rows_for!(self, SQL, run_id, |row| row.text("run_id"))
    }

    async fn unsettled_jobs(
        &self,
        before_ms: u64,
        running_before_ms: u64,
        after: Option<&UnsettledCursor>,
        limit: u32,
    ) -> Result<Vec<UnsettledJob>, StoreError> {
        const SQL: &str = "SELECT r.run_id, r.updated_ms, j.job FROM runs r \
             JOIN run_jobs j ON j.run_id = r.run_id \
             WHERE ((r.status IN ('queued', 'delayed') AND r.updated_ms < $1) \
             OR (r.status = 'running' AND r.updated_ms < $5)) \
             AND (r.updated_ms > $2 OR (r.updated_ms = $2 AND r.run_id > $3)) \
             ORDER BY r.updated_ms, r.run_id LIMIT $4";
        let before = to_i64(before_ms, "before_ms")?;
        let running_before = to_i64(running_before_ms, "running_before_ms")?;
        let (after_ms, after_id) = match after {
            Some(c) => (to_i64(c.updated_ms, "updated_ms")?, c.run_id.as_str()),
            None => (-1, ""),
        };
        on_db!(self, |pool| {
            sqlx::query(SQL)
                .bind(before)
                .bind(after_ms)
                .bind(after_id)
                .bind(i64::from(limit))
                .bind(running_before)
                .fetch_all(pool)
                .await
                .map_err(db_error)?
                .iter()
                .map(|row| {
                    Ok(UnsettledJob {
                        run_id: row.text("run_id")?,
                        updated_ms: u64::try_from(row.int("updated_ms")?).unwrap_or(0),
                        job: row.text("job")?,
                    })
                })
                .collect::<Result<Vec<_>, StoreError>>()
        })
    }

    async fn transition(
        &self,
        run_id: &str,
        from: &[RunStatus],
        to: Transition<'_>,
    ) -> Result<bool, StoreError> {
        // The statuses are this crate's own words, never a caller's text.
        let from = from
            .iter()
            .map(|s| format!("'{}'", s.as_str()))
            .collect::<Vec<_>>()
            .join(", ");
        let keep_call = to.status == RunStatus::AwaitingApproval;
        let sql = format!(
            "UPDATE runs SET status = $2, code = $3, summary = COALESCE($4, summary), \
             pending_tool_call = CASE WHEN $5 THEN pending_tool_call ELSE NULL END, \
             updated_ms = $6 WHERE run_id = $1 AND status IN ({from})"
        );
        let now = to_i64(to.now_ms, "now_ms")?;
        on_db!(self, |pool| {
            let mut tx = pool.write_tx().await?;
            let changed = sqlx::query(AssertSqlSafe(sql))
                .bind(run_id)
                .bind(to.status.as_str())
                .bind(to.code.map(|c| c.as_str()))
                .bind(to.summary)
                .bind(keep_call)
                .bind(now)
                .execute(&mut *tx)
                .await
                .map_err(db_error)?
                .rows_affected();
            tx.commit().await.map_err(db_error)?;
            Ok(changed == 1)
        })
    }

    async fn discard_queued(&self, run_id: &str) -> Result<(), StoreError> {
        const RUN: &str = "DELETE FROM runs WHERE run_id = $1 AND status = 'queued' AND calls = 0";
        const JOB: &str = "DELETE FROM run_jobs WHERE run_id = $1 \
             AND NOT EXISTS (SELECT 1 FROM runs WHERE runs.run_id = $1)";
        // Its idempotency key is free again: a resend of the request enqueues for real.
        const KEY: &str = "DELETE FROM run_keys WHERE run_id = $1 \
             AND NOT EXISTS (SELECT 1 FROM runs WHERE runs.run_id = $1)";
        on_db!(self, |pool| {
            let mut tx = pool.write_tx().await?;
            for sql in [RUN, JOB, KEY] {
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
             ratelimit_remaining, provider_name, latency_ms, t_ms, cost_usd FROM attempts \
             WHERE run_id = $1 ORDER BY n";
        rows_for!(self, SQL, run_id, attempt_from)
    }

    async fn record_canary(&self, canary: &CanaryRecord) -> Result<(), StoreError> {
        let row = AttemptRow {
            kind: "canary",
            ..attempt_row(&canary.attempt)?
        };
        self.writer.write(Write::Attempt(row)).await?;
        Ok(())
    }

    async fn last_canaries(&self) -> Result<Vec<CanaryRecord>, StoreError> {
        // The newest canary of each route; a provider whose canary changed routes keeps only
        // its newest.
        const SQL: &str = "SELECT a.run_id, a.n, a.step, a.route, a.http_status, a.error, a.verdict, \
             a.retry_hint_ms, a.ratelimit_remaining, a.provider_name, a.latency_ms, a.t_ms, \
             a.cost_usd FROM attempts a JOIN (SELECT route, MAX(t_ms) AS t_ms FROM attempts \
             WHERE kind = 'canary' GROUP BY route) newest \
             ON a.route = newest.route AND a.t_ms = newest.t_ms WHERE a.kind = $1";
        let attempts: Result<Vec<AttemptRecord>, StoreError> =
            rows_for!(self, SQL, "canary", attempt_from);
        Ok(newest_per_provider(attempts?))
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

    async fn list_runs(
        &self,
        filter: &RunFilter,
        after: Option<&RunCursor>,
        limit: u32,
    ) -> Result<RunPage, StoreError> {
        let limit = limit.clamp(1, MAX_PAGE);
        // One row past the page says whether another follows.
        let statement = list::page(self.backend(), filter, after, limit + 1);
        let mut runs: Vec<RunRecord> =
            rows_of!(self, statement, |row| RunRow::read(row)?.into_record())?;
        let next = (runs.len() > limit as usize).then(|| {
            runs.truncate(limit as usize);
            runs.last().map(RunCursor::after)
        });
        Ok(RunPage {
            runs,
            next: next.flatten(),
        })
    }

    async fn count_runs(&self, filter: &RunFilter) -> Result<Vec<(RunStatus, u64)>, StoreError> {
        let statement = list::counts(self.backend(), &filter.any_status());
        let mut counts: Vec<(RunStatus, u64)> = rows_of!(self, statement, |row| {
            Ok((
                enum_from(row.text("status")?, "status")?,
                from_i64(row.int("runs")?, "runs")?,
            ))
        })?;
        counts.sort_by_key(|(status, _)| *status as u8);
        Ok(counts)
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

    async fn ended_since(
        &self,
        from_ms: u64,
        bucket_ms: u64,
    ) -> Result<Vec<EndedCount>, StoreError> {
        const SQL: &str = "SELECT status, (updated_ms - $1) / $2 AS bucket, COUNT(*) AS runs \
             FROM runs WHERE status IN ('succeeded', 'failed', 'refused', 'cancelled') \
             AND updated_ms >= $1 GROUP BY status, bucket";
        let from = to_i64(from_ms, "from_ms")?;
        let bucket = to_i64(bucket_ms.max(1), "bucket_ms")?;
        on_db!(self, |pool| {
            let rows = sqlx::query(SQL)
                .bind(from)
                .bind(bucket)
                .fetch_all(pool)
                .await
                .map_err(db_error)?;
            rows.iter()
                .map(|row| {
                    Ok(EndedCount {
                        status: enum_from(row.text("status")?, "status")?,
                        bucket: from_i64(row.int("bucket")?, "bucket")?,
                        runs: from_i64(row.int("runs")?, "runs")?,
                    })
                })
                .collect()
        })
    }

    async fn usage_by_day(
        &self,
        tenants: &[String],
        bounds: &[u64],
    ) -> Result<Vec<RouteDay>, StoreError> {
        if !check_usage_args(tenants, bounds)? {
            return Ok(Vec::new());
        }
        let statement = usage::usage_by_day(tenants, bounds);
        let mut rows: Vec<RouteDay> = rows_of!(self, statement, |row| {
            Ok(RouteDay {
                tenant: row.text("tenant")?,
                day_start_ms: from_i64(row.int("day_start")?, "day_start")?,
                route: row.text("route")?,
                calls: from_i64(row.int("calls")?, "calls")?,
                cost_usd: row.float("cost_usd")?,
            })
        })?;
        sort_usage(&mut rows);
        Ok(rows)
    }

    async fn recent_tenants(
        &self,
        since_ms: u64,
        limit: u32,
    ) -> Result<Vec<TenantSeen>, StoreError> {
        let since = to_i64(since_ms, "since_ms")?;
        let limit = limit.clamp(1, MAX_PAGE);
        on_db!(self, |pool| {
            let rows = sqlx::query(usage::RECENT_TENANTS)
                .bind(since)
                .bind(i64::from(limit))
                .fetch_all(pool)
                .await
                .map_err(db_error)?;
            let mut seen = rows
                .iter()
                .map(|row| {
                    Ok(TenantSeen {
                        tenant: row.text("tenant")?,
                        tier: row
                            .opt_text("tier")?
                            .unwrap_or_else(|| crate::catalog::DEFAULT_TIER.to_string()),
                        runs: from_i64(row.int("runs")?, "runs")?,
                        last_run_ms: from_i64(row.int("last_ms")?, "last_ms")?,
                    })
                })
                .collect::<Result<Vec<_>, StoreError>>()?;
            sort_tenants(&mut seen);
            Ok(seen)
        })
    }
}

/// `query` with `binds` bound in order.
fn bound<'q, DB>(
    mut query: sqlx::query::Query<'q, DB, <DB as sqlx::Database>::Arguments>,
    binds: &'q [list::Bind],
) -> sqlx::query::Query<'q, DB, <DB as sqlx::Database>::Arguments>
where
    DB: sqlx::Database,
    &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    for b in binds {
        query = match b {
            list::Bind::Text(t) => query.bind(t.as_str()),
            list::Bind::Int(i) => query.bind(*i),
        };
    }
    query
}
