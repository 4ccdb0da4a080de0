//! Group commit: every write of the engine in this process goes through a writer task that
//! commits whatever is waiting in one transaction.
//!
//! Each write is awaited before its run goes on, so it is durable when the caller continues (a
//! run saves before every call, and at its end). Committed one by one, the writes of many runs
//! cost a transaction each: on SQLite the file's write lock taken and released (shared with the
//! other worker processes on the same file), on PostgreSQL a WAL flush. Here a caller's write
//! joins the next batch instead: a writer takes everything queued while the previous batch
//! committed, applies it in one transaction, one multi-row statement per kind of write, and
//! answers every caller once it is committed. Under load batches grow by themselves; a lone write
//! commits at once.
//!
//! A batch that fails for want of the database (a full disk, a PostgreSQL restarting) is tried
//! again after short pauses, so a passing fault costs latency rather than runs; a batch that still
//! fails is rolled back and its writes are retried one transaction each, so one write that cannot
//! be applied fails only its own caller.

use super::batch::{KeyHeld, Params, Statements, Write, commit};
use super::db::Db;
use crate::store::StoreError;
use crate::store::file_lock::FileLock;
use tokio::sync::{mpsc, oneshot};

/// The most callers one transaction serves: bounds the time the SQLite write lock is held.
const MAX_BATCH: usize = 256;
/// Writes waiting for the writer before callers wait to queue theirs.
const QUEUE: usize = 4096;
/// The pauses before a failed batch is tried again (about 1.3 s in all), as long as the batch
/// has not been at it for [`RETRY_WITHIN`]: a database that takes seconds to fail (PostgreSQL
/// gone, the pool's acquire timeout) fails its callers at once, who answer 503.
const RETRY_PAUSES: [std::time::Duration; 3] = [
    std::time::Duration::from_millis(50),
    std::time::Duration::from_millis(250),
    std::time::Duration::from_millis(1000),
];
const RETRY_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);
/// How often a SQLite file's writer checkpoints the WAL, after a batch and outside the file's
/// turn, so the other writers of the file write meanwhile. (Left to SQLite, the commit that
/// crossed its threshold checkpointed, inside the turn: the slowest commits by far.)
const CHECKPOINT_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

/// One caller's writes, committed together, and where to say they are (with the run that holds
/// the key of a run it created, when not the caller's own).
struct Queued {
    writes: Vec<Write>,
    reply: oneshot::Sender<Result<Option<String>, StoreError>>,
}

/// The handle callers write through; cloning shares the one writer task.
#[derive(Clone)]
pub(super) struct Writer {
    queue: mpsc::Sender<Queued>,
}

impl Writer {
    /// Start the writer task on `db`; with `turns`, each batch holds that lock while it commits
    /// (a SQLite file shared by processes). The task ends when the last handle is dropped.
    pub(super) fn spawn(db: Db, turns: Option<FileLock>) -> Writer {
        let (queue, rx) = mpsc::channel(QUEUE);
        tokio::spawn(run(db, turns, rx));
        Writer { queue }
    }

    /// Apply `write` in the next batch; returns once that batch is committed.
    pub(super) async fn write(&self, write: Write) -> Result<(), StoreError> {
        self.write_all(vec![write]).await
    }

    /// Apply `writes` together (all or none) in the next batch.
    pub(super) async fn write_all(&self, writes: Vec<Write>) -> Result<(), StoreError> {
        self.send(writes).await.map(|_| ())
    }

    /// Apply a [`Write::CreateRun`] in the next batch: `None` once the run is recorded (or was
    /// already), or the run that holds its idempotency key, and then nothing was written.
    pub(super) async fn create(&self, create: Write) -> Result<Option<String>, StoreError> {
        self.send(vec![create]).await
    }

    async fn send(&self, writes: Vec<Write>) -> Result<Option<String>, StoreError> {
        let stopped = || StoreError::Unavailable("the store's writer has stopped".into());
        let (reply, answer) = oneshot::channel();
        self.queue
            .send(Queued { writes, reply })
            .await
            .map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

async fn run(db: Db, turns: Option<FileLock>, mut rx: mpsc::Receiver<Queued>) {
    let statements = Statements::new(match db {
        Db::Sqlite(_) => Params::Anonymous,
        Db::Postgres(_) => Params::Numbered,
    });
    let mut batch = Vec::with_capacity(MAX_BATCH);
    let mut checkpointed = tokio::time::Instant::now();
    while rx.recv_many(&mut batch, MAX_BATCH).await > 0 {
        let held = match &turns {
            Some(turns) => turns.lock().await.map(Some),
            None => Ok(None),
        };
        match held {
            Ok(_held) => commit_batch(&db, &statements, &mut batch).await,
            Err(e) => {
                let message = e.to_string();
                for queued in batch.drain(..) {
                    let failed = StoreError::Unavailable(message.clone());
                    let _ = queued.reply.send(Err(failed));
                }
            }
        }
        if let (Some(_), Db::Sqlite(pool)) = (&turns, &db)
            && checkpointed.elapsed() >= CHECKPOINT_EVERY
        {
            checkpointed = tokio::time::Instant::now();
            // PASSIVE waits for no reader or writer; what it cannot copy yet, the next one does.
            let checkpoint = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)").execute(pool);
            if let Err(error) = checkpoint.await {
                tracing::warn!(%error, "checkpointing the store's WAL failed; trying again later");
            }
        }
    }
}

/// Commit `batch` in one transaction, or each write alone when that fails, and answer every
/// caller.
async fn commit_batch(db: &Db, statements: &Statements, batch: &mut Vec<Queued>) {
    let writes: Vec<&Write> = batch.iter().flat_map(|q| &q.writes).collect();
    let started = std::time::Instant::now();
    let mut committed = commit(db, statements, &writes).await;
    for pause in RETRY_PAUSES {
        let Err(StoreError::Unavailable(error)) = &committed else {
            break;
        };
        if started.elapsed() + pause > RETRY_WITHIN {
            break;
        }
        tracing::warn!(writes = writes.len(), %error, retry_in_ms = pause.as_millis() as u64, "store writes failed; trying again");
        tokio::time::sleep(pause).await;
        committed = commit(db, statements, &writes).await;
    }
    tracing::trace!(
        writes = writes.len(),
        micros = started.elapsed().as_micros() as u64,
        ok = committed.is_ok(),
        "store batch"
    );
    match committed {
        Ok(held) => {
            for queued in batch.drain(..) {
                let holder = key_holder(&queued.writes, &held);
                let _ = queued.reply.send(Ok(holder));
            }
        }
        // A lone caller's error is its own: committing it again would fail the same way.
        Err(e) if batch.len() == 1 => {
            if let Some(queued) = batch.pop() {
                let _ = queued.reply.send(Err(e));
            }
        }
        Err(e) => {
            tracing::warn!(writes = batch.len(), error = %e, "a batch of store writes failed; retrying them one by one");
            for queued in batch.drain(..) {
                let writes: Vec<&Write> = queued.writes.iter().collect();
                let committed = commit(db, statements, &writes).await;
                let answer = committed.map(|held| key_holder(&queued.writes, &held));
                let _ = queued.reply.send(answer);
            }
        }
    }
}

/// The run that holds the idempotency key of a run `writes` created, when another one does.
fn key_holder(writes: &[Write], held: &KeyHeld) -> Option<String> {
    writes.iter().find_map(|w| match w {
        Write::CreateRun { row, .. } => held.get(&row.run_id).cloned(),
        _ => None,
    })
}
