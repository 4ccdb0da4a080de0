//! Where transcripts, runs and attempts live (docs/design.md §5), behind a trait so the engine does
//! not care whether it is SQL or memory.
//!
//! [`SqlStore`] is the real store: SQLite (the embedded default) or PostgreSQL through sqlx, with
//! the migrations of `migrations/` applied when it opens. [`MemoryStore`] serves tests and
//! benchmarks. Users' provider keys live in the SQL store too, sealed with `FREEWAY_SECRET_KEY`
//! (see [`SecretKey`]), and [`StoreTargets`] opens them only at call time.

mod audit;
mod connections;
mod file_limit;
mod file_lock;
mod list;
mod memory;
mod migrations;
mod retention;
mod sql;
mod usage;

pub use audit::{AuditEntry, AuditLog, MAX_AUDIT_DETAIL, MAX_AUDIT_PAGE};
pub use connections::{
    NewConnection, Resealed, SecretKey, SecretKeyError, SecretKeys, StoreTargets,
};
pub use file_limit::survive_file_size_limit;
pub use list::{MAX_PAGE, RunCursor, RunFilter, RunPage};
pub use memory::MemoryStore;
pub use migrations::MIGRATIONS;
pub use retention::Pruned;
pub use sql::{Backend, SqlStore};
pub use usage::{MAX_USAGE_DAYS, MAX_USAGE_TENANTS, RouteDay, TenantSeen};

use crate::canary::CanaryRecord;
use crate::chat::Message;
use crate::job::RunJob;
use crate::run::{ApprovalRecord, AttemptRecord, Code, Decided, RunRecord, RunStatus};
use async_trait::async_trait;

/// How many stored runs have one status and code: what `/metrics` exports as runs by status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct StatusCount {
    pub status: RunStatus,
    pub code: Option<Code>,
    pub runs: u64,
}

/// How many runs ended with one status in one bucket of time ([`Store::ended_since`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EndedCount {
    pub status: RunStatus,
    pub bucket: u64,
    pub runs: u64,
}

/// What [`Store::create_queued`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Created {
    /// The run is recorded with its job (or already was, under its own id).
    New,
    /// Another run already holds the request's idempotency key (docs/design.md §4.3): that run,
    /// and nothing was written.
    Existing(String),
}

/// How the store keeps an idempotency key: `<user_id>/<key>`. `/` occurs in neither (both are
/// `[A-Za-z0-9_.:-]`), so two users never share one.
fn key_of(user_id: &str, key: &str) -> String {
    format!("{user_id}/{key}")
}

/// The key a job's run holds, when its request carries one.
fn idem_key(job: &RunJob) -> Option<String> {
    let key = job.request.idempotency_key.as_deref()?;
    Some(key_of(&job.request.user_id, key))
}

/// The statuses a run ends with.
pub const ENDED: [RunStatus; 4] = [
    RunStatus::Succeeded,
    RunStatus::Failed,
    RunStatus::Refused,
    RunStatus::Cancelled,
];

/// Why the store could not do what was asked. Every variant prints as one line without secrets.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store unavailable: {0}")]
    Unavailable(String),
    #[error("corrupt record: {0}")]
    Corrupt(String),
    /// `DATABASE_URL` is not a URL the store can open (a configuration error, not an outage).
    #[error("bad DATABASE_URL: {0}")]
    BadUrl(String),
    #[error("cannot migrate the store: {0}")]
    Migrate(String),
    /// The value does not fit the store (an id of the wrong shape, a number past `i64::MAX`).
    #[error("invalid value: {0}")]
    Invalid(String),
    /// The id belongs to someone else (a connection id of another user).
    #[error("conflict: {0}")]
    Conflict(String),
    #[error("FREEWAY_SECRET_KEY is not set: users' connection keys cannot be sealed or opened")]
    NoSecretKey,
    #[error("the key of connection {0:?} cannot be opened with this FREEWAY_SECRET_KEY")]
    Undecryptable(String),
}

/// A run the reconciler looks at: the job it was enqueued as, and where it sorts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsettledJob {
    pub run_id: String,
    pub updated_ms: u64,
    pub job: String,
}

/// Where a page of [`Store::unsettled_jobs`] ended: the next starts after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsettledCursor {
    pub updated_ms: u64,
    pub run_id: String,
}

impl UnsettledJob {
    pub fn cursor(&self) -> UnsettledCursor {
        UnsettledCursor {
            updated_ms: self.updated_ms,
            run_id: self.run_id.clone(),
        }
    }
}

/// The status [`Store::transition`] moves a run to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transition<'a> {
    pub status: RunStatus,
    pub code: Option<Code>,
    /// Why, in a line (kept as the run's summary).
    pub summary: Option<&'a str>,
    pub now_ms: u64,
}

/// A write that belongs to the moment a run is saved (its input, the attempt just made, the
/// answer just received, the answer to its approval), for [`Store::save_run_with`].
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Attached {
    Attempt(AttemptRecord),
    /// A message of the run, appended to its conversation under `key` as by
    /// [`Store::append_message`].
    Message {
        key: String,
        message: Message,
    },
    /// The answer to the tool call `tool_call_id` the run paused on, as by
    /// [`Store::record_decision`].
    Decision {
        tool_call_id: String,
        decided: Decided,
    },
}

/// A stored connection as anyone may see it: everything but the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionInfo {
    pub id: String,
    pub user_id: String,
    pub provider: String,
    pub created_ms: u64,
    pub updated_ms: u64,
}

#[async_trait]
pub trait Store: Send + Sync {
    /// Insert the run when it is not there yet; a stored run keeps its progress. The producer
    /// stores a run at enqueue with it; a worker stores a run by its first save.
    async fn create_run(&self, run: &RunRecord) -> Result<(), StoreError>;
    /// [`Store::create_run`] for a run the producer enqueues, kept with the job it is enqueued
    /// as: Redis is for scheduling, the store is the record, so a run whose queue entry Redis
    /// lost can be pushed again from here ([`Store::unsettled_jobs`]). A request's idempotency
    /// key is claimed in the same step: when another run holds it, nothing is written and that
    /// run is the answer, however many requests race (one key, one run).
    async fn create_queued(&self, job: &RunJob, now_ms: u64) -> Result<Created, StoreError>;
    /// The run that holds `user_id`'s idempotency key `key`, if one does.
    async fn keyed_run(&self, user_id: &str, key: &str) -> Result<Option<String>, StoreError>;
    /// The jobs of runs that should be somewhere in the queue (queued or delayed, not updated
    /// since `before_ms`; running, not updated since `running_before_ms`), oldest first (by
    /// update time, then id), at most `limit`, after `after` (the last one of the page before).
    /// Runs pushed past the producer keep no job and are not among them.
    async fn unsettled_jobs(
        &self,
        before_ms: u64,
        running_before_ms: u64,
        after: Option<&UnsettledCursor>,
        limit: u32,
    ) -> Result<Vec<UnsettledJob>, StoreError>;
    /// Change the run's status to `to` (with `code` and, when given, `summary`) only if it is
    /// one of `from` now; says whether it was. One atomic step, so of two deciders racing (an
    /// approval and a cancel) exactly one wins. A run that leaves `awaiting_approval` drops its
    /// pending tool call.
    async fn transition(
        &self,
        run_id: &str,
        from: &[RunStatus],
        to: Transition<'_>,
    ) -> Result<bool, StoreError>;
    /// The job a run was enqueued as, if the producer kept it: what a retry or an approval
    /// reads once Redis has let go of its copy.
    async fn job(&self, run_id: &str) -> Result<Option<String>, StoreError>;
    /// The runs that retry `run_id` (`retry_of`), oldest first.
    async fn retried_as(&self, run_id: &str) -> Result<Vec<String>, StoreError>;
    /// Forget a run that was created but could not be enqueued (the request is answered with an
    /// error): a queued run that made no call, its job and its idempotency key. Anything else is
    /// left as it is.
    async fn discard_queued(&self, run_id: &str) -> Result<(), StoreError>;
    async fn run(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError>;
    /// The user whose first run opened the conversation; `None` for a conversation not stored,
    /// or one opened by a job pushed straight into the queue.
    async fn conversation_owner(&self, conversation_id: &str)
    -> Result<Option<String>, StoreError>;
    /// A user's stored connection, without its key; `None` when there is none. Enqueue checks a
    /// route's connection against it (its owner, its provider). The memory store keeps none.
    async fn connection(&self, id: &str) -> Result<Option<ConnectionInfo>, StoreError>;
    /// Insert or overwrite the run's status, state and output.
    async fn save_run(&self, run: &RunRecord) -> Result<(), StoreError>;
    /// [`Store::save_run`] with the writes `attached` to it. The SQL store commits them in one
    /// transaction, so a crash keeps all or none; this default writes them one by one, the run
    /// last.
    async fn save_run_with(
        &self,
        run: &RunRecord,
        attached: &[Attached],
    ) -> Result<(), StoreError> {
        for a in attached {
            match a {
                Attached::Attempt(attempt) => self.record_attempt(attempt).await?,
                Attached::Message { key, message } => {
                    let conversation = &run.conversation_id;
                    self.append_message(conversation, &run.run_id, key, message)
                        .await?
                }
                Attached::Decision {
                    tool_call_id,
                    decided,
                } => {
                    self.record_decision(&run.run_id, tool_call_id, decided)
                        .await?
                }
            }
        }
        self.save_run(run).await
    }
    /// The conversation's messages, in order.
    async fn transcript(&self, conversation_id: &str) -> Result<Vec<Message>, StoreError>;
    /// [`Store::run`] and [`Store::transcript`] together, as a delivery starts. The SQL store
    /// reads both in one statement: one round trip, one read transaction.
    async fn run_and_transcript(
        &self,
        run_id: &str,
        conversation_id: &str,
    ) -> Result<(Option<RunRecord>, Vec<Message>), StoreError> {
        Ok((
            self.run(run_id).await?,
            self.transcript(conversation_id).await?,
        ))
    }
    /// Append one message of `run_id` to the conversation. `key` names the message within its run
    /// (`input`, `step-2`, `tool-<call id>`): appending the same key twice keeps the first, so a
    /// job delivered twice, or resumed after a crash, never duplicates a message.
    async fn append_message(
        &self,
        conversation_id: &str,
        run_id: &str,
        key: &str,
        message: &Message,
    ) -> Result<(), StoreError>;
    /// Delete the last assistant turn (everything after the last user message): a regenerate.
    async fn delete_last_assistant_turn(&self, conversation_id: &str) -> Result<(), StoreError>;
    /// Record attempt `n` of a run; a later record of the same attempt replaces the earlier one
    /// (the engine records an attempt `lost` as it counts it, then how its call ended).
    async fn record_attempt(&self, attempt: &AttemptRecord) -> Result<(), StoreError>;
    async fn attempts(&self, run_id: &str) -> Result<Vec<AttemptRecord>, StoreError>;
    /// Record a provider's canary in the attempt log, as an attempt of kind `canary` (its run id
    /// is [`CanaryRecord::run_id`]; no run has it).
    async fn record_canary(&self, canary: &CanaryRecord) -> Result<(), StoreError>;
    /// Each provider's newest canary, sorted by provider.
    async fn last_canaries(&self) -> Result<Vec<CanaryRecord>, StoreError>;
    /// Answer the tool call `tool_call_id` that run `run_id` paused on (a run saved awaiting
    /// approval records the call); the first answer stays.
    async fn record_decision(
        &self,
        run_id: &str,
        tool_call_id: &str,
        decided: &Decided,
    ) -> Result<(), StoreError>;
    /// The tool calls the run paused on, oldest first, with their answers.
    async fn approvals(&self, run_id: &str) -> Result<Vec<ApprovalRecord>, StoreError>;
    /// The runs `filter` matches, newest first (by creation time, then id): at most `limit`
    /// (1 to [`MAX_PAGE`]) after `after`, and where the next page starts.
    async fn list_runs(
        &self,
        filter: &RunFilter,
        after: Option<&RunCursor>,
        limit: u32,
    ) -> Result<RunPage, StoreError>;
    /// The runs `filter` matches whatever their status, counted by status, in status order.
    async fn count_runs(&self, filter: &RunFilter) -> Result<Vec<(RunStatus, u64)>, StoreError>;
    /// Stored runs counted by status and code, sorted by status then code. Counting is a scan of
    /// an index over (status, code): cheap next to a scrape interval, and exact, where a counter
    /// kept beside the store could drift from it.
    async fn count_by_status(&self) -> Result<Vec<StatusCount>, StoreError>;
    /// Runs that ended (succeeded, failed, refused, cancelled) since `from_ms`, counted by status
    /// and by the `bucket_ms` their last update falls in (bucket `i` starts at
    /// `from_ms + i * bucket_ms`); a range of the index over (status, updated time).
    async fn ended_since(
        &self,
        from_ms: u64,
        bucket_ms: u64,
    ) -> Result<Vec<EndedCount>, StoreError>;
    /// What the runs of `tenants` (a run that named none is its user's) called and spent, from
    /// the attempt log: one row per tenant, day and route with calls, sorted by tenant, day,
    /// then route. `bounds` are the days' starts in epoch ms, strictly ascending, then the last
    /// day's end: day `i` holds the attempts made in `[bounds[i], bounds[i + 1])`. At most
    /// [`MAX_USAGE_TENANTS`] tenants and [`MAX_USAGE_DAYS`] days (else `Invalid`). Canaries are
    /// no tenant's and never count.
    async fn usage_by_day(
        &self,
        tenants: &[String],
        bounds: &[u64],
    ) -> Result<Vec<RouteDay>, StoreError>;
    /// The tenants of the runs created at or after `since_ms`, the one with the newest run
    /// first (ties by tenant), at most `limit` (1 to [`MAX_PAGE`]): each with its newest run's
    /// tier and its runs since then.
    async fn recent_tenants(
        &self,
        since_ms: u64,
        limit: u32,
    ) -> Result<Vec<TenantSeen>, StoreError>;
}

/// [`Store::last_canaries`] from canary attempts: each provider's newest, sorted by provider.
pub(crate) fn newest_per_provider(attempts: Vec<AttemptRecord>) -> Vec<CanaryRecord> {
    let mut newest: std::collections::BTreeMap<String, AttemptRecord> = Default::default();
    for attempt in attempts {
        let Some(provider) = CanaryRecord::provider_of(&attempt.run_id) else {
            continue;
        };
        match newest.get(provider) {
            Some(kept) if kept.t_ms >= attempt.t_ms => {}
            _ => {
                newest.insert(provider.to_string(), attempt);
            }
        }
    }
    newest
        .into_iter()
        .map(|(provider, attempt)| CanaryRecord { provider, attempt })
        .collect()
}

/// The order [`Store::count_by_status`] promises, by the text forms people read.
pub(crate) fn sort_counts(counts: &mut [StatusCount]) {
    counts.sort_by_key(|c| (c.status.as_str(), c.code.map(Code::as_str)));
}
