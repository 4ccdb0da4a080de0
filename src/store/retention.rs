//! Retention (docs/operations.md, "Retention and keys"): SQL rows are the audit trail and stay
//! until an operator prunes them with `worker prune --older-than-days N`; run events in Redis
//! expire on their own `FREEWAY_EVENTS_KEEP_S` after the run ends (see [`crate::events`]).
//!
//! Pruning deletes finished runs (succeeded, failed, refused) last updated before the cutoff, with
//! their attempts, approvals and idempotency keys, and canaries made before the cutoff. Transcripts
//! are the users' conversations, not run records: their messages stay, except turns a regenerate
//! replaced (soft-deleted) before the cutoff. Runs still queued, delayed, running or awaiting
//! approval are never pruned.

use super::StoreError;
use super::sql::SqlStore;
use super::sql::db::{WriteTx, db_error, on_db, to_i64};

/// What one prune removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Pruned {
    pub runs: u64,
    pub attempts: u64,
    pub canaries: u64,
    pub approvals: u64,
    pub messages: u64,
}

/// The finished runs last updated before `$1`.
macro_rules! old_runs {
    () => {
        "SELECT run_id FROM runs WHERE status IN ('succeeded', 'failed', 'refused') AND updated_ms < $1"
    };
}

impl SqlStore {
    /// Delete what finished before `cutoff_ms` (epoch ms), in one transaction.
    pub async fn prune(&self, cutoff_ms: u64) -> Result<Pruned, StoreError> {
        const ATTEMPTS: &str = concat!("DELETE FROM attempts WHERE run_id IN (", old_runs!(), ")");
        const APPROVALS: &str =
            concat!("DELETE FROM approvals WHERE run_id IN (", old_runs!(), ")");
        const JOBS: &str = concat!("DELETE FROM run_jobs WHERE run_id IN (", old_runs!(), ")");
        // A pruned run's idempotency key is free again.
        const KEYS: &str = concat!("DELETE FROM run_keys WHERE run_id IN (", old_runs!(), ")");
        const RUNS: &str = concat!("DELETE FROM runs WHERE run_id IN (", old_runs!(), ")");
        const CANARIES: &str = "DELETE FROM attempts WHERE kind = 'canary' AND t_ms < $1";
        const MESSAGES: &str =
            "DELETE FROM messages WHERE deleted_ms IS NOT NULL AND deleted_ms < $1";
        let cutoff = to_i64(cutoff_ms, "cutoff_ms")?;
        on_db!(self, |pool| {
            let mut tx = pool.write_tx().await?;
            let mut pruned = Pruned::default();
            for (sql, count) in [
                (ATTEMPTS, &mut pruned.attempts),
                (CANARIES, &mut pruned.canaries),
                (APPROVALS, &mut pruned.approvals),
                (JOBS, &mut Default::default()),
                (KEYS, &mut Default::default()),
                (RUNS, &mut pruned.runs),
                (MESSAGES, &mut pruned.messages),
            ] {
                *count = sqlx::query(sql)
                    .bind(cutoff)
                    .execute(&mut *tx)
                    .await
                    .map_err(db_error)?
                    .rows_affected();
            }
            tx.commit().await.map_err(db_error)?;
            Ok(pruned)
        })
    }
}
