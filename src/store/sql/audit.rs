//! The audit trail ([`crate::store::audit`]) in its own table, the same SQL on both backends.
//! An entry is written at once, not through the batching writer: an operator's action is rare,
//! and its entry should be there when the action is answered.

use super::SqlStore;
use super::db::{WriteTx, db_error, on_db, to_i64};
use super::rows::{Columns, from_i64};
use crate::store::StoreError;
use crate::store::audit::{AuditEntry, AuditLog, MAX_AUDIT_PAGE};
use async_trait::async_trait;

const INSERT: &str =
    "INSERT INTO audit (id, t_ms, actor, action, target, detail) VALUES ($1, $2, $3, $4, $5, $6)";
const NEWEST: &str = "SELECT id, t_ms, actor, action, target, detail FROM audit \
     ORDER BY id DESC LIMIT $1";
const OLDER: &str = "SELECT id, t_ms, actor, action, target, detail FROM audit \
     WHERE id < $2 ORDER BY id DESC LIMIT $1";

#[async_trait]
impl AuditLog for SqlStore {
    async fn record_action(&self, entry: &AuditEntry) -> Result<(), StoreError> {
        let t_ms = to_i64(entry.t_ms, "t_ms")?;
        on_db!(self, |pool| {
            let mut tx = pool.write_tx().await?;
            sqlx::query(INSERT)
                .bind(&entry.id)
                .bind(t_ms)
                .bind(&entry.actor)
                .bind(&entry.action)
                .bind(&entry.target)
                .bind(&entry.detail)
                .execute(&mut *tx)
                .await
                .map_err(db_error)?;
            tx.commit().await.map_err(db_error)?;
            Ok(())
        })
    }

    async fn actions(
        &self,
        before: Option<&str>,
        limit: u32,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        let limit = i64::from(limit.clamp(1, MAX_AUDIT_PAGE));
        on_db!(self, |pool| {
            let query = match before {
                Some(id) => sqlx::query(OLDER).bind(limit).bind(id),
                None => sqlx::query(NEWEST).bind(limit),
            };
            let rows = query.fetch_all(pool).await.map_err(db_error)?;
            rows.iter()
                .map(|row| {
                    Ok(AuditEntry {
                        id: row.text("id")?,
                        t_ms: from_i64(row.int("t_ms")?, "t_ms")?,
                        actor: row.text("actor")?,
                        action: row.text("action")?,
                        target: row.text("target")?,
                        detail: row.text("detail")?,
                    })
                })
                .collect()
        })
    }
}
