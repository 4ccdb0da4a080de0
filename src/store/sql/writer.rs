//! Group commit: every write of the engine in this process goes through one task that commits
//! whatever is waiting in one transaction.
//!
//! A run writes about eight times (created, input, counted before each call, attempt, answer,
//! finished), and each write is awaited before the run goes on, so it is durable when the caller
//! continues. Committed one by one, those writes cost a transaction each: on SQLite a write lock
//! taken and released (and shared with the other worker processes on the same file), on
//! PostgreSQL a WAL flush. Here a caller's write joins the next batch instead: the writer takes
//! everything queued while the previous batch committed, applies it in one transaction and answers
//! every caller once it is committed. Under load batches grow by themselves; a lone write commits
//! at once, as before.
//!
//! A batch that fails is rolled back and its writes are retried one transaction each, so one
//! write that cannot be applied fails only its own caller.

use super::{Db, RunRow, WriteTx, db_error};
use crate::store::StoreError;
use sqlx::Row;
use tokio::sync::{mpsc, oneshot};

/// The most writes one transaction carries: bounds the time the SQLite write lock is held.
const MAX_BATCH: usize = 256;
/// Writes waiting for the writer before callers wait to queue theirs.
const QUEUE: usize = 4096;

/// One write, with every value already converted to what the columns hold.
pub(super) enum Write {
    /// Insert the run unless it exists, and its conversation; answers with the stored run.
    CreateRun(Box<RunRow>),
    /// Upsert the run; `approval` is (tool call id, tool call JSON) when it awaits one.
    SaveRun {
        row: Box<RunRow>,
        approval: Option<(String, String)>,
    },
    Append(MessageRow),
    Attempt(AttemptRow),
    DeleteLastTurn {
        conversation_id: String,
        now: i64,
    },
}

/// A message as the `messages` table holds it.
pub(super) struct MessageRow {
    pub id: String,
    pub conversation_id: String,
    pub run_id: String,
    pub key: String,
    pub role: String,
    pub content: Option<String>,
    pub tool_calls: Option<String>,
    pub tool_call_id: Option<String>,
    pub now: i64,
}

/// An attempt as the `attempts` table holds it.
pub(super) struct AttemptRow {
    pub run_id: String,
    pub n: i64,
    pub step: i64,
    pub route: String,
    pub http_status: Option<i64>,
    pub error: Option<String>,
    pub verdict: Option<String>,
    pub retry_hint_ms: Option<i64>,
    pub ratelimit_remaining: Option<i64>,
    pub provider_name: Option<String>,
    pub latency_ms: i64,
    pub t_ms: i64,
}

/// What a committed write answers: the stored run for [`Write::CreateRun`], nothing otherwise.
pub(super) enum Written {
    Done,
    Run(Box<RunRow>),
}

struct Queued {
    write: Write,
    reply: oneshot::Sender<Result<Written, StoreError>>,
}

/// The handle callers write through; cloning shares the one writer task.
#[derive(Clone)]
pub(super) struct Writer {
    queue: mpsc::Sender<Queued>,
}

impl Writer {
    /// Start the writer task on `db`. It ends when the last handle is dropped.
    pub fn spawn(db: Db) -> Writer {
        let (queue, rx) = mpsc::channel(QUEUE);
        tokio::spawn(run(db, rx));
        Writer { queue }
    }

    /// Apply `write` in the next batch; returns once that batch is committed.
    pub async fn write(&self, write: Write) -> Result<Written, StoreError> {
        let stopped = || StoreError::Unavailable("the store's writer has stopped".into());
        let (reply, answer) = oneshot::channel();
        self.queue
            .send(Queued { write, reply })
            .await
            .map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

async fn run(db: Db, mut rx: mpsc::Receiver<Queued>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while rx.recv_many(&mut batch, MAX_BATCH).await > 0 {
        let writes: Vec<&Write> = batch.iter().map(|q| &q.write).collect();
        match commit(&db, &writes).await {
            Ok(answers) => {
                for (queued, answer) in batch.drain(..).zip(answers) {
                    let _ = queued.reply.send(Ok(answer));
                }
            }
            Err(e) => {
                if batch.len() > 1 {
                    tracing::warn!(writes = batch.len(), error = %e, "a batch of store writes failed; retrying them one by one");
                }
                for queued in batch.drain(..) {
                    let answer = commit(&db, &[&queued.write]).await;
                    let _ = queued.reply.send(answer.map(|mut a| a.remove(0)));
                }
            }
        }
    }
}

const CREATE_RUN: &str = concat!(insert_run!(), " ON CONFLICT (run_id) DO NOTHING");
const ENSURE_CONVERSATION: &str = "INSERT INTO conversations (id, user_id, next_seq, created_ms, updated_ms) \
     VALUES ($1, $2, 0, $3, $3) ON CONFLICT (id) DO NOTHING";
const RECORD_APPROVAL: &str = "INSERT INTO approvals (run_id, tool_call_id, tool_call, created_ms) \
     VALUES ($1, $2, $3, $4) ON CONFLICT (run_id, tool_call_id) DO NOTHING";
/// Takes the conversation's row (creating it when an append comes first), which orders
/// concurrent appenders on PostgreSQL, and hands out the next position. A duplicate append
/// leaves a gap in the positions, which only order the messages.
const NEXT_SEQ: &str = "INSERT INTO conversations (id, next_seq, created_ms, updated_ms) \
     VALUES ($1, 1, $2, $2) ON CONFLICT (id) DO UPDATE \
     SET next_seq = conversations.next_seq + 1, updated_ms = excluded.updated_ms RETURNING next_seq";
const INSERT_MESSAGE: &str = "INSERT INTO messages \
     (id, conversation_id, seq, run_id, msg_key, role, content, tool_calls, tool_call_id, created_ms) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT (run_id, msg_key) DO NOTHING";
const DELETE_LAST_TURN: &str = "UPDATE messages SET deleted_ms = $2 \
     WHERE conversation_id = $1 AND deleted_ms IS NULL AND seq > COALESCE((\
         SELECT MAX(seq) FROM messages \
         WHERE conversation_id = $1 AND deleted_ms IS NULL AND role = 'user'), 0)";
const RECORD_ATTEMPT: &str = "INSERT INTO attempts (run_id, n, step, route, http_status, error, verdict, \
     retry_hint_ms, ratelimit_remaining, provider_name, latency_ms, t_ms) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) ON CONFLICT (run_id, n) DO NOTHING";

/// [`commit`] for one driver: the same statements, typed for `$pool`'s database.
macro_rules! apply_all {
    ($pool:expr, $writes:expr) => {{
        let mut tx = $pool.write_tx().await?;
        let mut answers = Vec::with_capacity($writes.len());
        for write in $writes {
            answers.push(apply_one!(&mut *tx, write));
        }
        tx.commit().await.map_err(db_error)?;
        Ok(answers)
    }};
}

/// One [`Write`] on an open transaction; evaluates to its [`Written`].
macro_rules! apply_one {
    ($conn:expr, $write:expr) => {
        match $write {
            Write::CreateRun(row) => {
                bind_run!(sqlx::query(CREATE_RUN), row)
                    .execute($conn)
                    .await
                    .map_err(db_error)?;
                sqlx::query(ENSURE_CONVERSATION)
                    .bind(&row.conversation_id)
                    .bind(&row.user_id)
                    .bind(row.created_ms)
                    .execute($conn)
                    .await
                    .map_err(db_error)?;
                let stored = sqlx::query(super::SELECT_RUN)
                    .bind(&row.run_id)
                    .fetch_one($conn)
                    .await
                    .map_err(db_error)?;
                Written::Run(Box::new(RunRow::read(&stored)?))
            }
            Write::SaveRun { row, approval } => {
                bind_run!(sqlx::query(super::SAVE_RUN), row)
                    .execute($conn)
                    .await
                    .map_err(db_error)?;
                if let Some((call_id, call)) = approval {
                    sqlx::query(RECORD_APPROVAL)
                        .bind(&row.run_id)
                        .bind(call_id)
                        .bind(call)
                        .bind(row.updated_ms)
                        .execute($conn)
                        .await
                        .map_err(db_error)?;
                }
                Written::Done
            }
            Write::Append(m) => {
                let seq: i64 = sqlx::query(NEXT_SEQ)
                    .bind(&m.conversation_id)
                    .bind(m.now)
                    .fetch_one($conn)
                    .await
                    .map_err(db_error)?
                    .try_get("next_seq")
                    .map_err(db_error)?;
                sqlx::query(INSERT_MESSAGE)
                    .bind(&m.id)
                    .bind(&m.conversation_id)
                    .bind(seq)
                    .bind(&m.run_id)
                    .bind(&m.key)
                    .bind(&m.role)
                    .bind(&m.content)
                    .bind(&m.tool_calls)
                    .bind(&m.tool_call_id)
                    .bind(m.now)
                    .execute($conn)
                    .await
                    .map_err(db_error)?;
                Written::Done
            }
            Write::Attempt(a) => {
                sqlx::query(RECORD_ATTEMPT)
                    .bind(&a.run_id)
                    .bind(a.n)
                    .bind(a.step)
                    .bind(&a.route)
                    .bind(a.http_status)
                    .bind(&a.error)
                    .bind(&a.verdict)
                    .bind(a.retry_hint_ms)
                    .bind(a.ratelimit_remaining)
                    .bind(&a.provider_name)
                    .bind(a.latency_ms)
                    .bind(a.t_ms)
                    .execute($conn)
                    .await
                    .map_err(db_error)?;
                Written::Done
            }
            Write::DeleteLastTurn {
                conversation_id,
                now,
            } => {
                sqlx::query(DELETE_LAST_TURN)
                    .bind(conversation_id)
                    .bind(now)
                    .execute($conn)
                    .await
                    .map_err(db_error)?;
                Written::Done
            }
        }
    };
}

/// Apply `writes` in order in one transaction and commit it.
async fn commit(db: &Db, writes: &[&Write]) -> Result<Vec<Written>, StoreError> {
    match db {
        Db::Sqlite(pool) => apply_all!(pool, writes),
        Db::Postgres(pool) => apply_all!(pool, writes),
    }
}
