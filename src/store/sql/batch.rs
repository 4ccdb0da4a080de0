//! One batch of the engine's writes as SQL: the statements, built once per driver (a
//! multi-row statement per kind of write, in a few sizes), and applying a batch with them in one
//! transaction, idempotency keys claimed first. The writer task (`writer`) decides what goes
//! into a batch, when, and what happens when it fails.

use super::db::{Db, WriteTx, db_error};
use super::rows::{AttemptRow, DecisionRow, MessageRow, RunRow};
use crate::store::StoreError;
use sqlx::{AssertSqlSafe, Row};
use std::collections::HashMap;
use std::sync::Arc;

/// One write, with every value already converted to what the columns hold.
pub(super) enum Write {
    /// Insert the run and its conversation unless the run exists, with the job it was enqueued
    /// as when there is one. With `idem_key` (`<user_id>/<idempotency_key>`), only when no other
    /// run holds that key: the caller learns which one does
    /// ([`Writer::create`](super::writer::Writer::create)).
    CreateRun {
        row: Box<RunRow>,
        job: Option<String>,
        idem_key: Option<String>,
    },
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
    Decide(DecisionRow),
    /// Rewrite the probe row: proof that writes commit.
    Probe {
        now: i64,
    },
}

/// Created runs that were not inserted because another run holds their idempotency key: the
/// run id each would have had, and the run that holds its key.
pub(super) type KeyHeld = HashMap<String, String>;

/// Columns of `runs` in a row of values, and of the other tables' multi-row inserts.
const RUN_COLUMNS: usize = 34;
const ENSURE_COLUMNS: usize = 5;
const RESERVE_COLUMNS: usize = 4;
const MESSAGE_COLUMNS: usize = 11;
const ATTEMPT_COLUMNS: usize = 14;

const INSERT_RUNS: &str = concat!("INSERT INTO runs (", run_columns!(), ") VALUES ");
const CREATE_RUNS_TAIL: &str = " ON CONFLICT (run_id) DO NOTHING";
const SAVE_RUNS_TAIL: &str = " ON CONFLICT (run_id) DO UPDATE SET status = excluded.status, \
     code = excluded.code, calls = excluded.calls, step1_attempts = excluded.step1_attempts, \
     retried = excluded.retried, steps = excluded.steps, route_index = excluded.route_index, \
     input_applied = excluded.input_applied, ambiguous_stop = excluded.ambiguous_stop, \
     emitted = excluded.emitted, snoozes = excluded.snoozes, output = excluded.output, \
     incomplete = excluded.incomplete, prompt_tokens = excluded.prompt_tokens, \
     completion_tokens = excluded.completion_tokens, total_tokens = excluded.total_tokens, \
     pending_tool_call = excluded.pending_tool_call, summary = excluded.summary, \
     cost_usd = excluded.cost_usd, updated_ms = excluded.updated_ms";
const PROBE: &str = "INSERT INTO store_probe (id, t_ms) VALUES (1, $1) \
     ON CONFLICT (id) DO UPDATE SET t_ms = excluded.t_ms";
const INSERT_JOBS: &str = "INSERT INTO run_jobs (run_id, job) VALUES ";
const INSERT_JOBS_TAIL: &str = " ON CONFLICT (run_id) DO NOTHING";
/// Claims idempotency keys; the rows it returns are the claims this transaction won.
const CLAIM_KEYS: &str = "INSERT INTO run_keys (idem_key, run_id) VALUES ";
const CLAIM_KEYS_TAIL: &str = " ON CONFLICT (idem_key) DO NOTHING RETURNING run_id";
const KEY_HOLDER: &str = "SELECT run_id FROM run_keys WHERE idem_key = $1";
const ENSURE_CONVERSATIONS: &str =
    "INSERT INTO conversations (id, user_id, created_ms, updated_ms, next_seq) VALUES ";
const ENSURE_CONVERSATIONS_TAIL: &str = " ON CONFLICT (id) DO NOTHING";
/// Reserves positions for a batch's appends, a row per conversation. Taking the
/// conversation's row (creating it when an append comes first) orders concurrent appenders on
/// PostgreSQL. A duplicate append leaves a gap in the positions, which only order the messages.
const RESERVE_SEQS: &str =
    "INSERT INTO conversations (id, next_seq, created_ms, updated_ms) VALUES ";
const RESERVE_SEQS_TAIL: &str = " ON CONFLICT (id) DO UPDATE \
     SET next_seq = conversations.next_seq + excluded.next_seq, updated_ms = excluded.updated_ms \
     RETURNING id, next_seq";
const INSERT_MESSAGES: &str = "INSERT INTO messages \
     (id, conversation_id, seq, run_id, msg_key, role, content, tool_calls, tool_call_id, \
     turn_fields, created_ms) VALUES ";
const INSERT_MESSAGES_TAIL: &str = " ON CONFLICT (run_id, msg_key) DO NOTHING";
const INSERT_ATTEMPTS: &str = "INSERT INTO attempts (run_id, n, step, route, http_status, error, \
     verdict, retry_hint_ms, ratelimit_remaining, provider_name, latency_ms, t_ms, kind, cost_usd) \
     VALUES ";
// An attempt is recorded `lost` as it is counted, then replaced by how its call ended.
const INSERT_ATTEMPTS_TAIL: &str = " ON CONFLICT (run_id, n) DO UPDATE SET step = excluded.step, \
     route = excluded.route, http_status = excluded.http_status, error = excluded.error, \
     verdict = excluded.verdict, retry_hint_ms = excluded.retry_hint_ms, \
     ratelimit_remaining = excluded.ratelimit_remaining, provider_name = excluded.provider_name, \
     latency_ms = excluded.latency_ms, t_ms = excluded.t_ms, cost_usd = excluded.cost_usd";
const RECORD_APPROVAL: &str = "INSERT INTO approvals (run_id, tool_call_id, tool_call, created_ms) \
     VALUES ($1, $2, $3, $4) ON CONFLICT (run_id, tool_call_id) DO NOTHING";
// The first answer stays: a second one (a retried request) changes nothing.
const RECORD_DECISION: &str = "UPDATE approvals SET decision = $3, result = $4, \
     continuation_run_id = $5, decided_ms = $6 \
     WHERE run_id = $1 AND tool_call_id = $2 AND decision IS NULL";
const DELETE_LAST_TURN: &str = "UPDATE messages SET deleted_ms = $2 \
     WHERE conversation_id = $1 AND deleted_ms IS NULL AND seq > COALESCE((\
         SELECT MAX(seq) FROM messages \
         WHERE conversation_id = $1 AND deleted_ms IS NULL AND role = 'user'), 0)";

/// How a driver numbers parameters in the statements built here.
#[derive(Clone, Copy)]
pub(super) enum Params {
    /// `$1, $2, …`: PostgreSQL.
    Numbered,
    /// `?, ?, …` in order: SQLite, where sqlx looks a numbered parameter up by name, a scan of
    /// every name per parameter, quadratic in a statement of thousands.
    Anonymous,
}

/// The writes that go in multi-row statements: `INSERT … VALUES`, a group of parameters per row,
/// the conflict clause.
#[derive(Clone, Copy)]
enum MultiRow {
    ClaimKeys,
    CreateRuns,
    EnsureConversations,
    RunJobs,
    SaveRuns,
    ReserveSeqs,
    Messages,
    Attempts,
}

impl MultiRow {
    const ALL: [MultiRow; 8] = [
        MultiRow::ClaimKeys,
        MultiRow::CreateRuns,
        MultiRow::EnsureConversations,
        MultiRow::RunJobs,
        MultiRow::SaveRuns,
        MultiRow::ReserveSeqs,
        MultiRow::Messages,
        MultiRow::Attempts,
    ];

    /// (head, columns a row, tail).
    fn shape(self) -> (&'static str, usize, &'static str) {
        match self {
            MultiRow::ClaimKeys => (CLAIM_KEYS, 2, CLAIM_KEYS_TAIL),
            MultiRow::CreateRuns => (INSERT_RUNS, RUN_COLUMNS, CREATE_RUNS_TAIL),
            MultiRow::EnsureConversations => (
                ENSURE_CONVERSATIONS,
                ENSURE_COLUMNS,
                ENSURE_CONVERSATIONS_TAIL,
            ),
            MultiRow::RunJobs => (INSERT_JOBS, 2, INSERT_JOBS_TAIL),
            MultiRow::SaveRuns => (INSERT_RUNS, RUN_COLUMNS, SAVE_RUNS_TAIL),
            MultiRow::ReserveSeqs => (RESERVE_SEQS, RESERVE_COLUMNS, RESERVE_SEQS_TAIL),
            MultiRow::Messages => (INSERT_MESSAGES, MESSAGE_COLUMNS, INSERT_MESSAGES_TAIL),
            MultiRow::Attempts => (INSERT_ATTEMPTS, ATTEMPT_COLUMNS, INSERT_ATTEMPTS_TAIL),
        }
    }
}

/// Row counts a multi-row statement comes in: 1, 2, 4, … up to [`MAX_ROWS`].
const ROW_COUNTS: usize = 7;
/// The most rows one statement carries. A statement of exactly a batch's rows had a new text at
/// nearly every batch, so the connection prepared it again (inside the file's write lock) and
/// kept up to 100 of them, 8 MB at 5,000 runs in flight; a batch's rows now go in statements of
/// these few sizes, each prepared once per connection.
const MAX_ROWS: usize = 1 << (ROW_COUNTS - 1);

/// The text of every multi-row statement in every row count, built once per writer.
pub(super) struct Statements {
    sql: Vec<[Arc<str>; ROW_COUNTS]>,
}

impl Statements {
    pub(super) fn new(params: Params) -> Statements {
        // `get` finds a kind's statements at its discriminant.
        debug_assert!(
            MultiRow::ALL
                .iter()
                .enumerate()
                .all(|(i, &k)| k as usize == i)
        );
        let sql = MultiRow::ALL
            .iter()
            .map(|kind| {
                let (head, columns, tail) = kind.shape();
                std::array::from_fn(|i| multi_row(head, 1 << i, columns, tail, params).into())
            })
            .collect();
        Statements { sql }
    }

    /// `kind`'s statement for `rows`, a count [`chunks`] gives.
    fn get(&self, kind: MultiRow, rows: usize) -> AssertSqlSafe<Arc<str>> {
        debug_assert!(rows.is_power_of_two() && rows <= MAX_ROWS, "{rows} rows");
        AssertSqlSafe(self.sql[kind as usize][rows.trailing_zeros() as usize].clone())
    }
}

/// `n` rows cut into statements' row counts, in order: the largest that fits, in turn.
fn chunks(n: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    let mut start = 0;
    std::iter::from_fn(move || {
        let left = n - start;
        if left == 0 {
            return None;
        }
        let rows = MAX_ROWS.min(1 << left.ilog2());
        start += rows;
        Some(start - rows..start)
    })
}

/// `INSERT … VALUES ` + `rows` groups of `columns` parameters + the conflict clause.
fn multi_row(head: &str, rows: usize, columns: usize, tail: &str, params: Params) -> String {
    let mut sql = String::with_capacity(head.len() + tail.len() + rows * columns * 7);
    sql.push_str(head);
    for row in 0..rows {
        sql.push_str(if row == 0 { "(" } else { ", (" });
        for col in 0..columns {
            if col > 0 {
                sql.push_str(", ");
            }
            match params {
                Params::Numbered => {
                    sql.push('$');
                    sql.push_str(&(row * columns + col + 1).to_string());
                }
                Params::Anonymous => sql.push('?'),
            }
        }
        sql.push(')');
    }
    sql.push_str(tail);
    sql
}

/// A batch's writes by kind, in queue order within each kind. Writes of different callers do not
/// depend on each other (each caller awaits its own); one caller's writes are applied in the
/// order its kinds are: created runs, saved runs, approvals and their answers, deleted turns
/// before appended messages (a regenerate's new turn is never deleted), then attempts.
#[derive(Default)]
struct ByKind<'a> {
    /// (idempotency key, run id) of the created runs that carry a key.
    keys: Vec<(&'a str, &'a str)>,
    creates: Vec<&'a RunRow>,
    /// (run id, job JSON) of the created runs that carry their job.
    jobs: Vec<(&'a str, &'a str)>,
    saves: Vec<&'a RunRow>,
    approvals: Vec<(&'a RunRow, &'a str, &'a str)>,
    appends: Vec<&'a MessageRow>,
    attempts: Vec<&'a AttemptRow>,
    deletes: Vec<(&'a str, i64)>,
    decisions: Vec<&'a DecisionRow>,
    /// The latest probe time of the batch, if one asked.
    probe: Option<i64>,
}

impl<'a> ByKind<'a> {
    fn of(writes: &[&'a Write]) -> ByKind<'a> {
        let mut k = ByKind::default();
        for write in writes {
            match write {
                Write::CreateRun { row, job, idem_key } => {
                    if let Some(key) = idem_key {
                        k.keys.push((key, &row.run_id));
                    }
                    k.creates.push(row);
                    if let Some(job) = job {
                        k.jobs.push((&row.run_id, job));
                    }
                }
                Write::SaveRun { row, approval } => {
                    // A run saved twice in one batch keeps its later save, as if both were applied
                    // in order (PostgreSQL refuses an upsert that touches one row twice).
                    match k.saves.iter_mut().find(|r| r.run_id == row.run_id) {
                        Some(earlier) => *earlier = row,
                        None => k.saves.push(row),
                    }
                    if let Some((call_id, call)) = approval {
                        k.approvals.push((row, call_id, call));
                    }
                }
                Write::Append(m) => k.appends.push(m),
                // One attempt twice in a batch keeps its later record (PostgreSQL refuses an
                // upsert that touches one row twice).
                Write::Attempt(a) => {
                    match k
                        .attempts
                        .iter_mut()
                        .find(|e| (&e.run_id, e.n) == (&a.run_id, a.n))
                    {
                        Some(earlier) => *earlier = a,
                        None => k.attempts.push(a),
                    }
                }
                Write::DeleteLastTurn {
                    conversation_id,
                    now,
                } => k.deletes.push((conversation_id, *now)),
                Write::Decide(d) => k.decisions.push(d),
                Write::Probe { now } => k.probe = k.probe.max(Some(*now)),
            }
        }
        k
    }

    /// The conversations the appends go to, each once, with how many messages it gets and the
    /// time of the latest; sorted, so that batches of several processes lock conversations in one
    /// order.
    fn append_counts(&self) -> Vec<(&'a str, i64, i64)> {
        let mut counts: Vec<(&str, i64, i64)> = Vec::new();
        for m in &self.appends {
            match counts.iter_mut().find(|(c, _, _)| *c == m.conversation_id) {
                Some((_, n, now)) => {
                    *n += 1;
                    *now = (*now).max(m.now);
                }
                None => counts.push((&m.conversation_id, 1, m.now)),
            }
        }
        counts.sort_unstable();
        counts
    }
}

/// Each append's position, from the last position reserved per conversation: a conversation that
/// got `n` appends in the batch hands out `last - n + 1 ..= last`, in queue order.
fn positions(
    appends: &[&MessageRow],
    last: &HashMap<String, i64>,
    counts: &[(&str, i64, i64)],
) -> Result<Vec<i64>, StoreError> {
    let mut next = HashMap::new();
    for (conversation, n, _) in counts {
        let Some(last) = last.get(*conversation) else {
            return Err(StoreError::Corrupt(format!(
                "conversation {conversation:?} got no position for its messages"
            )));
        };
        next.insert(*conversation, last - n + 1);
    }
    appends
        .iter()
        .map(|m| {
            let seq = next.get_mut(m.conversation_id.as_str()).ok_or_else(|| {
                StoreError::Corrupt(format!("no position for {:?}", m.conversation_id))
            })?;
            *seq += 1;
            Ok(*seq - 1)
        })
        .collect()
}

/// [`commit`] for one driver: the same statements, typed for `$pool`'s database. Each kind's
/// rows go in the few multi-row statements [`chunks`] cuts them into.
macro_rules! apply_all {
    ($pool:expr, $statements:expr, $writes:expr) => {{
        let (k, sql) = (ByKind::of($writes), $statements);
        let mut tx = $pool.write_tx().await?;
        // Idempotency keys first: a run whose key another run holds is not created at all.
        let mut held = KeyHeld::new();
        let claims = first_claims(&k.keys, &mut held);
        for rows in chunks(claims.len()) {
            let mut q = sqlx::query(sql.get(MultiRow::ClaimKeys, rows.len()));
            for (key, run_id) in &claims[rows.clone()] {
                q = q.bind(*key).bind(*run_id);
            }
            let won = q.fetch_all(&mut *tx).await.map_err(db_error)?;
            let won = won
                .iter()
                .map(|r| r.try_get::<String, _>("run_id"))
                .collect::<Result<Vec<_>, _>>()
                .map_err(db_error)?;
            for (key, run_id) in &claims[rows] {
                if won.iter().any(|w| w == run_id) {
                    continue;
                }
                let holder: String = sqlx::query(KEY_HOLDER)
                    .bind(*key)
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(db_error)?
                    .try_get("run_id")
                    .map_err(db_error)?;
                if holder != *run_id {
                    held.insert(run_id.to_string(), holder);
                }
            }
        }
        // A later run of a key in this batch is held by whichever run holds its first one's.
        let holders: Vec<(String, String)> = held
            .iter()
            .filter_map(|(run, first)| Some((run.clone(), held.get(first)?.clone())))
            .collect();
        held.extend(holders);
        let creates: Vec<&RunRow> = k
            .creates
            .iter()
            .copied()
            .filter(|row| !held.contains_key(&row.run_id))
            .collect();
        let jobs: Vec<(&str, &str)> = k
            .jobs
            .iter()
            .copied()
            .filter(|(run_id, _)| !held.contains_key(*run_id))
            .collect();
        for rows in chunks(creates.len()) {
            let mut q = sqlx::query(sql.get(MultiRow::CreateRuns, rows.len()));
            for row in &creates[rows.clone()] {
                q = bind_run!(q, row);
            }
            q.execute(&mut *tx).await.map_err(db_error)?;
            let mut q = sqlx::query(sql.get(MultiRow::EnsureConversations, rows.len()));
            for row in &creates[rows] {
                q = q
                    .bind(&row.conversation_id)
                    .bind(&row.user_id)
                    .bind(row.created_ms)
                    .bind(row.created_ms)
                    .bind(0_i64);
            }
            q.execute(&mut *tx).await.map_err(db_error)?;
        }
        for rows in chunks(jobs.len()) {
            let mut q = sqlx::query(sql.get(MultiRow::RunJobs, rows.len()));
            for (run_id, job) in &jobs[rows] {
                q = q.bind(*run_id).bind(*job);
            }
            q.execute(&mut *tx).await.map_err(db_error)?;
        }
        for rows in chunks(k.saves.len()) {
            let mut q = sqlx::query(sql.get(MultiRow::SaveRuns, rows.len()));
            for row in &k.saves[rows] {
                q = bind_run!(q, row);
            }
            q.execute(&mut *tx).await.map_err(db_error)?;
        }
        for (row, call_id, call) in &k.approvals {
            sqlx::query(RECORD_APPROVAL)
                .bind(&row.run_id)
                .bind(call_id)
                .bind(call)
                .bind(row.updated_ms)
                .execute(&mut *tx)
                .await
                .map_err(db_error)?;
        }
        for d in &k.decisions {
            sqlx::query(RECORD_DECISION)
                .bind(&d.run_id)
                .bind(&d.tool_call_id)
                .bind(d.decision)
                .bind(&d.result)
                .bind(&d.continuation_run_id)
                .bind(d.decided_ms)
                .execute(&mut *tx)
                .await
                .map_err(db_error)?;
        }
        for (conversation, now) in &k.deletes {
            sqlx::query(DELETE_LAST_TURN)
                .bind(*conversation)
                .bind(*now)
                .execute(&mut *tx)
                .await
                .map_err(db_error)?;
        }
        if !k.appends.is_empty() {
            let counts = k.append_counts();
            let mut last = HashMap::new();
            for rows in chunks(counts.len()) {
                let mut q = sqlx::query(sql.get(MultiRow::ReserveSeqs, rows.len()));
                for (conversation, n, now) in &counts[rows] {
                    q = q.bind(*conversation).bind(*n).bind(*now).bind(*now);
                }
                for r in q.fetch_all(&mut *tx).await.map_err(db_error)? {
                    let id: String = r.try_get("id").map_err(db_error)?;
                    last.insert(id, r.try_get::<i64, _>("next_seq").map_err(db_error)?);
                }
            }
            let seqs = positions(&k.appends, &last, &counts)?;
            for rows in chunks(k.appends.len()) {
                let mut q = sqlx::query(sql.get(MultiRow::Messages, rows.len()));
                for (m, seq) in k.appends[rows.clone()].iter().zip(&seqs[rows]) {
                    q = q
                        .bind(&m.id)
                        .bind(&m.conversation_id)
                        .bind(*seq)
                        .bind(&m.run_id)
                        .bind(&m.key)
                        .bind(&m.role)
                        .bind(&m.content)
                        .bind(&m.tool_calls)
                        .bind(&m.tool_call_id)
                        .bind(&m.turn_fields)
                        .bind(m.now);
                }
                q.execute(&mut *tx).await.map_err(db_error)?;
            }
        }
        for rows in chunks(k.attempts.len()) {
            let mut q = sqlx::query(sql.get(MultiRow::Attempts, rows.len()));
            for a in &k.attempts[rows] {
                q = q
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
                    .bind(a.kind)
                    .bind(a.cost_usd);
            }
            q.execute(&mut *tx).await.map_err(db_error)?;
        }
        if let Some(now) = k.probe {
            sqlx::query(PROBE)
                .bind(now)
                .execute(&mut *tx)
                .await
                .map_err(db_error)?;
        }
        tx.commit().await.map_err(db_error)?;
        Ok(held)
    }};
}

/// The claims a batch makes of `keys` ((idempotency key, run id), in queue order): the first run
/// of each key, sorted by key, so that the transactions of several processes claiming the same
/// keys take them in one order (PostgreSQL would otherwise deadlock them). A later run of a key
/// is `held` by the first at once.
fn first_claims<'a>(keys: &[(&'a str, &'a str)], held: &mut KeyHeld) -> Vec<(&'a str, &'a str)> {
    let mut first: HashMap<&str, &str> = HashMap::with_capacity(keys.len());
    for &(key, run_id) in keys {
        let holder = *first.entry(key).or_insert(run_id);
        if holder != run_id {
            held.insert(run_id.to_string(), holder.to_string());
        }
    }
    let mut claims: Vec<(&str, &str)> = first.into_iter().collect();
    claims.sort_unstable();
    claims
}

/// Apply `writes` in one transaction and commit it: which created runs another run's key held.
pub(super) async fn commit(
    db: &Db,
    statements: &Statements,
    writes: &[&Write],
) -> Result<KeyHeld, StoreError> {
    match db {
        Db::Sqlite(pool) => apply_all!(pool, statements, writes),
        Db::Postgres(pool) => apply_all!(pool, statements, writes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_number_or_leave_anonymous_their_parameters() {
        let numbered = multi_row("INSERT INTO t (a, b) VALUES ", 2, 2, " X", Params::Numbered);
        assert_eq!(numbered, "INSERT INTO t (a, b) VALUES ($1, $2), ($3, $4) X");
        let anonymous = multi_row("V ", 2, 2, "", Params::Anonymous);
        assert_eq!(anonymous, "V (?, ?), (?, ?)");
    }

    #[test]
    fn rows_are_cut_into_statements_of_the_sizes_built_in_order() {
        for n in 0..=3 * MAX_ROWS + 7 {
            let cut: Vec<_> = chunks(n).collect();
            let mut next = 0;
            for rows in &cut {
                assert_eq!(rows.start, next, "{n}: {cut:?}");
                assert!(
                    rows.len().is_power_of_two() && rows.len() <= MAX_ROWS,
                    "{n}: {cut:?}"
                );
                next = rows.end;
            }
            assert_eq!(next, n, "{n}: {cut:?}");
            assert!(cut.len() <= n / MAX_ROWS + ROW_COUNTS, "{n}: {cut:?}");
        }
    }
}
